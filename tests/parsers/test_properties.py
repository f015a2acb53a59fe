"""Property tests: truncated, spliced and corrupted real fixtures never make a parser raise or
hang, and ingest always accounts for the file (ingested, partly ingested or quarantined)."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest
from ncclbot_sweep.parsers import FORMATS, ParseResult, detect_format, parse_source

from parser_fixtures import REAL, source

_FILES = sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix != ".md" and p.stat().st_size < 40_000)


def _load(i: int) -> bytes:
    data = _FILES[i % len(_FILES)].read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@st.composite
def mangled(draw) -> bytes:
    """A real fixture truncated, spliced with another, and with a few bytes corrupted."""
    data = _load(draw(st.integers(0, 10_000)))
    kind = draw(st.sampled_from(["truncate", "splice", "corrupt", "shuffle-lines", "all"]))
    if kind in ("truncate", "all"):
        data = data[: draw(st.integers(0, len(data)))]
    if kind in ("splice", "all"):
        other = _load(draw(st.integers(0, 10_000)))
        cut_a, cut_b = draw(st.integers(0, len(data))), draw(st.integers(0, len(other)))
        data = data[:cut_a] + other[cut_b:]
    if kind in ("corrupt", "all") and data:
        buf = bytearray(data)
        for _ in range(draw(st.integers(1, 20))):
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        data = bytes(buf)
    if kind == "shuffle-lines":
        lines = data.split(b"\n")
        data = b"\n".join(draw(st.permutations(lines)))
    return data


def _accounted(result: ParseResult) -> bool:
    return result.unusable or bool(result.issues) or any(result.count(t) for t in result.tables) \
        or not result.tables


@settings(max_examples=200, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
@given(mangled(), st.sampled_from(FORMATS))
def test_parsers_never_raise_on_mangled_input(data, forced):
    detected = detect_format(data[:65536])
    for fmt in {detected, forced} - {None}:
        result = parse_source(fmt, data, source("mangled.txt"))
        assert isinstance(result, ParseResult)
        assert _accounted(result)


@settings(max_examples=40, deadline=10_000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mangled(), min_size=1, max_size=3))
def test_ingest_accounts_for_every_mangled_file(blobs):
    with tempfile.TemporaryDirectory() as tmp:
        root, inputs = Path(tmp) / "ds", Path(tmp) / "in"
        inputs.mkdir()
        for k, blob in enumerate(blobs):
            (inputs / f"f{k}.txt").write_bytes(blob)
        summary = ingest([inputs], root)
        sources = datasets.read_table(root, "sources")
        assert summary.files == len(blobs) == summary.skipped + len(sources)
        assert len(set(sources["source_sha256"])) == len(sources)
        distinct = len({blob for blob in blobs})
        assert len(sources) == distinct
        assert set(sources["status"]) <= {"ingested", "partial", "quarantined"}
        quarantined = sources[sources["status"] == "quarantined"]
        q = datasets.read_table(root, "quarantine")
        assert set(quarantined["source_sha256"]) <= set(q["source_sha256"])


_TEXT = [p for p in _FILES if p.parent.name == "A" and p.suffix == ".txt"]


def _rows_of(parser_result) -> list[tuple]:
    return sorted((r["run_id"], r["line"], r["in_place"], r["size_bytes"], r["time_us"], r["cycle"])
                  for r in parser_result.rows("iterations"))


@settings(max_examples=60, deadline=3000)
@given(st.integers(0, 10_000), st.lists(st.integers(1, 4000), min_size=1, max_size=12), st.booleans())
def test_text_parser_result_does_not_depend_on_chunking(pick, cuts, threaded):
    from ncclbot_sweep.parsers.nccltests_text import TextParser

    data = _TEXT[pick % len(_TEXT)].read_bytes()
    whole = TextParser(source())
    whole.feed(data)
    expected = whole.close()
    chunks, pos = [], 0
    for size in cuts:
        chunks.append(data[pos:pos + size])
        pos += size
    chunks.append(data[pos:])
    parser = TextParser(source())
    if threaded:
        parser.feed_all(chunks)
    else:
        for chunk in chunks:
            parser.feed(chunk)
    got = parser.close()
    assert _rows_of(got) == _rows_of(expected)
    assert [(r["outcome"], r["ranks"], r["nodes"]) for r in got.rows("runs")] == \
        [(r["outcome"], r["ranks"], r["nodes"]) for r in expected.rows("runs")]


@st.composite
def chunked_lines(draw) -> tuple[list[bytes], int]:
    """Lines of random lengths (CR LF and CR ends too), cut into chunks anywhere, and a line limit
    (no UTF-8 BOM: a leading one is not part of the text)."""
    lines = draw(st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")
                                                     .replace(b"\xef", b"")), max_size=12))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=len(lines), max_size=len(lines)))
    data = b"".join(line + end for line, end in zip(lines, ends)) + draw(st.binary(max_size=5)).replace(b"\r", b"")\
        .replace(b"\xef", b"")
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])], draw(st.integers(1, 9))


@settings(max_examples=400, deadline=None)
@given(chunked_lines())
def test_whole_lines_leaves_out_exactly_the_long_lines_wherever_chunks_are_cut(case):
    from ncclbot_sweep.parsers.common import whole_lines

    chunks, limit = case
    issues = []
    out = list(whole_lines(chunks, issues, limit=limit))
    lines = b"".join(chunks).replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    assert b"".join(out) == b"\n".join(b"" if len(line) > limit else line for line in lines)
    assert [(i.line, i.reason.split()[2]) for i in issues] == [
        (n, str(len(line))) for n, line in enumerate(lines, 1) if len(line) > limit]
    assert all(piece.endswith(b"\n") for piece in out[:-1])

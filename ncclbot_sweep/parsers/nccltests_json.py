"""nccl-tests JSON outputs -> ``runs`` and ``iterations`` rows.

Three shapes are read:

* nccl-tests ``-J`` (``"version": 3``, 2.19+): booleans written as strings, ``root`` as a
  padded string, ``nwrong`` as a float; with ``-I`` each result carries ``times_us`` for
  every measured iteration, which become one row each (``iteration`` 0-based, in the order
  measured after warm-up; ``skipped_iterations`` offsets it). Files cut short by a failed run are read up to their last complete result.
* the PR-318 fork's ``"nccl-tests structured output"`` (``oop_*``/``ip_*`` keys per size).
* rccl-tests JSON lines (one object per size and placement).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from ncclbot_sweep.names import canonical_collective
from ncclbot_sweep.parsers.common import Issue, ParseResult, SourceInfo, nccl_version_from_code, to_float, to_int
from ncclbot_sweep.parsers.jsonfix import load_document
from ncclbot_sweep.parsers.library import library_of_gpu
from ncclbot_sweep.parsers.nccltests_text import collective_from_name

__all__ = ["parse_nccltests_json", "parse_rccl_jsonlines", "looks_like_rccl_jsonlines"]

log = logging.getLogger(__name__)


def _nan(value: Any) -> float:
    out = to_float(value)
    return np.nan if out is None else out


def _name(value: Any) -> str | None:
    """A dtype or op name; anything else a corrupt file holds there becomes its text."""
    return None if value is None else value.strip() if isinstance(value, str) else json.dumps(value)[:50]


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _base(source: SourceInfo, collective: str | None, run_index: int = 0) -> dict[str, Any]:
    meta = source.meta
    return {
        "run_id": source.run_id_for(run_index),
        "fabric": meta.get("fabric") or source.fabric,
        "collective": meta.get("collective") or collective,
        "nodes": meta.get("nodes"),
        "ranks": meta.get("ranks"),
        "arm": meta.get("arm"),
        "policy": meta.get("policy"),
        "source_path": source.path,
        "source_sha256": source.sha256,
    }


def parse_nccltests_json(text: str, source: SourceInfo) -> ParseResult:
    """Parse ``-J`` output or the PR-318 fork's JSON. Never raises on malformed input."""
    result = ParseResult()
    doc, truncated = load_document(text, result)
    if result.unusable:
        return result
    if not isinstance(doc, dict):
        result.unusable = True
        result.issues.append(Issue(1, "JSON top level is not an object"))
        return result
    if truncated:
        result.issues.append(Issue(None, "JSON is truncated (the run stopped while writing it); "
                                         "complete results were kept"))
    if doc.get("identifier") == "nccl-tests structured output" or "benchmark" in doc:
        preamble = text[: text.find("{")]
        _fork(doc, source, result, truncated, collective_from_name(preamble))
    elif "results" in doc or "config" in doc:
        _v3(doc, source, result, truncated)
    else:
        result.unusable = True
        result.issues.append(Issue(1, "JSON has neither 'results' (nccl-tests -J) nor 'benchmark'"))
    return result


def _binary_collective(args: list[Any], source: SourceInfo) -> tuple[str | None, str | None]:
    binary = str(args[0]).rsplit("/", 1)[-1] if args else None
    coll = None
    if binary:
        try:
            coll = canonical_collective(binary.removesuffix("_mpi"))
        except ValueError:
            coll = None
    return binary, coll or collective_from_name(source.path)


def _typed(doc: dict, key: str, kind: type, result: ParseResult, where: str = "") -> Any:
    """``doc[key]`` when it has the type nccl-tests writes, else an empty one and an issue."""
    value = doc.get(key)
    if value is None or isinstance(value, kind):
        return value or kind()
    result.issues.append(Issue(None, f"JSON field {where}{key!r} is {type(value).__name__}, not "
                                     f"{'an object' if kind is dict else 'an array'}; ignored"))
    return kind()


def _v3(doc: dict, source: SourceInfo, result: ParseResult, truncated: bool) -> None:
    config = _typed(doc, "config", dict, result)
    binary, coll = _binary_collective(_typed(doc, "args", list, result), source)
    base = _base(source, coll)
    devices = _typed(config, "devices", list, result, "config.")
    hosts: list[str] = []
    for dev in devices:
        host = dev.get("hostname") if isinstance(dev, dict) else None
        if host and host not in hosts:
            hosts.append(host)
    per_proc = (to_int(config.get("nthreads")) or 1) * (to_int(config.get("ngpus")) or 1)
    ranks = base["ranks"] or max(len(devices), per_proc)
    base["ranks"] = ranks
    iters = to_int(config.get("iterations"))
    nrows = 0
    sides = []
    for item in _typed(doc, "results", list, result):
        if not isinstance(item, dict):
            result.issues.append(Issue(None, f"JSON result is {type(item).__name__}, not an object; ignored"))
            continue
        for side, in_place in (("out_of_place", False), ("in_place", True)):
            got = _v3_side(item, side, in_place, iters)
            if got is not None:
                sides.append(got)
                nrows += len(got["time_us"])
    if sides:
        result.add("iterations", _v3_table(sides, base))
    oob = _typed(doc, "out_of_bounds", dict, result)
    errors = [e for e in _typed(doc, "errors", list, result) if isinstance(e, str) and e.strip()]
    failure = "; ".join(errors) or None
    if truncated:
        failure = (failure + "; " if failure else "") + "JSON truncated (run did not finish)"
    okay = _bool(oob.get("okay"))
    outcome = "failed" if (errors or truncated or okay is False or nrows == 0) else "ok"
    gpu_name = next((d.get("device_info") for d in devices if isinstance(d, dict)), None)
    result.add("runs", {
        **{k: base[k] for k in ("run_id", "fabric", "collective", "nodes", "ranks", "arm", "policy",
                                "source_path", "source_sha256")},
        "binary": binary, "nccl_version": nccl_version_from_code(doc.get("nccl_version")),
        "hosts": ",".join(hosts) or None, "n_hosts": len(hosts) or None,
        "gpu_name": gpu_name, "library": library_of_gpu(gpu_name),
        "outcome": outcome, "failure": failure,
        "min_bytes": to_int(config.get("minimum_bytes")), "max_bytes": to_int(config.get("maximum_bytes")),
        "warmup_iters": to_int(config.get("warmup_iters")), "iters": iters,
        "agg_iters": to_int(config.get("aggregated_iterations")), "validation": to_int(config.get("validation")),
        "graph": to_int(config.get("graph")), "cycles": 1 if nrows else 0,
        "oob_values": to_int(oob.get("count")),
        "avg_busbw_gbs": to_float(_typed(doc, "average_bus_bandwidth", dict, result).get("bandwidth")),
        "started_at": _timestamp(doc.get("start_time")), "source_format": "nccl-tests-json",
        "synthetic": True if doc.get("simulator") else None,
    })


def _timestamp(value: Any):
    import datetime as dt

    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.strptime(value.strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def _v3_side(item: dict, side: str, in_place: bool, iters: int | None) -> dict[str, Any] | None:
    """One placement of one size: its scalar columns and its times (per iteration or averaged)."""
    avg = item.get(side)
    if not isinstance(avg, dict):
        return None
    size = to_int(item.get("size"))
    out = {"size_bytes": size, "count": to_int(item.get("count")), "dtype": _name(item.get("type")),
           "redop": _name(item.get("redop")), "root": to_int(item.get("root")), "in_place": in_place,
           "wrong": to_int(avg.get("nwrong"))}
    per = item.get(f"{side}_per_iter")
    times = per.get("times_us") if isinstance(per, dict) else None
    if isinstance(times, list) and times:
        algbw, busbw = to_float(avg.get("alg_bw")), to_float(avg.get("bus_bw"))
        factor = busbw / algbw if algbw and busbw is not None else np.nan
        try:
            t = np.asarray(times, dtype=np.float64)
        except (TypeError, ValueError):
            t = np.array([to_float(x) if to_float(x) is not None else np.nan for x in times], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            alg = (size / t / 1e3) if size is not None else np.full(len(t), np.nan)
        alg[~np.isfinite(alg)] = np.nan
        # -I with a skip drops the first iterations from times_us: keep the measured position.
        skip = to_int(per.get("skipped_iterations")) or 0
        out.update(time_us=t, algbw_gbs=alg, busbw_gbs=alg * factor,
                   iteration=np.arange(skip, skip + len(t), dtype=np.float64), n_iters=1)
    else:
        out.update(time_us=np.array([_nan(avg.get("time"))]), algbw_gbs=np.array([_nan(avg.get("alg_bw"))]),
                   busbw_gbs=np.array([_nan(avg.get("bus_bw"))]),
                   iteration=np.array([np.nan]), n_iters=iters)
    return out


_SCALARS = ("size_bytes", "count", "dtype", "redop", "root", "in_place", "wrong", "n_iters")


def _v3_table(sides: list[dict[str, Any]], base: dict[str, Any]) -> pa.Table | list[dict[str, Any]]:
    """All placements and sizes of a file as one table (one write, one row group); as rows
    when a number does not fit 64 bits (ingest's column check then leaves it out with an issue)."""
    from ncclbot_sweep.parsers.textblock import constant

    if any(isinstance(s[k], int) and not -2**63 <= s[k] < 2**63 for s in sides for k in _SCALARS) \
            or any(np.nanmax(np.abs(s["iteration"]), initial=0) >= 2**31 for s in sides):
        return [{**base, **{k: s[k] for k in _SCALARS}, "cycle": 0, "time_us": float(s["time_us"][i]),
                 "algbw_gbs": float(s["algbw_gbs"][i]), "busbw_gbs": float(s["busbw_gbs"][i]),
                 "iteration": None if np.isnan(s["iteration"][i]) else int(s["iteration"][i])}
                for s in sides for i in range(len(s["time_us"]))]
    counts = np.array([len(s["time_us"]) for s in sides])
    n = int(counts.sum())
    cols: dict[str, Any] = {}
    for key in ("time_us", "algbw_gbs", "busbw_gbs", "iteration"):
        values = np.concatenate([s[key] for s in sides])
        arr = pa.array(values, from_pandas=True)
        cols[key] = arr.cast(pa.int32()) if key == "iteration" else arr
    for key in _SCALARS:
        per_side = [s[key] for s in sides]
        cols[key] = pa.array(np.repeat(np.array(per_side, dtype=object), counts).tolist())
    for key, value in base.items():
        typ = pa.int32() if key in ("nodes", "ranks") else pa.string()
        cols[key] = constant(value, n, typ)
    cols["cycle"] = pa.array(np.zeros(n, dtype=np.int32))
    return pa.table(cols)


def _fork(doc: dict, source: SourceInfo, result: ParseResult, truncated: bool, coll: str | None) -> None:
    base = _base(source, coll or collective_from_name(source.path))
    nrows = 0
    for entry in doc.get("benchmark") or []:
        if not isinstance(entry, dict):
            continue
        for size_text, cols in entry.items():
            if not isinstance(cols, dict):
                continue
            for pre, in_place in (("oop_", False), ("ip_", True)):
                if f"{pre}time" not in cols:
                    continue
                err = cols.get(f"{pre}error")
                result.add("iterations", {
                    **base, "size_bytes": to_int(size_text), "count": to_int(cols.get("count")),
                    "dtype": cols.get("type"), "redop": cols.get("redop"), "root": to_int(cols.get("root")),
                    "in_place": in_place, "cycle": 0, "time_us": to_float(cols.get(f"{pre}time")),
                    "algbw_gbs": to_float(cols.get(f"{pre}algbw")), "busbw_gbs": to_float(cols.get(f"{pre}busbw")),
                    "error": to_float(err),
                })
                nrows += 1
    result.add("runs", {
        **{k: base[k] for k in ("run_id", "fabric", "collective", "nodes", "ranks", "arm", "policy",
                                "source_path", "source_sha256")},
        "nccl_version": str(doc.get("version")) if doc.get("version") else None,
        "outcome": "failed" if truncated or not nrows else "ok",
        "failure": "JSON truncated (run did not finish)" if truncated else None,
        "cycles": 1 if nrows else 0, "source_format": "nccl-tests-json-fork",
    })


def looks_like_rccl_jsonlines(head: str) -> bool:
    """True when the first line is an rccl-tests JSON-lines record."""
    first = head.lstrip().split("\n", 1)[0]
    return first.startswith("{") and '"busBw"' in first and '"inPlace"' in first


def parse_rccl_jsonlines(text: str, source: SourceInfo) -> ParseResult:
    """rccl-tests ``-Z json`` output: one object per size and placement, one per line."""
    result = ParseResult()
    rows = []
    gpus = None
    coll = None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            result.issues.append(Issue(lineno, f"not a JSON line: {exc.msg}", line[:200]))
            continue
        if not isinstance(obj, dict) or "time" not in obj:
            result.issues.append(Issue(lineno, "JSON line without 'time'", line[:200]))
            continue
        try:
            coll = coll or canonical_collective(str(obj.get("name", "")))
        except ValueError:
            pass
        gpus = gpus or to_int(obj.get("gpus"))
        rows.append((lineno, obj))
    base = _base(source, coll or collective_from_name(source.path))
    base["ranks"] = base["ranks"] or gpus
    for lineno, obj in rows:
        result.add("iterations", {
            **base, "size_bytes": to_int(obj.get("size")), "dtype": obj.get("type"), "redop": obj.get("redop"),
            "in_place": bool(to_int(obj.get("inPlace"))), "cycle": 0, "time_us": to_float(obj.get("time")),
            "algbw_gbs": to_float(obj.get("algBw")), "busbw_gbs": to_float(obj.get("busBw")),
            "wrong": to_int(obj.get("#wrong")), "line": lineno,
        })
    if not rows:
        result.unusable = True
        result.issues.append(Issue(None, "no rccl-tests JSON records"))
        return result
    result.add("runs", {
        **{k: base[k] for k in ("run_id", "fabric", "collective", "nodes", "ranks", "arm", "policy",
                                "source_path", "source_sha256")},
        "outcome": "ok", "cycles": 1, "source_format": "rccl-tests-jsonlines", "library": "rccl",
    })
    return result

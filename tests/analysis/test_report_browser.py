"""The HTML report in a real browser: Debian's headless Chromium renders it at 1280 px.

A copy of ``index.html`` beside the original (so relative figure paths resolve) gets a small
script that, once the page has loaded, checks every ``<img>`` decoded (``naturalWidth > 0``)
and that the page needs no horizontal scrolling, and writes what it found into the DOM;
``chromium --headless --dump-dom`` prints that DOM. ``make test`` installs Chromium
(``tests/infra/install-test-packages.sh``); without it these tests skip, and under
``NCCLBOT_REQUIRE_INFRA=1`` (CI) they fail.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main

from .simpools import write_sim_dataset

WIDTH, HEIGHT = 1280, 900
PROBE_ID = "ncclbot-browser-probe"
PROBE = """<script>
window.addEventListener("load", function () {
  var root = document.documentElement;
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (img) { return !(img.complete && img.naturalWidth > 0); })
                     .map(function (img) { return img.getAttribute("src"); });
  var clipped = function (el) {
    for (var up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== "visible") return true;
    }
    return false;
  };
  var past = function (el) { return el.getBoundingClientRect().right > root.clientWidth + 0.5; };
  var wide = Array.prototype.slice.call(document.body.querySelectorAll("*")).filter(function (el) {
    return past(el) && !clipped(el) && !(el.parentElement !== document.body && past(el.parentElement));
  }).map(function (el) {
    return el.tagName.toLowerCase() + (el.className ? "." + el.className : "") + " right="
           + Math.round(el.getBoundingClientRect().right);
  });
  var out = document.createElement("pre");
  out.id = "%s";
  out.style.whiteSpace = "pre-wrap";
  out.textContent = JSON.stringify({images: images.length, broken: broken, innerWidth: window.innerWidth,
                                    clientWidth: root.clientWidth, scrollWidth: root.scrollWidth,
                                    wide: wide.slice(0, 20)});
  document.body.appendChild(out);
});
</script>
""" % PROBE_ID


def _chromium() -> str:
    """Debian's chromium; a skip (a failure under NCCLBOT_REQUIRE_INFRA=1) when it is missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "chromium is not installed (tests/infra/install-test-packages.sh installs it)"
    if os.environ.get("NCCLBOT_REQUIRE_INFRA") == "1":
        pytest.fail(f"required test infrastructure is unavailable: {reason}")
    pytest.skip(f"test infrastructure unavailable: {reason}")


def probe(page: Path, profile: Path) -> dict:
    """Render ``page`` at WIDTH x HEIGHT in headless Chromium and return what the probe found."""
    copy = page.with_name(f"browser-probe-{page.name}")
    text = page.read_text()
    copy.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
               f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=10000",
               "--dump-dom", copy.as_uri()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        copy.unlink()
    found = re.search(rf'<pre id="{PROBE_ID}"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium exit {done.returncode}, no probe result in its DOM; stderr:\n{done.stderr[-3000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    _chromium()  # skip (or fail) before building a report no browser will open
    root = tmp_path_factory.mktemp("browser")
    dataset = write_sim_dataset(root / "ds", nodes=(4, 8, 16), sizes=tuple(2**k for k in range(12, 31, 3)), iters=40)
    result = CliRunner().invoke(main, ["analyze", "report", "-d", str(dataset), "-o", str(root / "report"),
                                       "--seeds", "2", "--horizon", "40", "--policies", "AUTO,UCB1,Random"])
    assert result.exit_code == 0, result.output
    return root / "report" / "index.html"


def test_every_image_loads_and_nothing_overflows_at_1280px(report, tmp_path):
    found = probe(report, tmp_path / "profile")
    assert found["innerWidth"] == WIDTH, found
    assert found["images"] == report.read_text().count("<img ") and found["images"] >= 10
    assert found["broken"] == [], f"images that did not load: {found['broken']}"
    assert found["scrollWidth"] <= found["clientWidth"] <= WIDTH, f"the page scrolls sideways: {found}"
    assert found["wide"] == [], f"elements past the right edge: {found['wide']}"


def test_the_probe_sees_a_broken_image_and_a_table_too_wide(report, tmp_path):
    # The same page with one figure path broken and one table taken out of its scrolling box.
    text = report.read_text()
    first = re.search(r'<img src="([^"]+)"', text).group(1)
    wide_row = "<tr>" + "".join(f"<td>column-{i}-with-a-long-name</td>" for i in range(40)) + "</tr>"
    broken = report.with_name("broken.html")
    broken.write_text(text.replace(f'src="{first}"', 'src="figures/missing.png"', 1)
                      .replace("</body>", f"<table>{wide_row}</table></body>"))
    try:
        found = probe(broken, tmp_path / "profile")
    finally:
        broken.unlink()
    assert found["broken"] == ["figures/missing.png"]
    assert found["scrollWidth"] > found["clientWidth"]
    assert any(w.startswith("table") for w in found["wide"]), found["wide"]


RECTS_ID = "ncclbot-browser-rects"
RECTS = """<script>
window.addEventListener("load", function () {
  var box = function (el) {
    if (!el) return null;
    var r = el.getBoundingClientRect();
    return {left: r.left + window.scrollX, top: r.top + window.scrollY, right: r.right + window.scrollX,
            bottom: r.bottom + window.scrollY};
  };
  var out = document.createElement("pre");
  out.id = "%s";
  var outside = Array.prototype.slice.call(document.querySelectorAll("table")).filter(function (t) {
    return !t.closest("#headline");
  });
  var action = document.querySelector("#headline h3");
  out.textContent = JSON.stringify({headline: box(document.getElementById("headline")),
                                    table: box(outside[0]), action: box(action),
                                    action_title: action ? action.textContent : "",
                                    ranges: box(document.querySelector("#headline table")),
                                    text: (document.getElementById("headline") || {}).innerText || ""});
  document.body.appendChild(out);
});
</script>
""" % RECTS_ID


def _run_chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
               "--virtual-time-budget=10000", *extra, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _rects(page: Path, profile: Path) -> dict:
    """Where the headline box, its first heading and ranges table, and the first table after it sit on
    the page (CSS px), and the box's text."""
    copy = page.with_name(f"browser-rects-{page.name}")
    copy.write_text(page.read_text().replace("</body>", RECTS + "</body>"))
    try:
        done = _run_chromium(copy, profile, "--dump-dom")
    finally:
        copy.unlink()
    found = re.search(rf'<pre id="{RECTS_ID}"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium exit {done.returncode}, no result in its DOM; stderr:\n{done.stderr[-3000:]}"
    return json.loads(html.unescape(found.group(1)))


def _screenshot(page: Path, png: Path, profile: Path):
    """The page's first WIDTH x HEIGHT pixels as Chromium draws them, as an RGB array."""
    from matplotlib.image import imread

    done = _run_chromium(page, profile, f"--screenshot={png}")
    assert png.is_file(), f"chromium exit {done.returncode}, no screenshot; stderr:\n{done.stderr[-3000:]}"
    image = imread(png)[:, :, :3]
    return (image * 255).round() if image.max() <= 1.0 else image


def _dump_dom(page: Path, profile: Path) -> str:
    return _run_chromium(page, profile, "--dump-dom").stdout


def test_the_headline_box_comes_first_and_leads_with_what_to_set(report, tmp_path):
    import numpy as np
    import pandas as pd

    dom = _dump_dom(report, tmp_path / "profile")
    start, end = dom.find('id="headline"'), dom.find("</section>")
    assert 0 <= start < end < dom.find('<table class="dataframe'), "the headline box must precede the data tables"
    audit = pd.read_csv(report.parent / "tables" / "audit_contexts.csv")
    found = _rects(report, tmp_path / "profile")
    text = " ".join(found["text"].split())
    assert found["action_title"] == "What to set"
    ranges = pd.read_csv(report.parent / "tables" / "what_to_set.csv")
    assert len(ranges) and f"{len(ranges)} size ranges" in text
    worst = ranges.loc[ranges["loss_max_pct"].idxmax()]
    assert f"NCCL's choice is up to {worst['loss_max_pct']:.0f}% slower there" in text
    assert f"{worst['sizes']} {worst['arm']} {worst['auto_arm']}" in text
    assert f"NCCL_TUNER_CONFIG_FILE={(report.parent / 'export' / 'sim-h100' / 'nccl_tuner.conf').resolve()}" in text
    assert f"AUTO picks a wrong arm in {int(audit['error'].sum())} of {len(audit)} contexts" in text
    row = pd.read_csv(report.parent / "tables" / "audit_summary.csv").set_index("pricing").loc["selection"]
    assert f"mean {row['mean_pct']:.1f}%, p99 {row['p99_pct']:.1f}%" in text
    summary = pd.read_csv(report.parent / "tables" / "summary.csv").set_index("policy")
    assert f"loses {summary.loc['UCB1', 'realized_mean_pct']:.2f}% against AUTO's " \
           f"{summary.loc['AUTO', 'realized_mean_pct']:.2f}%" in text
    assert text.index("What to set") < text.index("AUTO over every context") < text.index("Is live learning")

    box, table = found["headline"], found["table"]
    assert box["bottom"] <= table["top"], f"the headline box overlaps or follows the first table: {found}"
    # What to set is on the first screen: its heading, its sentence and the top of its ranges table.
    assert box["top"] < HEIGHT / 4 and found["action"]["bottom"] < HEIGHT / 2, f"not on the first screen: {found}"
    assert found["ranges"]["top"] < HEIGHT - 100, f"the ranges table starts below the first screen: {found}"
    image = _screenshot(report, tmp_path / "headline.png", tmp_path / "profile")
    assert image.shape[:2] == (HEIGHT, WIDTH)
    bottom = min(box["bottom"], HEIGHT)
    inside = image[int(box["top"]) + 4:int(bottom) - 4, int(box["left"]) + 4:int(box["right"]) - 4]
    background = np.median(inside.reshape(-1, 3), axis=0)
    assert background[2] > background[0] + 5, f"the box is not tinted: {background}"
    inked = (np.abs(inside - background).sum(axis=2) > 120).mean()
    assert inked > 0.02, f"the headline box looks blank ({inked:.3%} of its pixels carry ink)"
    edge = image[int(box["top"]):int(bottom), int(box["left"]):int(box["left"]) + 3]
    assert (edge[:, :, 2] - edge[:, :, 0] > 100).any(axis=1).mean() > 0.95, "the box's blue border is not drawn"
    if box["bottom"] + 2 < HEIGHT:
        below = image[int(box["bottom"]) + 2:, :]
        assert (np.abs(below - background).sum(axis=2) < 10).mean() < 0.5, "the box's tint runs below the box"


SCROLL_ID = "ncclbot-browser-scroll"
SCROLL = """<script>
window.addEventListener("load", function () {
  var tables = Array.prototype.slice.call(document.querySelectorAll("table.t"));
  var found = tables.map(function (t) {
    var frame = t.closest(".scroll"), head = t.querySelector("th");
    return {columns: head ? head.parentElement.children.length : 0,
            frame: frame ? getComputedStyle(frame).overflowX + "/" + getComputedStyle(frame).overflowY : "none",
            header: head ? getComputedStyle(head).position : "none"};
  });
  // Squeeze the longest table's frame and scroll it down and sideways: its header row must stay on top.
  var widest = Math.max.apply(null, found.map(function (t) { return t.columns; }));
  var tall = tables.slice().sort(function (a, b) { return b.rows.length - a.rows.length; })[0];
  var frame = tall.closest(".scroll");
  frame.style.maxHeight = (tall.rows[0].offsetHeight * 2.5) + "px";
  frame.scrollTop = tall.rows[0].offsetHeight * 1.5;
  frame.scrollLeft = 200;
  var top = frame.getBoundingClientRect().top, head = tall.rows[0].cells[1].getBoundingClientRect();
  var first = tall.rows[1].cells[0].getBoundingClientRect();
  var out = document.createElement("pre");
  out.id = "%s";
  out.textContent = JSON.stringify({tables: found, widest: widest,
                                    scrolled: frame.scrollTop, header_gap: head.top - top,
                                    first_row_gap: first.top - top});
  document.body.appendChild(out);
});
</script>
""" % SCROLL_ID


def test_wide_tables_scroll_in_their_frame_under_a_fixed_header(report, tmp_path):
    copy = report.with_name(f"browser-scroll-{report.name}")
    copy.write_text(report.read_text().replace("</body>", SCROLL + "</body>"))
    try:
        done = _run_chromium(copy, tmp_path / "profile", "--dump-dom")
    finally:
        copy.unlink()
    found = re.search(rf'<pre id="{SCROLL_ID}"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert found, f"chromium exit {done.returncode}, no result in its DOM; stderr:\n{done.stderr[-3000:]}"
    found = json.loads(html.unescape(found.group(1)))
    assert found["widest"] > 10, "no table here is wider than 10 columns: the frame is not exercised"
    for table in found["tables"]:
        if table["columns"] > 10:
            assert table["frame"] == "auto/auto" and table["header"] == "sticky", table
    assert found["scrolled"] > 0, found
    assert abs(found["header_gap"]) <= 1.5, f"the header row scrolled away with the rows: {found}"
    assert found["first_row_gap"] < -1, f"the rows did not scroll under the header: {found}"

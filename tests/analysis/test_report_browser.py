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

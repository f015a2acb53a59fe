"""A full disk at any moment of ``submit``, ``resume`` or ``ingest`` is one ``Error:`` line that
names the path and says how to continue, and once space is freed that command finishes the job.

The campaign folder and the dataset live on a small file system of their own, filled up to
many levels of free space before each run: a tmpfs (``mount -t tmpfs -o size=...``), or, where
mounting a tmpfs is not permitted, a loop-mounted ext4 image. ``RLIMIT_FSIZE`` is no stand-in:
it limits the size of one file and fails a write with EFBIG, not ENOSPC, so the code under
test would meet another error than a full disk. Without either mount the tests skip with the
reason, or fail under ``NCCLBOT_REQUIRE_INFRA=1`` (CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from orch_support import SMALL_CAMPAIGN, local_inventory_text
from ncclbot_sweep.cli import main

_SIZE_MIB = 4
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _mount(point: Path, image: Path) -> str | None:
    """Mount a small file system at ``point``; return how, or None (the reasons are in the skip)."""
    tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={_SIZE_MIB}m", "tmpfs", str(point)],
                           capture_output=True, text=True)
    if tmpfs.returncode == 0:
        return "tmpfs"
    steps = [["truncate", "-s", f"{_SIZE_MIB}M", str(image)], ["mkfs.ext4", "-q", "-F", "-m", "0", str(image)],
             ["mount", "-o", "loop", str(image), str(point)]]
    for argv in steps:
        if shutil.which(argv[0]) is None or subprocess.run(argv, capture_output=True).returncode != 0:
            _unavailable(f"cannot mount a small file system here (tmpfs: {tmpfs.stderr.strip()}; "
                         f"loop ext4: '{' '.join(argv)}' failed)")
    return "ext4 loop image"


def _unavailable(reason: str) -> None:
    if os.environ.get("NCCLBOT_REQUIRE_INFRA") == "1":
        pytest.fail(f"required test infrastructure is unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture
def small_fs(tmp_path: Path):
    point = tmp_path / "small"
    point.mkdir()
    _mount(point, tmp_path / "small.img")
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _fill(fs: Path, free: int) -> None:
    """Leave about ``free`` bytes free on ``fs`` (a file takes the rest)."""
    (fs / "fill").unlink(missing_ok=True)
    stats = os.statvfs(fs)
    size = stats.f_bavail * stats.f_frsize - free
    if size <= 0:
        return
    with open(fs / "fill", "wb") as fh:
        try:
            while size > 0:
                size -= fh.write(b"\0" * min(size, 1 << 20))
        except OSError:
            pass  # full already


def _error_lines(result) -> list[str]:
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output
    return [line for line in result.output.splitlines() if line.startswith("Error:")]


def test_a_full_disk_at_any_moment_of_submit_is_one_error_and_what_it_says_finishes_the_campaign(
        small_fs, tmp_path, fake_bin, fake_env):
    inventory, campaign = tmp_path / "inv.yaml", tmp_path / "campaign.yaml"
    inventory.write_text(local_inventory_text(fake_bin))
    campaign.write_text(SMALL_CAMPAIGN)
    work = small_fs / "campaign"
    submit = ["submit", str(campaign), "-i", str(inventory), "-w", str(work)]
    runner = CliRunner()
    full = 0
    for free in range(0, 900_001, 60_000):
        shutil.rmtree(work, ignore_errors=True)
        _fill(small_fs, free)
        result = runner.invoke(main, submit)
        if result.exit_code == 0:
            continue  # enough space for the whole campaign
        full += 1
        errors = _error_lines(result)
        assert result.exit_code == 1 and len(errors) == 1, result.output
        assert errors[0].startswith(f"Error: {work}") and "the file system is full" in errors[0], errors
        hint = result.output.split("hint: ", 1)[1]
        assert hint.startswith("free space on that file system, then "), hint
        if f"'ncclbot-sweep resume {work}' finishes the campaign" in hint:
            still_full = runner.invoke(main, ["resume", str(work)])  # resume meets the full disk too
            assert still_full.exit_code == 0 or len(_error_lines(still_full)) == 1, still_full.output
            (small_fs / "fill").unlink(missing_ok=True)
            again = runner.invoke(main, ["resume", str(work)])
        else:
            (small_fs / "fill").unlink(missing_ok=True)
            assert "run the same 'ncclbot-sweep submit' again (nothing of the campaign was kept)" in hint
            assert not work.exists()
            again = runner.invoke(main, submit)
        assert again.exit_code == 0, (free, result.output, again.output)
        assert "steps: 8/8 ok" in again.output
    assert full >= 8, "the fill levels should stop the campaign at many moments"


def test_a_full_disk_during_ingest_is_one_error_and_the_same_ingest_finishes_it(small_fs, tmp_path):
    inputs = [str(REAL / "A"), str(REAL / "B")]
    dataset = small_fs / "ds"
    runner = CliRunner()
    clean = runner.invoke(main, ["ingest", *inputs, "-d", str(tmp_path / "reference")])
    assert clean.exit_code == 0
    full = 0
    for free in range(0, 1_200_001, 100_000):
        shutil.rmtree(dataset, ignore_errors=True)
        _fill(small_fs, free)
        result = runner.invoke(main, ["ingest", *inputs, "-d", str(dataset)])
        if result.exit_code == 0:
            continue
        full += 1
        errors = _error_lines(result)
        assert result.exit_code == 1 and len(errors) == 1, result.output
        assert errors[0].startswith(f"Error: {dataset}") and "the file system is full" in errors[0], errors
        assert "then run the same ingest again" in result.output
        (small_fs / "fill").unlink()
        again = runner.invoke(main, ["ingest", *inputs, "-d", str(dataset)])
        assert again.exit_code == 0, again.output
        from ncclbot_sweep.ingest import datasets

        for table in ("runs", "iterations", "quarantine"):
            assert len(datasets.read_table(dataset, table)) == len(datasets.read_table(tmp_path / "reference", table))
    assert full >= 6, "the fill levels should stop the ingest at many moments"

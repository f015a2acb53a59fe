"""The live job's cross-rank arm check (templates/trace_check.py), on planted traces.

The job script runs the same file with ``python3 -``; here it runs as a program on trace
folders written the way the plugin writes them (architecture section 8).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ncclbot_sweep.resources import resource_path

HEADER = ("# ncclbot-trace v1\nkind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,auto_arm,"
          "policy,latency_us,reward,round,sync_us\n")
COMM = "00000000deadbeef"


def _trace(folder: Path, rank: int, arms: list[tuple[int, str]], *, comm: str = COMM, sync: bool = True) -> None:
    lines = [HEADER]
    for pull, (size, arm) in enumerate(arms):
        lines.append(f"pull,{1000 + pull},{comm},{rank},4,4,AllReduce,{size},{pull},{arm},Ring/LL,ucb1,12.5,0.9,0,\n")
        if sync and pull % 2:
            lines.append(f"sync,{1000 + pull},{comm},{rank},4,4,,,,,,,,,{pull // 2},31.0\n")
    (folder / f"ncclbot-{comm}-r{rank}.csv").write_text("".join(lines))


def _check(folder: Path) -> subprocess.CompletedProcess:
    script = resource_path("templates", "trace_check.py")
    return subprocess.run([sys.executable, "-", str(folder)], stdin=script.open(), capture_output=True, text=True,
                          timeout=60)


def test_agreeing_ranks_pass(tmp_path):
    plays = [(1 << 20, "Ring/LL"), (1 << 20, "Tree/LL128"), (1 << 22, "Ring/Simple")]
    for rank in range(4):
        _trace(tmp_path, rank, plays[: 3 - (rank == 3)])  # a rank that wrote fewer pulls is not a divergence
    done = _check(tmp_path)
    assert (done.returncode, done.stdout) == (0, "")


def test_a_planted_divergence_names_the_first_call(tmp_path):
    plays = [(1 << 20, "Ring/LL"), (1 << 20, "Tree/LL128"), (1 << 22, "Ring/Simple"), (1 << 22, "Ring/Simple")]
    for rank in range(4):
        mine = list(plays)
        if rank == 2:
            mine[1] = (1 << 20, "Ring/LL128")
            mine[3] = (1 << 22, "Tree/Simple")
        _trace(tmp_path, rank, mine)
    done = _check(tmp_path)
    assert done.returncode == 3
    assert done.stdout.strip() == (
        f"ranks diverged on communicator {COMM}: AllReduce of 1048576 bytes, pull 1 (call 1 of rank 0's trace): "
        "rank 0 played Tree/LL128, rank 2 played Ring/LL128")


def test_communicators_are_compared_separately_and_empty_folders_pass(tmp_path):
    _trace(tmp_path, 0, [(4096, "Ring/LL")], comm="0000000000000001")
    _trace(tmp_path, 1, [(4096, "Tree/LL")], comm="0000000000000002")  # another communicator: no peer
    assert _check(tmp_path).returncode == 0
    assert _check(tmp_path / "missing").returncode == 0

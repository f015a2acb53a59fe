"""Reading the plugin's per-rank trace CSV (docs/architecture.md section 8) in tests."""

from __future__ import annotations

import csv
from pathlib import Path

HEADER = ("kind,t_ns,comm_id,rank,nranks,nnodes,collective,size_bytes,pull,arm,auto_arm,policy,"
          "latency_us,reward,round,sync_us,reward_lag,samples,reason")


def read_trace(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert lines[0] == "# ncclbot-trace v2", lines[0]
    assert lines[1] == HEADER, lines[1]
    rows = list(csv.DictReader(lines[1:]))
    for r in rows:
        assert None not in r and len(r) == 19, r
    return rows


def trace_path(folder: Path, comm_id: int, rank: int) -> Path:
    return folder / f"ncclbot-{comm_id:016x}-r{rank}.csv"

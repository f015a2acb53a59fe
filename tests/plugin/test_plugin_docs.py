"""plugin/README.md documents every NCCLBOT_* setting the C code reads, and only those;
the trace the plugin writes is ingestible by ncclbot_sweep.parsers."""

from __future__ import annotations

import re

import pytest

import nb_host as H
from nb_trace import trace_path


def test_readme_lists_exactly_the_settings_read():
    src = (H.PLUGIN_DIR / "src" / "config.c").read_text()
    read = set(re.findall(r'"(NCCLBOT_[A-Z_]+)"', src.split("k_known[]")[0]))
    known = set(re.findall(r'"(NCCLBOT_[A-Z_]+)"', src.split("k_known[]")[1].split("};")[0]))
    assert read == known, f"the known-name list and the readers differ: {read ^ known}"
    readme = (H.PLUGIN_DIR / "README.md").read_text()
    table = set(re.findall(r"^\| `(NCCLBOT_[A-Z_]+)` \|", readme, re.M))
    assert read == table, f"code only: {read - table}; README only: {table - read}"


def test_trace_parses_into_live_events(plugin, nb_env, comm_id, tmp_path):
    traces = pytest.importorskip("ncclbot_sweep.parsers.traces")
    common = pytest.importorskip("ncclbot_sweep.parsers.common")
    nb_env(policy="ucb1", min_bytes=0, trace_dir=tmp_path)
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    table = H.cost_table({H.RING_LL128: 10.0, H.RING_SIMPLE: 12.0})
    for _ in range(20):
        arm = r.call(4, 1 << 22, table)[1]
        r.measure(4, 1 << 22, arm, 11.0)
    r.finalize()
    path = trace_path(tmp_path, comm_id, 0)
    res = traces.parse_ncclbot_trace(path.read_text(), common.SourceInfo(str(path), "0", "run"))
    assert not res.issues and not res.unusable
    rows = res.tables["live_events"]
    assert len(rows) == 20 and all(x["kind"] == "pull" and x["collective"] == "AllReduce" for x in rows)
    assert rows[0]["arm"] == "Ring/LL128" and rows[0]["latency_us"] == 11.0 and rows[0]["ranks"] == 1


def test_rank0_announces_every_setting_without_the_token(plugin, nb_env, comm_id):
    nb_env(policy="auto", sync_token="hush-hush")
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    line = next(l for l in H.take_log().splitlines() if "settings:" in l)
    r.finalize()
    readme = (H.PLUGIN_DIR / "README.md").read_text()
    for name in re.findall(r"^\| `(NCCLBOT_[A-Z_]+)` \|", readme, re.M):
        assert f"{name}=" in line, name
    assert "hush-hush" not in line and "NCCLBOT_POLICY=auto" in line

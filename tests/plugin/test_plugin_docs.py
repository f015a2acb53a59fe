"""plugin/README.md documents every NCCLBOT_* setting the C code reads, and only those;
the trace the plugin writes is ingestible by ncclbot_sweep.parsers."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import nb_host as H
from nb_trace import trace_path


def settings_table() -> str:
    """The README table as the plugin's own table prints it (build/ncclbot-settings)."""
    return subprocess.run([str(H.PLUGIN_DIR / "build" / "ncclbot-settings")], capture_output=True, text=True,
                          check=True).stdout


def test_readme_settings_table_is_the_plugins_table():
    table = settings_table()
    readme = (H.PLUGIN_DIR / "README.md").read_text()
    assert table in readme, ("plugin/README.md's settings table differs from config.c's; paste the output of "
                             "plugin/build/ncclbot-settings into the Settings section")
    rows = re.findall(r"^\| `(NCCLBOT_[A-Z_]+)` \|", readme, re.M)
    assert len(rows) == len(set(rows)) == table.count("\n| `NCCLBOT_"), "a setting is listed twice or elsewhere"


def test_typo_check_knows_every_setting_of_the_table(plugin, nb_env, comm_id):
    for name in re.findall(r"^\| `(NCCLBOT_[A-Z_]+)` \|", settings_table(), re.M):
        nb_env(**{name[len("NCCLBOT_"):].lower() + "x": "1"})  # one edit away from the setting
        r = H.Rank(plugin, comm_id, 1, 1, 0)
        assert not r.active
        assert f"{name}X is not a setting of this plugin; did you mean {name}?" in H.take_log()
        r.finalize()
        os.environ.pop(name + "X")


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
    rows = [x for x in res.tables["live_events"] if x["kind"] == "pull"]
    assert len(rows) == 20 and all(x["collective"] == "AllReduce" for x in rows)
    assert rows[0]["arm"] == "Ring/LL128" and rows[0]["latency_us"] == 11.0 and rows[0]["ranks"] == 1
    assert all(x["reward_lag"] == 0 for x in rows), "each sample came before the next launch"
    samples = {x["reason"]: x["samples"] for x in res.tables["live_events"] if x["kind"] == "samples"}
    assert samples == {"used": 20}, samples


def test_rank0_announces_every_setting_without_the_token(plugin, nb_env, comm_id):
    nb_env(policy="auto", sync_token="hush-hush")
    r = H.Rank(plugin, comm_id, 1, 1, 0)
    line = next(l for l in H.take_log().splitlines() if "settings:" in l)
    r.finalize()
    readme = (H.PLUGIN_DIR / "README.md").read_text()
    for name in re.findall(r"^\| `(NCCLBOT_[A-Z_]+)` \|", readme, re.M):
        assert f"{name}=" in line, name
    assert "hush-hush" not in line and "NCCLBOT_POLICY=auto" in line

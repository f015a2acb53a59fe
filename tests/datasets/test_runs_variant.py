"""``runs.variant``: the campaign variant of a step (the overhead ladder's rung) comes from step.json."""

from __future__ import annotations

import json

from ncclbot_sweep.ingest import datasets
from ncclbot_sweep.ingest.walk import ingest


def _step(folder, variant):
    folder.mkdir(parents=True)
    meta = {"campaign": "ladder", "step_key": folder.name, "fabric": "sim-h100", "kind": "overhead",
            "collective": "AllReduce", "nodes": 2, "gpus_per_node": 8, "ranks": 16, "arm": None, "policy": "AUTO"}
    if variant is not None:
        meta["variant"] = variant
    (folder / "step.json").write_text(json.dumps(meta))
    (folder / "stdout.txt").write_text("")
    (folder / "exit").write_text("0\n")


def test_variant_is_read_from_step_json(tmp_path):
    steps = tmp_path / "camp" / "jobs" / "j" / "steps"
    _step(steps / "s-sync16", "sync-16")
    _step(steps / "s-old", None)  # a step.json written before variants existed
    ingest([tmp_path / "camp"], tmp_path / "ds")
    runs = datasets.read_table(tmp_path / "ds", "runs").set_index("step_key")
    assert runs.loc["s-sync16", "variant"] == "sync-16"
    assert runs["variant"].isna().to_dict() == {"s-sync16": False, "s-old": True}

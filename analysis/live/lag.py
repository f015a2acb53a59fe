"""How late each run's rewards arrived, and how many pulls got one.

NCCL launches asynchronously: a collective's profiler sample reaches the plugin when the GPU
has run it, as many collectives after its ``getCollInfo`` as the host ran ahead (the trace's
``reward_lag``). The plugin uses a sample whenever it arrives; a pull goes without one only
when NCCL never delivered it, and the trace's ``samples`` rows (summed into ``runs``) say
why. Per traced run this gives the lag's median, 99th percentile and maximum, the samples
used and dropped with their reasons, and what a fixed deadline would have done: the plugin
before asynchronous launch sent each round at most ``A x m / 2`` pulls after its end and
dropped every later sample (``NCCLBOT_SYNC_LAG`` A, ``NCCLBOT_SYNC_EVERY`` m, both from the
run's environment; a run without rounds had a 2,048-pull window). A round's first pull had
``m + A x m / 2`` pulls to spare, its last ``A x m / 2``; the share of samples later than the
former (counting collectives, at least as many as pulls) is a lower bound of what the old
rule dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["OLD_LOCAL_WINDOW", "STARVED_SHARE", "lag_sentence", "noteworthy", "reward_lag"]

#: Pulls a one-rank (or roundless) plugin waited for a sample before this change.
OLD_LOCAL_WINDOW = 2048
#: Share of samples a deadline drops past which a learner is starved of them.
STARVED_SHARE = 0.5


def _settings(env: object) -> tuple[int, int, bool]:
    """(m, A, rounds on) from a run's environment (JSON text; the plugin's defaults otherwise)."""
    try:
        values = json.loads(env) if isinstance(env, str) else {}
    except ValueError:
        values = {}
    values = values if isinstance(values, dict) else {}

    def number(name: str, default: int) -> int:
        text = str(values.get(name, default)).strip()
        return int(text) if text.isdigit() and int(text) > 0 else default
    return number("NCCLBOT_SYNC_EVERY", 16), number("NCCLBOT_SYNC_LAG", 1), values.get("NCCLBOT_SYNC_ADDR", None) != ""


def _reasons(run: Mapping) -> str | None:
    text = run.get("drop_reasons")
    return str(text) if isinstance(text, str) and text else None


def reward_lag(runs: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per plugin run with traces: pulls over its ranks, the reward lag (median, p99,
    max, in collectives), samples used and dropped (reasons), and the share of its samples a
    fixed deadline would have dropped."""
    rows = []
    pulls = events[events["kind"] == "pull"] if len(events) else events
    for run in runs[~runs["is_stock"]].itertuples():
        mine = pulls[pulls["run_id"] == run.run_id] if len(pulls) else pulls
        if mine.empty:
            continue
        lag = pd.to_numeric(mine["reward_lag"], errors="coerce").dropna().to_numpy(float) \
            if "reward_lag" in mine.columns else np.array([])
        m, a, rounds = _settings(run.env)
        deadline = m + a * m // 2 if rounds and run.ranks and run.ranks > 1 else OLD_LOCAL_WINDOW
        measured = int(mine["latency_us"].notna().sum())
        used = run.samples_used if pd.notna(run.samples_used) else measured
        dropped = run.samples_dropped if pd.notna(run.samples_dropped) else len(mine) - measured
        rows.append({
            "campaign": run.campaign, "run_id": run.run_id, "policy": run.label, "pulls": len(mine),
            "samples_used": int(used), "samples_dropped": int(dropped),
            "dropped_pct": 100.0 * float(dropped) / max(1, int(used) + int(dropped)),
            "drop_reasons": _reasons(run._asdict()),
            "lag_median": float(np.median(lag)) if len(lag) else np.nan,
            "lag_p99": float(np.percentile(lag, 99)) if len(lag) else np.nan,
            "lag_max": float(lag.max()) if len(lag) else np.nan,
            "old_deadline": deadline,
            "old_deadline_dropped_pct": 100.0 * float((lag > deadline).mean()) if len(lag) else np.nan,
        })
    return pd.DataFrame(rows)


def noteworthy(row: Mapping) -> bool:
    """A run worth a sentence beside the best learner's: some pull went without its reward,
    or a fixed deadline would have starved a learner of most samples."""
    late = row.get("old_deadline_dropped_pct")
    return bool(row.get("samples_dropped")) or (late is not None and late >= 100 * STARVED_SHARE)


def lag_sentence(label: str, row: Mapping) -> str:
    """One sentence on a run's lag (a ``reward_lag`` row, or its ``headline.json`` entry): how
    late its rewards came, whether any pull went without one, and whether the lag would have
    starved a learner under a fixed deadline."""
    if row.get("lag_median") is None or pd.isna(row["lag_median"]):
        return f"{label}: the traces carry no reward lag (written before trace v2)."
    text = (f"{label}: rewards came a median {row['lag_median']:.0f} collectives after their call "
            f"(p99 {row['lag_p99']:.0f})")
    if row["samples_dropped"]:
        text += (f"; {row['samples_dropped']} of {row['samples_used'] + row['samples_dropped']} pulls "
                 f"({row['dropped_pct']:.1f}%) got none ({row['drop_reasons'] or 'reasons not traced'})")
    else:
        text += "; every pull got its reward"
    late = row["old_deadline_dropped_pct"]
    if late is not None and late >= 100 * STARVED_SHARE:
        text += (f". At least {late:.0f}% of them came later than the fixed deadline the plugin had before "
                 f"asynchronous launch ({row['old_deadline']} pulls at most): it would have starved a learner")
    return text + "."

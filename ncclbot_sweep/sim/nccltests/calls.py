"""What the simulated NCCL decides for one collective call: its cost table and its channels.

Shared by the nccl-tests stand-ins (:mod:`ncclbot_sweep.sim.nccltests.run`) and the workload
player (:mod:`ncclbot_sweep.sim.workload_run`), so a collective of a training step and the
same collective in nccl-tests are offered the same arms and run on the same channels.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ncclbot_sweep.names import NVLS_ALGORITHMS, Arm, all_arms
from ncclbot_sweep.sim.fabric import SimFabric
from ncclbot_sweep.sim.nccltests.environment import allowed_names

__all__ = ["NVLS_CHANNELS", "call_channels", "call_table"]

#: NVLS channels per compute capability (NCCL's ``nvlsChannels`` default).
NVLS_CHANNELS = {90: 16, 100: 24}
_THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
_ALL_ARMS = all_arms()


def call_table(fabric: SimFabric, collective: str, *, nodes: int, size: int, ranks: int,
               env: Mapping[str, str]) -> np.ndarray:
    """NCCL's cost table ``[algorithm, protocol]`` (us, -1 unavailable) for one call, over the arms
    ``NCCL_ALGO``/``NCCL_PROTO`` in ``env`` allow. Raises :class:`~ncclbot_sweep.sim.nccltests.environment.EnvError`
    for a value NCCL rejects."""
    algos = allowed_names(env.get("NCCL_ALGO"), "algo", collective)
    protos = allowed_names(env.get("NCCL_PROTO"), "proto", collective)
    allowed = [arm for arm in _ALL_ARMS
               if (algos is None or arm.algorithm in algos) and (protos is None or arm.protocol in protos)]
    return fabric.cost_table(collective, nodes, size, ranks=ranks, allowed=allowed)


def call_channels(fabric: SimFabric, arm: Arm, *, nodes: int, ranks: int, n_bytes: int) -> int:
    """Channels NCCL uses for one call after its per-size trimming (``enqueue.cc``)."""
    spec = fabric.spec
    if arm.algorithm in NVLS_ALGORITHMS:
        return NVLS_CHANNELS.get(spec.comp_cap, 16)
    tuned = fabric.tuned(nodes, ranks)
    threads = int(tuned.max_threads[arm.algorithm_index, arm.protocol_index]) or 512
    threshold = _THREAD_THRESHOLD[arm.protocol] * (ranks if arm.algorithm == "Ring" and arm.protocol == "LL" else 1)
    channels = spec.model_spec(nodes).comm_channels
    while channels > 1 and n_bytes < channels * threads * threshold:
        channels -= 1
    return channels

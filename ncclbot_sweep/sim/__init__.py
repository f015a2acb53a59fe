"""The simulated fabric: ground truth, NCCL-like cost model and nccl-tests-compatible binaries.

The embedded default that ``make demo``, the tests and the examples run on (architecture
section 7). Apart from the stages: it takes a fabric name and gives what NCCL and nccl-tests
would on it (costs, latencies, binaries that print nccl-tests output); it imports only the
leaves at the package root (architecture section 2.2). Public entry points:

* :func:`fabric` (``fabric("sim-h100")``): the cost table NCCL would compute
  (``cost_table``), AUTO's choice, the valid arms and the true steady-state latency;
* :class:`SimProcess`: per-call latencies with noise, lazy-connection transients and the
  NVLS set-up stall, as one NCCL process sees them;
* :func:`forced_arm_pools`: per-size latencies of one forced-arm nccl-tests process,
  without running it;
* :func:`bin_dir`: a folder with ``all_reduce_perf`` and friends (not on PATH); with the
  plugin variables set they play every call through the real plugin
  (:mod:`ncclbot_sweep.sim.live`, :mod:`ncclbot_sweep.sim.pluginhost`);
* ``ncclbot-sweep sim workload`` (:mod:`ncclbot_sweep.sim.workload_run`): a training step's
  collectives and compute (:mod:`ncclbot_sweep.sim.workload`) played the same way, step lines printed
  as a training script prints them.
"""

from __future__ import annotations

from ncclbot_sweep.sim.fabric import SimFabric, fabric, fabric_for_env, fabric_names
from ncclbot_sweep.sim.install import BINARIES, bin_dir
from ncclbot_sweep.sim.process import SimProcess
from ncclbot_sweep.sim.sweep import forced_arm_pools

__all__ = ["BINARIES", "SimFabric", "SimProcess", "bin_dir", "fabric", "fabric_for_env", "fabric_names",
           "forced_arm_pools"]

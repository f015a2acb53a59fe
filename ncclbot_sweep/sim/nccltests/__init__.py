"""nccl-tests-compatible stand-ins (``all_reduce_perf``, ...) for the simulated fabric.

``python -m ncclbot_sweep.sim.nccltests <path-or-name-of-binary> [nccl-tests flags]`` runs
one; :func:`ncclbot_sweep.sim.bin_dir` installs small scripts named like the real binaries
that do exactly that.
"""

from __future__ import annotations

from ncclbot_sweep.sim.nccltests.run import NCCL_TESTS_VERSION, main

__all__ = ["NCCL_TESTS_VERSION", "main"]

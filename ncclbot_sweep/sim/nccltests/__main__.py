"""Entry point of the installed nccl-tests stand-ins: ``argv[1]`` is the binary's own path."""

from __future__ import annotations

import sys

from ncclbot_sweep.sim.nccltests.run import main

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.stderr.write("usage: python -m ncclbot_sweep.sim.nccltests <all_reduce_perf|...> [nccl-tests flags]\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))

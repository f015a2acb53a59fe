"""``python -m ncclbot_sweep``: the ``ncclbot-sweep`` command, for jobs whose PATH lacks it (workload campaigns)."""

from ncclbot_sweep.cli import main

main(prog_name="ncclbot-sweep")

"""Fail a live step whose ranks played different arms on the same call (stdlib only).

The live job script runs this after every step that loads the plugin, on the node that ran
it (a cluster's compute node has python3 but maybe not ncclbot-sweep): ``python3 - TRACE_DIR``
with this file as the program. It reads every rank's plugin trace
(``ncclbot-<comm>-r<rank>.csv``, architecture section 8), keys each ``pull`` row by
(communicator, collective, size, pull index) and compares the arm across ranks. Different
ranks playing different arms would hang a real NCCL job (NVIDIA/nccl#1136); the simulator
would not hang, so this check is what catches it. Exit 0 when every shared call agrees (or
there is nothing to compare), 3 with one line naming the first divergent call otherwise.
"""

import csv
import os
import re
import sys

_NAME = re.compile(r"^ncclbot-([0-9a-fA-F]+)-r(\d+)\.csv$")
DIVERGED = 3


def read_pulls(path):
    """The ``pull`` rows of one trace, in file order: [((collective, size, pull), arm), ...]."""
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        lines = (line for line in fh if not line.startswith("#"))
        for row in csv.DictReader(lines):
            if row.get("kind") == "pull" and row.get("arm"):
                rows.append(((row["collective"], int(row["size_bytes"]), int(row["pull"])), row["arm"]))
    return rows


def first_divergence(trace_dir):
    """A message naming the first call two ranks played differently, or None."""
    comms = {}
    for name in sorted(os.listdir(trace_dir)):
        match = _NAME.match(name)
        if match:
            comms.setdefault(match.group(1), {})[int(match.group(2))] = os.path.join(trace_dir, name)
    for comm, files in sorted(comms.items()):
        ranks = sorted(files)
        if len(ranks) < 2:
            continue
        reference = read_pulls(files[ranks[0]])
        others = {rank: dict(read_pulls(files[rank])) for rank in ranks[1:]}
        for call, (key, arm) in enumerate(reference):
            for rank, played in others.items():
                theirs = played.get(key)
                if theirs is not None and theirs != arm:
                    collective, size, pull = key
                    return (f"ranks diverged on communicator {comm}: {collective} of {size} bytes, pull {pull} "
                            f"(call {call} of rank {ranks[0]}'s trace): rank {ranks[0]} played {arm}, "
                            f"rank {rank} played {theirs}")
    return None


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: trace_check.py TRACE_DIR\n")
        return 2
    if not os.path.isdir(argv[1]):
        return 0
    message = first_divergence(argv[1])
    if message is None:
        return 0
    print(message)
    return DIVERGED


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Read a workload run's step times and write them as ``workload_steps.csv`` (stdlib only).

The workload job script runs this on the node right after the user's command exited 0
(``python3 - ARGS`` with this file as the program; a compute node has python3 but maybe not
ncclbot-sweep), with one source of step times (``ncclbot_sweep/sweep/workload.py``):

* ``--regex R --stdout FILE``: every line of the command's stdout (``\\r``-separated progress
  bar updates too) that ``R`` matches is a step; its time is the named group ``us``, ``ms`` or
  ``s``, or ``per_s`` (a rate); a group ``step`` numbers steps (a number seen again replaces
  the earlier line: progress bars redraw);
* ``--kineto DIR``: the ``ProfilerStep#N`` spans of every Kineto trace under DIR (``*.json``,
  ``*.json.gz``), per step the longest over the traces (the slowest rank);
* ``--wall-ns N``: the command's wall time, one step.

The CSV (``# ncclbot-workload-steps v1``, then ``source,step,step_time_s,warmup,line,text``)
has one row per step, the first ``--warmup`` flagged; ingest turns it into the
``workload_steps`` table. Exit 0; 4 with one ``error: no step time`` line on stderr naming what
was looked for and what was seen (the first lines of stdout) when no step is left after the
warm-up; 2 on bad arguments.
"""

import argparse
import csv
import gzip
import json
import math
import os
import re
import sys

NO_STEP_TIME = 4
HEADER = "# ncclbot-workload-steps v1"
COLUMNS = ("source", "step", "step_time_s", "warmup", "line", "text")
UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_SHOWN = 5  # lines of stdout a failure quotes


class NoStepTime(Exception):
    """The run printed no usable step time; the message says what was seen."""


def _seconds(match):
    """The step time (s) a match captured, or None when its time group is empty."""
    groups = match.groupdict()
    for name, unit in UNITS.items():
        if groups.get(name) is not None:
            return float(groups[name]) * unit
    if groups.get("per_s") is not None:
        rate = float(groups["per_s"])
        return 1.0 / rate if rate else math.inf
    return None


def from_regex(text, regex):
    """[(step key, seconds, line number, text)] in the order steps first appear; a step number seen
    again keeps its place and takes the later line (a progress bar redrawn)."""
    pattern = re.compile(regex)
    found = {}
    for number, physical in enumerate(text.split("\n"), 1):
        for piece in physical.split("\r"):
            match = pattern.search(piece)
            seconds = _seconds(match) if match else None
            if seconds is None:
                continue
            step = match.groupdict().get("step")
            key = int(step) if step is not None and step.isdigit() else ("match", len(found))
            found[key] = (key, seconds, number, piece.strip()[:500])
    return list(found.values())


def _trace_files(folder):
    for root, _dirs, names in sorted(os.walk(folder)):
        for name in sorted(names):
            if name.endswith((".json", ".json.gz")):
                yield os.path.join(root, name)


def from_kineto(folder):
    """[(step number, seconds, None, text)]: per ProfilerStep#N the longest span over the traces."""
    longest = {}
    for path in _trace_files(folder):
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        except (ValueError, OSError, EOFError) as exc:
            sys.stderr.write(f"step_times: {path}: not a readable trace ({exc}); skipped\n")
            continue
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        for event in events if isinstance(events, list) else []:
            name = str(event.get("name", "")) if isinstance(event, dict) else ""
            if not name.startswith("ProfilerStep#") or not name[13:].isdigit():
                continue
            try:
                seconds = float(event.get("dur")) * 1e-6
            except (TypeError, ValueError):
                continue
            step = int(name[13:])
            if step not in longest or seconds > longest[step][1]:
                longest[step] = (step, seconds, None, f"{os.path.basename(path)}: {name}")
    return [longest[step] for step in sorted(longest)]


def _first_lines(text):
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    shown = " | ".join(repr(line[:80]) for line in lines[:_SHOWN])
    return f"{len(lines)} non-empty line(s); the first: {shown}" if lines else "stdout was empty"


def read_steps(args):
    """The rows of the CSV; raises NoStepTime with the reason."""
    if args.wall_ns is not None:
        return [(0, args.wall_ns * 1e-9, None, "wall time of the command")]
    if args.kineto is not None:
        rows = from_kineto(args.kineto) if os.path.isdir(args.kineto) else []
        if not rows:
            count = len(list(_trace_files(args.kineto))) if os.path.isdir(args.kineto) else 0
            raise NoStepTime(f"no ProfilerStep#N span in the {count} Kineto trace(s) under {args.kineto} (the "
                             "command must write its torch.profiler traces into $NCCLSWEEP_KINETO_DIR)")
        return rows
    with open(args.stdout, "rb") as fh:
        text = fh.read().decode("utf-8", "replace")
    rows = from_regex(text, args.regex)
    if not rows:
        raise NoStepTime(f"step-time pattern {args.source} matched no line of {os.path.basename(args.stdout)} "
                         f"({_first_lines(text)})")
    return rows


def write_csv(path, source, rows, warmup):
    measured = 0
    with open(path + ".tmp", "w", newline="", encoding="utf-8") as fh:
        fh.write(HEADER + "\n")
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for index, (_key, seconds, line, text) in enumerate(rows):
            is_warmup = index < warmup
            measured += not is_warmup and math.isfinite(seconds) and seconds > 0
            writer.writerow((source, index, repr(seconds), int(is_warmup), "" if line is None else line, text))
    os.replace(path + ".tmp", path)
    return measured


def main(argv):
    parser = argparse.ArgumentParser(prog="step_times.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--regex")
    parser.add_argument("--stdout")
    parser.add_argument("--kineto")
    parser.add_argument("--wall-ns", type=int)
    args = parser.parse_args(argv[1:])
    if sum(x is not None for x in (args.regex, args.kineto, args.wall_ns)) != 1 or (args.regex and not args.stdout):
        parser.error("give one of --regex R --stdout FILE, --kineto DIR, --wall-ns N")
    try:
        rows = read_steps(args)
    except NoStepTime as exc:
        sys.stderr.write(f"error: no step time: {exc}\n")
        return NO_STEP_TIME
    measured = write_csv(args.out, args.source, rows, args.warmup)
    if not measured:
        sys.stderr.write(f"error: no step time: the run printed {len(rows)} step(s), none after the "
                         f"{args.warmup} warm-up step(s) with a time above 0 (raise the command's steps or lower "
                         "workload.warmup_steps)\n")
        return NO_STEP_TIME
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

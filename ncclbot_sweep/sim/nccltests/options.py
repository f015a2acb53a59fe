"""Command-line options of the nccl-tests 2.19 binaries, parsed the way their ``getopt_long`` does.

Short options take their value attached (``-b8``) or as the next word (``-b 8``); long
options as ``--minbytes=8`` or ``--minbytes 8``. Sizes are read as nccl-tests' ``parsesize``
reads them (:func:`ncclbot_sweep.names.parse_size` in its nccl-tests mode). An unknown option
or a bad value raises :class:`UsageError` with the message nccl-tests would print.
"""

from __future__ import annotations

import dataclasses

from ncclbot_sweep.names import NCCL_DATATYPES, canonical_dtype, parse_size

__all__ = ["Options", "UsageError", "parse_options", "REDOPS"]

_WIDTHS = dict(NCCL_DATATYPES)
#: Reduction operations nccl-tests knows.
REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum")


class UsageError(ValueError):
    """A bad command line; nccl-tests prints usage and exits non-zero."""


@dataclasses.dataclass
class Options:
    """The parsed command line (defaults are nccl-tests 2.19's)."""

    nthreads: int = 1
    ngpus: int = 1
    minbytes: int = 32 * 1024 * 1024
    maxbytes: int = 32 * 1024 * 1024
    stepbytes: int = 1024 * 1024
    stepfactor: int = 1
    iters: int = 20
    warmup_iters: int = 5
    agg_iters: int = 1
    run_cycles: int = 1
    parallel_init: int = 0
    check: int = 1
    op: str = "sum"
    datatype: str = "float"
    root: int = 0
    blocking: int = 0
    stream_null: int = 0
    timeout: int = 0
    cudagraph: int = 0
    report_cputime: int = 0
    report_timestamps: int = 0
    average: int = 1
    local_register: int = 0
    per_iter_timing: int = 0
    per_iter_skip: int = 0
    unalign: int = 0
    json_path: str | None = None
    csv_path: str | None = None
    memory_report: int = 0

    @property
    def element_size(self) -> int:
        """Bytes per element of ``-d`` (float's 4 for ``all``, whose first pass is int8 anyway)."""
        return _WIDTHS.get(self.datatype, 4)

    def sizes(self) -> list[int]:
        """Requested sizes, min to max, by factor or fixed step (as the benchmark loop does)."""
        sizes: list[int] = []
        size = self.minbytes
        while size <= self.maxbytes:
            sizes.append(size)
            if self.stepfactor > 1:
                size *= self.stepfactor
            else:
                size += self.stepbytes
            if size == 0:
                break
        return sizes


def _size(text: str) -> int:
    try:
        return parse_size(text, nccl_tests=True)
    except ValueError:
        raise UsageError(f"invalid size specified: {text!r}") from None


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise UsageError(f"invalid number: {text!r}") from None


def _datatype(text: str) -> str:
    if text.lower() == "all":
        return "all"
    name = canonical_dtype(text)
    if name not in _WIDTHS:
        raise UsageError(f"invalid type {text}, must be one of {', '.join(_WIDTHS)}")
    return name


def _redop(text: str) -> str:
    if text.lower() == "all":
        return "all"
    if text.lower() not in REDOPS:
        raise UsageError(f"invalid op {text}, must be one of {', '.join(REDOPS)}")
    return text.lower()


# short flag -> (long name, field, converter)
_SPEC: dict[str, tuple[str, str, object]] = {
    "t": ("nthreads", "nthreads", _int),
    "g": ("ngpus", "ngpus", _int),
    "b": ("minbytes", "minbytes", _size),
    "e": ("maxbytes", "maxbytes", _size),
    "i": ("stepbytes", "stepbytes", _size),
    "f": ("stepfactor", "stepfactor", _int),
    "n": ("iters", "iters", _int),
    "m": ("agg_iters", "agg_iters", _int),
    "w": ("warmup_iters", "warmup_iters", _int),
    "N": ("run_cycles", "run_cycles", _int),
    "p": ("parallel_init", "parallel_init", _int),
    "c": ("check", "check", _int),
    "o": ("op", "op", _redop),
    "d": ("datatype", "datatype", _datatype),
    "r": ("root", "root", _int),
    "z": ("blocking", "blocking", _int),
    "y": ("stream_null", "stream_null", _int),
    "T": ("timeout", "timeout", _int),
    "G": ("cudagraph", "cudagraph", _int),
    "C": ("report_cputime", "report_cputime", _int),
    "S": ("report_timestamps", "report_timestamps", _int),
    "a": ("average", "average", _int),
    "R": ("local_register", "local_register", _int),
    "I": ("per_iter_timing", "per_iter_timing", _int),
    "K": ("per_iter_skip", "per_iter_skip", _int),
    "u": ("unalign", "unalign", _int),
    "J": ("json_file", "json_path", str),
    "F": ("output_file", "csv_path", str),
    "M": ("memory_report", "memory_report", _int),
}
_LONG = {long: short for short, (long, _field, _conv) in _SPEC.items()}
_LONG.update({"json": "J", "output_json": "J", "per_iter": "I", "cputime": "C"})


def _apply(options: Options, short: str, value: str) -> None:
    _long, field, convert = _SPEC[short]
    setattr(options, field, convert(value))  # type: ignore[operator]


def _argument(attached: str | None, args: list[str], missing: str) -> str:
    """An option's required argument: the attached one, else the next word (``getopt``'s rule)."""
    if attached is not None:
        return attached
    if not args:
        raise UsageError(missing)
    return args.pop(0)


def parse_options(argv: list[str]) -> Options:
    """Parse the arguments after the program name; raises :class:`UsageError`."""
    options = Options()
    args = list(argv)
    while args:
        word = args.pop(0)
        if word == "--":
            break
        if word in ("-h", "--help"):
            raise UsageError("help requested")
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if name not in _LONG:
                raise UsageError(f"unrecognized option '{word}'")
            value = _argument(value if eq else None, args, f"option '--{name}' requires an argument")
            _apply(options, _LONG[name], value)
        elif word.startswith("-") and len(word) > 1:
            short, value = word[1], word[2:]
            if short not in _SPEC:
                raise UsageError(f"invalid option -- '{short}'")
            _apply(options, short, _argument(value or None, args, f"option requires an argument -- '{short}'"))
        else:
            raise UsageError(f"unexpected argument {word!r}")
    _validate(options)
    return options


def _validate(options: Options) -> None:
    if options.nthreads < 1 or options.ngpus < 1:
        raise UsageError("the number of threads and GPUs per thread must be at least 1")
    if options.maxbytes < options.minbytes:
        raise UsageError(
            f"invalid sizes: maxbytes ({options.maxbytes}) must be at least minbytes ({options.minbytes})"
        )
    if options.iters < 1 or options.warmup_iters < 0 or options.agg_iters < 1:
        raise UsageError("iters and agg_iters must be at least 1, warmup_iters at least 0")
    if options.stepfactor < 1 or (options.stepfactor == 1 and options.stepbytes < 1):
        raise UsageError("the step (-i bytes or -f factor) must be positive")

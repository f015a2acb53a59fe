"""NCCL-style debug log lines of the simulated process (NCCL 2.29+ formats).

Every line carries NCCL's prefix ``host:pid:tid [dev] NCCL INFO `` (or ``... file:line
NCCL WARN ``). Written here: the version line, the communicator summary (nodes, ranks and
runtime channels, which the cost formula needs), the init tuning table in the three-block
layout of ``tests/fixtures/real/B/ncclebpf-nccl2.29.7-tuning-3block-table-algo-choice.txt``,
and one ``<Coll>: <bytes> Bytes -> Algo <ALGO> proto <PROTO> channel{Lo..Hi}={lo..hi}`` line
per call.
"""

from __future__ import annotations

import dataclasses
from typing import TextIO

from ncclbot_sweep.costmodel import TuningTable
from ncclbot_sweep.names import ALGORITHMS, COLLECTIVES, PROTOCOLS, Arm, log_algorithm_name, log_protocol_name
from ncclbot_sweep.sim.nccltests.environment import DebugConfig

__all__ = ["NcclLog", "tuning_table_lines"]

_BLOCKS = (("Tree", "Ring", "CollNetDirect"), ("CollNetChain", "NVLS", "NVLSTree"), ("PAT",))


def tuning_table_lines(table: TuningTable, max_threads) -> list[str]:
    """The init table as ``ncclTopoTuneModel`` prints it (without the line prefix).

    ``max_threads`` is ``[algorithm, protocol]``. The lone PAT block keeps NCCL's quirk of
    a nine-column protocol row.
    """
    lines: list[str] = []
    for block in _BLOCKS:
        lines.append("  Algorithm   |" + "".join(f" {'':>14s}   {name:>14s}   {'':>14s} |" for name in block))
        lines.append("  Protocol    |" + "".join(f" {p:>14s} |" for p in PROTOCOLS) * 3)
        threads = "".join(
            f" {int(max_threads[ALGORITHMS.index(a)][p]):14d} |" for a in block for p in range(len(PROTOCOLS))
        )
        lines.append(" Max NThreads |" + threads)
        for c, coll in enumerate(COLLECTIVES):
            cells = "".join(
                f"{table.latency_us[c, ALGORITHMS.index(a), p]:8.1f}/{table.bandwidth_gbs[c, ALGORITHMS.index(a), p]:6.1f} |"
                for a in block
                for p in range(len(PROTOCOLS))
            )
            lines.append(f"{coll:>13s} |" + cells)
    return lines


@dataclasses.dataclass
class NcclLog:
    """Writes NCCL log lines for rank 0 to stdout or ``NCCL_DEBUG_FILE``.

    Lines are buffered and flushed by :meth:`flush` (the table printer flushes before each
    table row, so the log and the table interleave as they would).
    """

    config: DebugConfig
    host: str
    pid: int
    stdout: TextIO
    device: int = 0
    _buffer: list[str] = dataclasses.field(default_factory=list)
    _file: TextIO | None = None

    def __post_init__(self) -> None:
        self._prefix = f"{self.host}:{self.pid}:{self.pid} [{self.device}] NCCL INFO "
        if self.config.file_path and (self.config.version or self.config.warn):
            self._file = open(self.config.file_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def info(self, subsystem: str, message: str) -> None:
        if self.config.info(subsystem) or (subsystem == "ALL" and self.config.level in ("INFO", "TRACE")):
            self._buffer.append(self._prefix + message)

    def info_many(self, subsystem: str, messages: list[str]) -> None:
        if self.config.info(subsystem):
            prefix = self._prefix
            self._buffer.extend(prefix + m for m in messages)

    def version(self, text: str) -> None:
        if self.config.version:
            self._buffer.append(self._prefix + text)

    def warn(self, where: str, message: str) -> None:
        if self.config.warn:
            self._buffer.append(f"{self.host}:{self.pid}:{self.pid} [{self.device}] {where} NCCL WARN {message}")

    def collective(self, collective: str, n_bytes: int, arm: Arm, channels: int, repeat: int = 1) -> None:
        """``repeat`` identical per-call TUNING lines (one per call)."""
        if repeat > 0 and self.config.info("TUNING"):
            line = (
                f"{self._prefix}{collective}: {n_bytes} Bytes -> Algo {log_algorithm_name(arm.algorithm)} "
                f"proto {log_protocol_name(arm.protocol)} channel{{Lo..Hi}}={{0..{channels - 1}}}"
            )
            self._buffer.extend([line] * repeat)

    def flush(self) -> None:
        if not self._buffer:
            return
        text = "\n".join(self._buffer) + "\n"
        self._buffer.clear()
        (self._file or self.stdout).write(text)

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

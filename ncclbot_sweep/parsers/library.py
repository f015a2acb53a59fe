"""Which collective library an output comes from (NCCL, or AMD's fork RCCL) and its version.

rccl-tests is nccl-tests ported to ROCm: the same tables, headers and footers, so one parser
reads both, and only a few lines tell them apart. rccl-tests prints ``rccl-tests: Version
develop:83d38d9`` (or, in 2.17+ builds, ``# rccl-tests version 2.17.9-... rccl-headers=22803
rccl-library=22803``), RCCL itself ``RCCL version : 2.28.3-...`` under ``NCCL_DEBUG=VERSION``
and a ``+hip`` build tag in its version string; the devices are AMD's. RCCL numbers its
releases as the NCCL release it follows (2.28.3), so ``runs.nccl_version`` holds either.
"""

from __future__ import annotations

import re

__all__ = ["VERSION_RE", "TESTS_VERSION_RE", "RCCL_TESTS_ONLY", "library_of_version", "library_of_gpu"]

#: ``NCCL version 2.21.5+cuda12.4`` or ``RCCL version : 2.28.3-gfx1151-rccl:a188cf2``.
VERSION_RE = re.compile(r"\b([NR])CCL version\s*:?\s*(\d+\.\d+\.\d+)(\S*)")
#: A line only rccl-tests prints (below its tables, where no version line may be left in an excerpt).
RCCL_TESTS_ONLY = "Errors with asterisks indicate errors"
#: The test suite's version line: ``# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907``,
#: ``# rccl-tests version 2.17.9-... rccl-headers=22803 ...``, or older ``rccl-tests: Version develop:83d38d9``.
TESTS_VERSION_RE = re.compile(
    r"\b([nr])ccl-tests(?: version |: Version )(\S+)(?:.*?[nr]ccl-headers=(\d+))?(?:.*?[nr]ccl-library=(\d+))?"
    r"(?:.*?simulator=(\S+))?")
_AMD_GPU = re.compile(r"\bAMD\b|Radeon|Instinct|\bgfx\d", re.I)
#: NVIDIA's names, with or without the vendor (older nccl-tests print ``A100-SXM4-40GB``).
_NVIDIA_GPU = re.compile(r"NVIDIA|Tesla|GeForce|Quadro|TITAN|\b(?:G[BH])?[ABHLTV]\d{1,3}[A-Z]?\b", re.I)


def library_of_version(match: re.Match) -> str:
    """``rccl`` or ``nccl`` for a :data:`VERSION_RE` or :data:`TESTS_VERSION_RE` match."""
    if match.re is VERSION_RE:
        return "rccl" if match.group(1) == "R" or "+hip" in match.group(3) else "nccl"
    return "rccl" if match.group(1) == "r" else "nccl"


def library_of_gpu(name: str | None) -> str | None:
    """The library a device's name implies (AMD devices run RCCL, NVIDIA's NCCL), or None."""
    if not isinstance(name, str) or not name:
        return None
    if _AMD_GPU.search(name):
        return "rccl"
    return "nccl" if _NVIDIA_GPU.search(name) else None

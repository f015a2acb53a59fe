"""The HTML report: its build steps (:mod:`.build`), figures (:mod:`.figures`), table
writers (:mod:`.tables`) and the one Jinja environment (:mod:`.page`)."""

from __future__ import annotations

from .build import DEFAULT_POLICIES, ReportOptions, build_report
from .tables import to_markdown, write_table

__all__ = ["DEFAULT_POLICIES", "ReportOptions", "build_report", "to_markdown", "write_table"]

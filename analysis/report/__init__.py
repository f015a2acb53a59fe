"""The HTML report: its build steps (:mod:`.build`), headline (:mod:`.headline`), learning curves
(:mod:`.dynamics`) and the one Jinja environment (:mod:`.page`); the figures and table writers
it shares with the studies are the analysis's (:mod:`..figures`, :mod:`..tables`)."""

from __future__ import annotations

from .build import DEFAULT_POLICIES, ReportOptions, build_report

__all__ = ["DEFAULT_POLICIES", "ReportOptions", "build_report"]

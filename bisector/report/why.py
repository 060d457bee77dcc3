"""The report's sections on why each step happened (issue #14), from ReportData only: what changed
in the compiled kernel (bisector/report/kernels.py); markdown.render calls `sections` once."""

from __future__ import annotations

from bisector.report import kernels
from bisector.report.data import ReportData

__all__ = ["sections"]


def sections(data: ReportData) -> list[str]:
    """Every section that has something to say, each starting with a blank line and its heading."""
    return [*kernels.section(data)]

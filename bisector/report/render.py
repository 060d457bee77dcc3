"""Write a report directory: report.md beside its PNG plots (the CSV is written by the pipeline)."""

from __future__ import annotations

from pathlib import Path

from bisector.report import markdown
from bisector.report.data import ReportData

CSV_NAME = "trials.csv.gz"


def write_report(data: ReportData, out: Path) -> Path:
    from bisector.report import plots  # matplotlib: half a second, paid only when a report is written

    out.mkdir(parents=True, exist_ok=True)
    pngs = [p.name for p in plots.render_all(data, out)]
    path = out / "report.md"
    path.write_text(markdown.render(data, pngs, CSV_NAME))
    return path

"""Write a report directory: report.md beside its PNG plots (the CSV is written by the pipeline)."""

from __future__ import annotations

import threading
from pathlib import Path

from bisector.report import markdown
from bisector.report.data import ReportData

CSV_NAME = "trials.csv.gz"


def import_plotting_in_background() -> threading.Thread:
    """Import matplotlib (~0.8 s of CPU) on a thread while the trials run, so that the report at
    the end of a run does not wait for it. Only the third-party library: no module of ours is
    imported from two threads at once."""
    def load() -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401

    thread = threading.Thread(target=load, name="import-matplotlib", daemon=True)
    thread.start()
    return thread


def write_report(data: ReportData, out: Path) -> Path:
    from bisector.report import plots  # matplotlib: half a second, paid only when a report is written

    out.mkdir(parents=True, exist_ok=True)
    pngs = [p.name for p in plots.render_all(data, out)]
    path = out / "report.md"
    path.write_text(markdown.render(data, pngs, CSV_NAME))
    return path

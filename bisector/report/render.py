"""Write a report directory: report.md beside its PNG plots (the CSV is written by the pipeline)."""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
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
        import matplotlib.pyplot

    thread = threading.Thread(target=load, name="import-matplotlib", daemon=True)
    thread.start()
    return thread


class PlotPool:
    """Processes that draw the report's plots side by side at the end of a run, started (and their
    matplotlib imported, at nice 10) while the trials run. The H200 demo's four plots took ~5 s one
    after another after its last trial; drawn side by side, about one plot's time."""

    def __init__(self, workers: int) -> None:
        self._pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_plot_worker
        )
        self._ready = [self._pool.submit(os.getpid) for _ in range(workers)]  # start them now

    @classmethod
    def for_shapes(cls, shapes: int) -> PlotPool | None:
        """One process a plot, up to the cores beyond the bot's own; None where that is one."""
        workers = min(shapes, max(1, (os.cpu_count() or 1) - 1), 8)
        return cls(workers) if workers > 1 else None

    def render(self, data: ReportData, out: Path) -> list[Future[Path]]:
        """Start drawing each shape's plot into `out` (for `write_report`)."""
        from bisector.report import plots

        out.mkdir(parents=True, exist_ok=True)
        return [self._pool.submit(plots.render_shape, data, shape, out) for shape in data.shapes]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _plot_worker() -> None:
    """A plot process: below the trials' priority while it waits, matplotlib loaded before it is asked."""
    try:
        os.nice(10)
    except OSError:
        pass
    from bisector.report import plots  # noqa: F401


def write_report(data: ReportData, out: Path, drawing: Sequence[Future[Path]] = ()) -> Path:
    """report.md and a PNG per shape; `drawing`: the plots as a `PlotPool` draws them, one per shape
    (a plot that failed there is drawn here)."""
    from bisector.report import plots  # matplotlib: half a second, paid only when a report is written

    out.mkdir(parents=True, exist_ok=True)
    futures: Sequence[Future[Path] | None] = drawing or [None] * len(data.shapes)
    paths = [_drawn(future) or plots.render_shape(data, shape, out) for shape, future in zip(data.shapes, futures)]
    path = out / "report.md"
    path.write_text(shipped_links(markdown.render(data, [p.name for p in paths], CSV_NAME), out))
    return path


LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def shipped_links(text: str, out: Path) -> str:
    """Links only to files the report folder holds: a link to anything else (a build log in the work
    dir, a kernel kept elsewhere) becomes its label and the path as text, so a copied report folder
    has no dead link. URLs stay."""
    root = out.resolve()

    def keep(m: re.Match[str]) -> str:
        _bang, label, target = m.groups()
        if "://" in target or target.startswith("#"):
            return m.group(0)
        where = (out / target).resolve()
        if where.is_file() and where.is_relative_to(root):
            return m.group(0)
        return f"{label} (`{target}`)" if label != target else f"`{target}`"

    return LINK.sub(keep, text)


def _drawn(future: Future[Path] | None) -> Path | None:
    """The plot a `PlotPool` drew; None where it was not asked to, or failed (then drawn here)."""
    try:
        return future.result() if future is not None else None
    except Exception:  # noqa: BLE001 - drawn again here, where its error shows
        return None

"""The plots, rendered for real (matplotlib Agg) on synthetic ranges: no two drawn labels overlap.

The boxes are those of the text matplotlib actually drew (Text.draw recorded during a full draw),
so hidden tick labels and labels outside the view do not count, and every drawn one does: tick
labels, step labels, titles, axis labels and the legend."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import matplotlib.text
import pytest
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from bisector.report import plots, render
from bisector.report.data import ReportData
from bisector.report.labels import overlap
from tests import report_fixtures as fx

RANGES: dict[str, Callable[[], ReportData]] = {
    "demo": fx.demo_range,
    "edge": fx.edge_range,
    "five-steps": fx.five_step_range,
    "dense": fx.dense_range,
}


def drawn_labels(fig: Figure) -> list[tuple[str, Bbox]]:
    """Every non-empty text drawn on the figure, with its box in pixels."""
    drawn: list[tuple[str, Bbox]] = []
    original = matplotlib.text.Text.draw

    def spy(self: matplotlib.text.Text, renderer: object) -> None:
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self.get_text(), self.get_window_extent(renderer)))

    matplotlib.text.Text.draw = spy  # type: ignore[method-assign]
    try:
        fig.canvas.draw()
    finally:
        matplotlib.text.Text.draw = original  # type: ignore[method-assign]
    return drawn


@pytest.mark.parametrize("name", sorted(RANGES))
def test_no_two_labels_overlap(name: str) -> None:
    data = RANGES[name]()
    for shape in data.shapes:
        fig = plots.figure(data, shape)
        try:
            labels = drawn_labels(fig)
            width, height = fig.canvas.get_width_height()
        finally:
            plots.plt.close(fig)
        clashes = [
            (a, b) for i, (a, box_a) in enumerate(labels) for b, box_b in labels[i + 1 :] if overlap(box_a, box_b)
        ]
        assert not clashes, f"{name} {shape}: {clashes[:5]}"
        outside = [t for t, box in labels if box.x0 < 0 or box.y0 < 0 or box.x1 > width or box.y1 > height]
        assert not outside, f"{name} {shape}: cut off at the figure's edge: {outside}"
        # Every step is labelled once on the overview and once as a zoom's title.
        for step in data.steps:
            label = f"#{step.pr} {step.change_pct[shape]:+.1f}%"
            assert sum(t == label for t, _ in labels) == 1, (name, label)
            assert any(t.startswith(f"#{step.pr} {step.commit[:7]}\n") for t, _ in labels), (name, step.pr)


def test_x_is_the_measured_commits_in_order_not_an_index_over_the_range() -> None:
    data = fx.edge_range()
    fig = plots.figure(data, "fa/s4096")
    try:
        overview = fig.axes[0]
        xs = list(overview.lines[0].get_xdata())
    finally:
        plots.plt.close(fig)
    assert xs == list(range(len(data.rows)))  # 13 measured commits of 390, equally spaced


def test_the_ends_and_the_step_keep_their_commit_labels_when_labels_are_thinned() -> None:
    data = fx.dense_range()
    fig = plots.figure(data, "gemm/m8192")
    try:
        fig.canvas.draw()
        shown = [t.get_text() for t in fig.axes[2].get_xticklabels() if t.get_text()]
    finally:
        plots.plt.close(fig)
    step = data.steps[0]
    assert len(shown) < len(data.rows)  # thinned: 201 commits do not fit side by side
    for sha in (data.good.sha, data.bad.sha, step.commit):
        assert sha[:7] in shown


def test_write_report_writes_a_png_per_shape(tmp_path: Path) -> None:
    data = fx.five_step_range()
    render.write_report(data, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["tflops-fa_s1024.png"]
    assert (tmp_path / "tflops-fa_s1024.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_pool_draws_each_shape_in_its_own_process_and_the_report_links_them(tmp_path: Path) -> None:
    """On a GPU host the plots are drawn side by side in processes started while the trials run
    (render.PlotPool); the report is the one drawn here, one after another."""
    data = fx.five_step_range()
    pool = render.PlotPool(2)
    try:
        drawing = pool.render(data, tmp_path / "pool")
        pids = {f.result(timeout=120) for f in pool._ready}
        render.write_report(data, tmp_path / "pool", drawing)
    finally:
        pool.close()
    render.write_report(data, tmp_path / "here")
    assert os.getpid() not in pids
    assert (tmp_path / "pool" / "report.md").read_text() == (tmp_path / "here" / "report.md").read_text()
    assert sorted(p.name for p in (tmp_path / "pool").glob("*.png")) == ["tflops-fa_s1024.png"]


def test_matplotlib_is_imported_on_a_thread_while_trials_run() -> None:
    """The pipeline starts the plotting library's import at the run's start (render.import_plotting_in_background):
    the report at the end finds it loaded, on the Agg backend (no display on a GPU host)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom bisector.report import render\nassert 'matplotlib' not in sys.modules\n"
        "render.import_plotting_in_background().join(120)\nimport matplotlib\n"
        "assert 'matplotlib.pyplot' in sys.modules and matplotlib.get_backend().lower() == 'agg'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]

"""PNG plots (matplotlib Agg), one per shape, readable in five seconds:

- top: the metric the steps were tested on (ratio, or full-clock TFLOP/s), a dot per trial and a
  line through the medians, over the measured commits in order, equally spaced (on a linear index
  over a 389-commit range a step at one end was squeezed against the axis);
- middle: the subject's and the control's TFLOP/s, each as a share of its own median, so the
  control's drift shows on its own line instead of a band that spans the axis on a busy machine;
- bottom: a zoom on each step, the parent and culprit with a neighbour each side.

Step labels are stacked and commit labels thinned so that no two collide (bisector/report/labels.py).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Annotation

from bisector.model import Step
from bisector.report import labels
from bisector.report.data import METRIC_UNIT, ReportData

BLUE, RED, GREEN, GREY = "#1f5fa8", "#c0392b", "#27ae60", "#777777"
MAX_ZOOMS = 6  # zoom panels per figure; more steps in one shape: the largest
ZOOM_SIDE = 1  # measured commits shown on each side of a step's parent and culprit
ROW = 0.1  # height of a row of step labels, in axes fraction


@dataclass(frozen=True)
class Point:
    """One measured (or skipped) commit on the x axis of a shape's plot."""

    sha: str
    label: str
    kind: str  # "ok" | "wrong" | "skipped"
    metric: tuple[float, ...] = ()
    samples: tuple[float, ...] = ()  # the subject's TFLOP/s per trial
    subject: float | None = None
    control: float | None = None


def plot_name(shape: str) -> str:
    return "tflops-" + re.sub(r"[^\w.-]+", "_", shape) + ".png"


def points(data: ReportData, shape: str) -> list[Point]:
    """The commits this shape's plot shows, in range order: measured, wrong, or skipped."""
    wrong = {w.sha for w in data.wrong if w.shape == shape}
    by_sha: dict[str, Point] = {}
    for row in data.rows:
        sha = row.commit.sha
        if sha in wrong:
            by_sha[sha] = Point(sha, row.commit.short, "wrong")
        elif row.metric.get(shape) or shape in row.subject_tflops:
            by_sha[sha] = Point(
                sha,
                row.commit.short,
                "ok",
                tuple(row.metric.get(shape, ())),
                tuple(row.samples.get(shape, ())),
                row.subject_tflops.get(shape),
                row.control_tflops.get(shape),
            )
    for sha in data.skipped:
        by_sha.setdefault(sha, Point(sha, sha[:7], "skipped"))
    order = {c.sha: i for i, c in enumerate(data.range_commits)}
    return sorted(by_sha.values(), key=lambda p: order.get(p.sha, len(order)))


def _step_label(step: Step, shape: str) -> str:
    who = f"#{step.pr}" if step.pr else step.commit[:7]
    return f"{who} {step.change_pct[shape]:+.1f}%"


def _step_x(step: Step, index: dict[str, int]) -> float | None:
    """Between the step's parent and its culprit (the first of its candidates)."""
    if step.parent not in index:
        return None
    after = next((index[c] for c in (step.commit, *step.candidates) if c in index), index[step.parent] + 1)
    return (index[step.parent] + after) / 2.0


def _metric_series(ax: Axes, xs: Sequence[float], pts: Sequence[Point]) -> None:
    for x, p in zip(xs, pts):
        if p.metric:
            ax.scatter([x] * len(p.metric), p.metric, s=7, color=BLUE, alpha=0.4, lw=0, zorder=2)
    medians = [statistics.median(p.metric) if p.metric else float("nan") for p in pts]
    ax.plot(xs, medians, "-o", color=BLUE, ms=3.5, lw=1.1, zorder=3)


def _headroom(ax: Axes, values: Sequence[float], rows: int) -> None:
    """y limits that leave the top `rows` label rows free of data."""
    if not values:
        return
    lo, hi = min(values), max(values)
    if hi <= lo:
        lo, hi = lo * 0.95 - 1e-12, hi * 1.05 + 1e-12
    top = 1.0 - 0.04 - ROW * rows
    span = (hi - lo) / max(top - 0.06, 0.2)
    ax.set_ylim(lo - 0.06 * span, lo - 0.06 * span + span)


def _zoom(ax: Axes, shape: str, step: Step, pts: Sequence[Point]) -> None:
    """The step's parent and culprit with a measured neighbour each side, every trial shown."""
    index = {p.sha: i for i, p in enumerate(pts)}
    ip = index[step.parent]
    ic = next((index[c] for c in (step.commit, *step.candidates) if c in index), ip + 1)
    lo = ip
    for _ in range(ZOOM_SIDE):  # a measured neighbour each side
        lo = next((k for k in range(lo - 1, -1, -1) if pts[k].kind == "ok"), lo)
    hi = ic
    for _ in range(ZOOM_SIDE):
        hi = next((k for k in range(hi + 1, len(pts)) if pts[k].kind == "ok"), hi)
    window = [k for k in range(lo, hi + 1) if pts[k].kind == "ok"]
    xs = list(range(len(window)))
    _metric_series(ax, xs, [pts[k] for k in window])
    cut = sum(1 for k in window if k <= ip) - 0.5
    color = RED if step.change_pct[shape] < 0 else GREEN
    ax.axvline(cut, color=color, lw=1.4)
    lo_ci, hi_ci = step.ci95.get(shape, (float("nan"), float("nan")))
    who = f"#{step.pr} " if step.pr else ""
    ax.set_title(
        f"{who}{step.commit[:7]}\n{step.change_pct[shape]:+.1f}% [{lo_ci:+.1f}, {hi_ci:+.1f}]",
        fontsize=7.5,
        color=color,
    )
    ax.set_xticks(xs, [pts[k].label for k in window], rotation=90, fontsize=6)
    ax.set_xlim(-0.6, len(window) - 0.4)
    ax.tick_params(axis="y", labelsize=6)
    ax.grid(alpha=0.3)


def _draw_series(shared: Sequence[Axes], xs: Sequence[int], pts: Sequence[Point]) -> None:
    """Top: the metric per trial and its medians; then the subject's TFLOP/s; then the control's;
    across all three, where a commit gave wrong results or did not build or run."""
    ax, sub, ctl = shared
    _metric_series(ax, xs, pts)
    for x, p in zip(xs, pts):
        if p.samples:
            sub.scatter([x] * len(p.samples), p.samples, s=6, color=BLUE, alpha=0.35, lw=0, zorder=2)
    sub.plot(xs, [p.subject if p.subject else float("nan") for p in pts], "-o", color=BLUE, ms=2.5, lw=1.0)
    ctl.plot(xs, [p.control if p.control else float("nan") for p in pts], "--o", color=GREY, ms=2.5, lw=1.0)
    for x, p in zip(xs, pts):
        for a in shared:
            if p.kind == "wrong":
                a.axvspan(x - 0.45, x + 0.45, color=RED, alpha=0.12, lw=0)
            elif p.kind == "skipped":
                a.axvline(x, color=GREY, lw=0.7, ls="--")


def _mark_steps(
    shared: Sequence[Axes], steps: Sequence[Step], shape: str, index: dict[str, int], n: int
) -> list[Annotation]:
    """Each step's line across the panels and its label at the top of the first (placed later)."""
    texts = []
    for step in steps:
        x = _step_x(step, index)
        assert x is not None  # the caller keeps only the steps that have one
        color = RED if step.change_pct[shape] < 0 else GREEN
        for a in shared:
            a.axvline(x, color=color, lw=1.5, zorder=1)
        right = x > 0.6 * max(n - 1, 1)
        text = shared[0].annotate(
            _step_label(step, shape),
            (x, 0.97),
            xycoords=("data", "axes fraction"),
            xytext=(-3 if right else 3, 0),
            textcoords="offset points",
            color=color,
            fontsize=8,
            ha="right" if right else "left",
            va="top",
            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85},
        )
        text.set_in_layout(False)
        texts.append(text)
    return texts


def _legend_handles(steps: Sequence[Step], pts: Sequence[Point], shape: str) -> list[Artist]:
    """One legend entry per kind of mark the figure draws."""
    handles: list[Artist] = [
        Line2D([], [], color=BLUE, marker="o", ms=3.5, lw=1.1, label="median per commit"),
        Line2D([], [], color=BLUE, marker="o", ms=3, lw=0, alpha=0.4, label="one trial"),
    ]
    if any(s.change_pct[shape] < 0 for s in steps):
        handles.append(Line2D([], [], color=RED, lw=1.5, label="regression"))
    if any(s.change_pct[shape] > 0 for s in steps):
        handles.append(Line2D([], [], color=GREEN, lw=1.5, label="improvement"))
    if any(p.kind == "wrong" for p in pts):
        handles.append(Patch(color=RED, alpha=0.12, label="wrong results"))
    if any(p.kind == "skipped" for p in pts):
        handles.append(Line2D([], [], color=GREY, lw=0.7, ls="--", label="did not build or run"))
    return handles


def figure(data: ReportData, shape: str) -> Figure:
    """The shape's figure, laid out, its labels placed; the caller saves and closes it."""
    pts = points(data, shape)
    index = {p.sha: i for i, p in enumerate(pts)}
    steps = [s for s in data.steps if shape in s.shapes and _step_x(s, index) is not None]
    zooms = sorted(sorted(steps, key=lambda s: -abs(s.change_pct[shape]))[:MAX_ZOOMS], key=lambda s: index[s.parent])
    metric = data.metric_of(shape)
    unit = METRIC_UNIT.get(metric, metric)
    ylabel = f"ratio to {data.control}" if metric == "ratio" else unit

    fig = plt.figure(figsize=(11.0, 7.4 if zooms else 5.6), dpi=110, layout="constrained")
    heights = [3.0, 1.4, 0.9, 1.6] if zooms else [3.0, 1.4, 0.9]
    # At least three columns: one zoom alone would stretch over the whole width.
    grid = fig.add_gridspec(len(heights), max(3, len(zooms)), height_ratios=heights)
    ax = fig.add_subplot(grid[0, :])
    sub = fig.add_subplot(grid[1, :], sharex=ax)
    ctl = fig.add_subplot(grid[2, :], sharex=ax)
    shared = (ax, sub, ctl)
    xs = list(range(len(pts)))

    _draw_series(shared, xs, pts)
    texts = _mark_steps(shared, steps, shape, index, len(pts))
    for a, name in ((ax, ylabel), (sub, "subject\nTFLOP/s"), (ctl, f"{data.control}\n(control)\nTFLOP/s")):
        a.set_ylabel(name, fontsize=7.5)
        a.tick_params(axis="y", labelsize=6.5)
        a.grid(alpha=0.3)
    for a in (ax, sub):
        a.tick_params(axis="x", labelbottom=False)
    ax.set_xlim(-0.6, len(pts) - 0.4)
    skipped = sum(p.kind == "skipped" for p in pts)
    tried = f", {skipped} skipped" if skipped else ""
    ax.set_title(
        f"{shape}: {ylabel}, what its steps were tested on; {len(pts) - skipped} measured{tried} of the "
        f"{len(data.range_commits)} commits {data.good.short}..{data.bad.short}, in order",
        fontsize=9,
    )

    handles = _legend_handles(steps, pts, shape)
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=7, frameon=False)

    for k, step in enumerate(zooms):
        _zoom(fig.add_subplot(grid[3, k]), shape, step, pts)

    # Lay out with every commit label, freeze the layout, then place and thin the labels on it.
    ticks = [p.label for p in pts]
    ctl.set_xticks(xs, ticks, rotation=90, fontsize=6.5)
    ctl.set_xlabel("the commits measured (or tried), in range order, equally spaced", fontsize=7)
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    # Labels that must stay: the ends and each culprit, then each step's parent, then the rest.
    culprits = [index[s.commit] for s in steps if s.commit in index]
    parents = [index[s.parent] for s in steps]
    labels.thin_ticks(fig, ctl, xs, ticks, [0, len(pts) - 1, *culprits, *parents], rotation=90, fontsize=6.5)
    fig.draw_without_rendering()
    rows = labels.stack(fig, texts, ROW)
    _headroom(ax, [v for p in pts for v in p.metric], rows)
    return fig


def render_shape(data: ReportData, shape: str, out: Path) -> Path:
    fig = figure(data, shape)
    path = out / plot_name(shape)
    fig.savefig(path)
    plt.close(fig)
    return path


def _legend_outside(ax: Axes) -> None:
    """Right of the axes: inside, a legend hid the first commits' points (the GOOD end)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def render_trend(
    dates: Sequence[str],
    series: dict[str, Sequence[float | None]],
    control: dict[str, Sequence[float | None]],
    out: Path,
    title: str,
) -> Path:
    """Nightly trend: one line per shape over past nights, the control dashed in the same colour."""
    fig, ax = plt.subplots(figsize=(10.5, 3.6), dpi=110)
    for i, (shape, values) in enumerate(series.items()):
        color = f"C{i % 10}"
        ax.plot(dates, values, "-o", ms=3, color=color, label=shape)  # type: ignore[arg-type]  # None: a gap
        if shape in control:
            ax.plot(dates, control[shape], "--", lw=0.8, color=color, alpha=0.6)  # type: ignore[arg-type]  # as above
    ax.set_ylabel("TFLOP/s (dashed: control)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out

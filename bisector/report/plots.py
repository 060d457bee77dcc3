"""PNG plots (matplotlib Agg): per shape, TFLOP/s over the range with steps and the control's band."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bisector.report.data import ReportData  # noqa: E402


def plot_name(shape: str) -> str:
    return "tflops-" + re.sub(r"[^\w.-]+", "_", shape) + ".png"


def _legend_outside(ax: plt.Axes) -> None:
    """Right of the axes: inside, a legend hid the first commits' points (the GOOD end)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def render_shape(data: ReportData, shape: str, out: Path) -> Path:
    index = {c.sha: i for i, c in enumerate(data.range_commits)}
    rows = [r for r in data.rows if shape in r.subject_tflops]
    wrong = {w.sha for w in data.wrong if w.shape == shape}
    fig, ax = plt.subplots(figsize=(10.5, 3.6), dpi=110)
    xs = [index[r.commit.sha] for r in rows]
    ax.plot(xs, [r.subject_tflops[shape] for r in rows], "-o", color="#1f5fa8", ms=4, lw=1.2,
            label="subject (median)", zorder=3)
    for r in rows:
        spread = r.samples.get(shape, ())
        if spread:
            ax.scatter([index[r.commit.sha]] * len(spread), spread, s=6, color="#1f5fa8", alpha=0.35, zorder=2)
    controls = [r.control_tflops[shape] for r in data.rows if shape in r.control_tflops]
    if controls:
        ax.axhspan(min(controls), max(controls), color="#999999", alpha=0.25, lw=0)
        ax.axhline(sorted(controls)[len(controls) // 2], color="#777777", lw=1, ls="-.",
                   label=f"{data.control} (control): median, min–max band")
    for w in wrong:
        if w in index:
            ax.axvline(index[w], color="#c0392b", lw=0.8, ls=":")
    if wrong:
        ax.plot([], [], color="#c0392b", ls=":", label="wrong results")
    for sha in data.skipped:
        if sha in index:
            ax.axvline(index[sha], color="#777777", lw=0.6, ls="--")
    if data.skipped:
        ax.plot([], [], color="#777777", ls="--", lw=0.6, label="did not build")
    for step in data.steps:
        if shape not in step.shapes or step.commit not in index:
            continue
        x = index[step.commit] - 0.5
        color = "#c0392b" if step.change_pct[shape] < 0 else "#27ae60"
        ax.axvline(x, color=color, lw=1.5)
        label = f"#{step.pr}" if step.pr else step.commit[:7]
        ax.annotate(f"{label} {step.change_pct[shape]:+.1f}%", (x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(3, -12), textcoords="offset points", color=color, fontsize=8)
    ax.set_xlim(-0.5, len(data.range_commits) - 0.5)
    ticks = sorted({0, len(data.range_commits) - 1, *(index[s.commit] for s in data.steps if s.commit in index)})
    ax.set_xticks(ticks, [data.range_commits[t].short for t in ticks], rotation=30, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{shape} over {data.good.short}..{data.bad.short}", fontsize=10)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    fig.tight_layout()
    path = out / plot_name(shape)
    fig.savefig(path)
    plt.close(fig)
    return path


def render_all(data: ReportData, out: Path) -> list[Path]:
    return [render_shape(data, shape, out) for shape in data.shapes]


def render_trend(dates: Sequence[str], series: dict[str, Sequence[float | None]],
                 control: dict[str, Sequence[float | None]], out: Path, title: str) -> Path:
    """Nightly trend: one line per shape over past nights, the control dashed in the same colour."""
    fig, ax = plt.subplots(figsize=(10.5, 3.6), dpi=110)
    for i, (shape, values) in enumerate(series.items()):
        color = f"C{i % 10}"
        ax.plot(dates, values, "-o", ms=3, color=color, label=shape)
        if shape in control:
            ax.plot(dates, control[shape], "--", lw=0.8, color=color, alpha=0.6)
    ax.set_ylabel("TFLOP/s (dashed: control)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out

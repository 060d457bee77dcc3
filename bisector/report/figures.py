"""Numbers as the report prints them: TFLOP/s, a metric's median with its spread, changes with
their intervals. One place, so a figure reads the same in every section and in the summary."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bisector.model import Comparison
from bisector.report.data import ReportData
from bisector.search.samples import SampleStats


def tflops(value: float) -> str:
    """One decimal at GPU scale (1284.6), four significant digits below (0.08651 on a CPU)."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"


def _cv(cv: float) -> str:
    return f"±{cv:.1f}%" if cv >= 0.1 else f"±{cv:.2f}%"


def metric_value(value: float, metric: str) -> str:
    """A ratio to four significant digits; a full-clock speed (or the speed at the latency) as TFLOP/s."""
    return tflops(value) if metric in ("speed", "latency_speed") else f"{value:.4g}"


def metric_cell(values: Sequence[float], metric: str) -> str:
    """`0.6312 ±2.1% (4)`: median over the trials, their spread, how many."""
    if not values:
        return ""
    stats = SampleStats(tuple(values))
    spread = f" {_cv(stats.cv_pct)}" if stats.cv_pct is not None else ""
    return f"{metric_value(stats.median, metric)}{spread} ({stats.n})"


def change(c: Comparison) -> str:
    """`-11.0% [-11.8, -10.2]`: the change and its 95% interval."""
    lo, hi = c.ci95
    return f"{c.change_pct:+.1f}% [{_bound(lo)}, {_bound(hi)}]"


def _bound(x: float) -> str:
    return f"{x:+.1f}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")


def commit_ref(sha: str, data: ReportData, subject: bool = False) -> str:
    """`abc1234 (#12)`: a commit as every section names it; with its subject line where asked."""
    c = data.commit(sha)
    return f"`{sha[:7]}`" + (f" (#{c.pr})" if c and c.pr else "") + (f" {c.subject}" if subject and c else "")


P_FLOOR = 1e-12  # below this a p-value says nothing more (and floats print 0 or 5e-210)


def p_value(p: float) -> str:
    """`p < 1e-12` below the floor; `3e-5` under 0.001; two significant digits above (0.012, 0.2)."""
    if not math.isfinite(p):
        return "?"
    if p < P_FLOOR:
        return "< 1e-12"
    if p < 1e-3:
        mantissa, exponent = f"{p:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{p:.2g}"


def pct(value: float | None) -> str:
    """`-33.4%`, or nothing when unknown."""
    return f"{value:+.1f}%" if value is not None else ""


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str] | None = None) -> list[str]:
    """A markdown table's lines."""
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def short_shape(shape: str) -> str:
    """ "fa/s4096" -> "s4096"."""
    return shape.split("/", 1)[1] if "/" in shape else shape

"""Pure: the `/perf` A/B answer. Per-trial samples of two commits in, a verdict per shape and a table out.

The samples are the search's own metric per shape (config.Thresholds.metric: the subject/control
ratio, or the subject's full-clock speed; search/samples.trial_metric) and the statistics are the
search's (`stats.compare`), so a "slower" here means what a step means in a bisection: significant
and at least min_step_pct.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bisector.model import Comparison, Verdict
from bisector.search import stats


class PerfVerdict(enum.Enum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"
    NOT_SURE = "not sure"
    WRONG = "wrong results"
    MISSING = "not measured"


@dataclass(frozen=True)
class ShapeAB:
    shape: str
    verdict: PerfVerdict
    comparison: Comparison | None
    base_tflops: float | None
    head_tflops: float | None
    control_tflops: float | None


def verdict_of(c: Comparison) -> PerfVerdict:
    if c.verdict is Verdict.DIFFERENT:
        return PerfVerdict.FASTER if c.change_pct > 0 else PerfVerdict.SLOWER
    return PerfVerdict.SAME if c.verdict is Verdict.SAME else PerfVerdict.NOT_SURE


def compare_shapes(
    shapes: Sequence[str],
    base: Mapping[str, Sequence[float]],
    head: Mapping[str, Sequence[float]],
    min_step: Callable[[str], float],
    alpha: float,
    wrong: frozenset[str] = frozenset(),
    tflops: Mapping[str, Mapping[str, float]] | None = None,
) -> tuple[ShapeAB, ...]:
    """tflops: {"base": {shape: median}, "head": {...}, "control": {...}} for the table."""
    tf = tflops or {}
    out = []
    for shape in shapes:
        cells = (tf.get("base", {}).get(shape), tf.get("head", {}).get(shape), tf.get("control", {}).get(shape))
        if shape in wrong:
            out.append(ShapeAB(shape, PerfVerdict.WRONG, None, *cells))
        elif not base.get(shape) or not head.get(shape):
            out.append(ShapeAB(shape, PerfVerdict.MISSING, None, *cells))
        else:
            c = stats.compare(base[shape], head[shape], min_step(shape), alpha, shape)
            out.append(ShapeAB(shape, verdict_of(c), c, *cells))
    return tuple(out)


def unsure(rows: Sequence[ShapeAB]) -> bool:
    return any(r.verdict is PerfVerdict.NOT_SURE for r in rows)


def overall(rows: Sequence[ShapeAB]) -> str:
    kinds = {r.verdict for r in rows}
    if PerfVerdict.WRONG in kinds:
        return "wrong results"
    if PerfVerdict.SLOWER in kinds:
        return "slower"
    if kinds & {PerfVerdict.NOT_SURE, PerfVerdict.MISSING}:
        return "not sure"
    return "faster" if PerfVerdict.FASTER in kinds else "same"


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None or not math.isfinite(x) else fmt.format(x)


def table(rows: Sequence[ShapeAB]) -> list[str]:
    lines = [
        "| shape | merge base TFLOP/s | PR head TFLOP/s | control TFLOP/s | change | 95% CI | verdict |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        c = r.comparison
        change = _num(c.change_pct, "{:+.1f}%") if c else "—"
        ci = f"[{_num(c.ci95[0], '{:+.1f}')}, {_num(c.ci95[1], '{:+.1f}')}]%" if c else "—"
        verdict = f"**{r.verdict.value}**" if r.verdict in (PerfVerdict.SLOWER, PerfVerdict.WRONG) else r.verdict.value
        lines.append(
            f"| {r.shape} | {_num(r.base_tflops)} | {_num(r.head_tflops)} | {_num(r.control_tflops)} | "
            f"{change} | {ci} | {verdict} |"
        )
    return lines


def _moved(rows: Sequence[ShapeAB]) -> list[str]:
    """The asker's answer in one line: the shapes that moved (or went wrong), before how it was measured."""
    parts = [
        f"{r.shape} {r.verdict.value}" + (f" {_num(r.comparison.change_pct, '{:+.1f}%')}" if r.comparison else "")
        for r in rows
        if r.verdict in (PerfVerdict.SLOWER, PerfVerdict.FASTER, PerfVerdict.WRONG)
    ]
    return [", ".join(parts) + ".", ""] if parts else []


def body(
    rows: Sequence[ShapeAB],
    head: str,
    base: str,
    trials: Mapping[str, int],
    min_step_pct: float,
    alpha: float,
    notes: Sequence[str] = (),
) -> str:
    """The comment text (without marker): overall verdict, the table, how to read it."""
    lines = [
        f"### bisector `/perf`: the PR head is **{overall(rows)}**",
        "",
        *_moved(rows),
        f"PR head `{head[:12]}` against its merge base `{base[:12]}`, "
        f"{trials.get('base', 0)} + {trials.get('head', 0)} trials (each a fresh process, control timed in "
        "the same process).",
        "",
        *table(rows),
        "",
        f"Change: subject/control ratio, head vs merge base. *faster*/*slower*: significant (p < {alpha:g}) "
        f"and at least {min_step_pct:g}%; *same*: the 95% interval lies within ±{min_step_pct:g}%; "
        "*not sure*: neither yet, more trials would tell.",
    ]
    lines += [""] + [f"- {n}" for n in notes] if notes else []
    return "\n".join(lines) + "\n"

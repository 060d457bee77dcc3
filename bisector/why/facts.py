"""Facts the report states that no single stage measured: how each step moved the subject's own
TFLOP/s and the control's beside the metric, and what to do first (the action summary). Computed
once from the stages' results; bisector/report/ only renders them."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bisector.model import Step
from bisector.search.evidence import CommitRow
from bisector.why.fixes import FixResult
from bisector.why.interactions import Interaction

__all__ = ["Action", "Overlap", "StepMove", "actions", "step_moves"]


@dataclass(frozen=True)
class StepMove:
    """One step on one shape: the metric's change beside the subject's TFLOP/s and the control's
    (medians over each commit's trials). A control that moved by more than the step's noise (the
    half width of its 95% interval, at least half of min_step) moved for the machine's reasons
    (power, clocks), not the commit's: the ratio corrects for it, the subject's TFLOP/s do not."""

    commit: str
    shape: str
    metric_pct: float
    subject_pct: float | None
    control_pct: float | None
    noise_pct: float

    @property
    def control_moved(self) -> bool:
        return self.control_pct is not None and abs(self.control_pct) > self.noise_pct


def _pct(before: float | None, after: float | None) -> float | None:
    return 100.0 * (after / before - 1.0) if before and after is not None else None


def step_moves(
    steps: Sequence[Step], rows: Sequence[CommitRow], min_step: Callable[[str], float]
) -> tuple[StepMove, ...]:
    by_sha = {r.commit.sha: r for r in rows}
    out = []
    for step in steps:
        before, after = by_sha.get(step.parent), by_sha.get(step.candidates[-1] if step.candidates else step.commit)
        for shape in step.shapes:
            lo, hi = step.ci95.get(shape, (0.0, 0.0))
            subject = _pct(
                before.subject_tflops.get(shape) if before else None, after.subject_tflops.get(shape) if after else None
            )
            control = _pct(
                before.control_tflops.get(shape) if before else None, after.control_tflops.get(shape) if after else None
            )
            out.append(
                StepMove(
                    step.commit,
                    shape,
                    step.change_pct[shape],
                    subject,
                    control,
                    max((hi - lo) / 2, min_step(shape) / 2),
                )
            )
    return tuple(out)


@dataclass(frozen=True)
class Overlap:
    """Another step that hides or overlaps this one on a shape, from the reverts combined on the tip."""

    other: str
    shape: str
    verdict: str  # "hide" | "overlap"
    alone_pct: float  # this revert's gain with the other step in
    with_other_pct: float  # its gain once the other is reverted too


@dataclass(frozen=True)
class Action:
    """A verified regression and what to do about it: its revert measured on the tip (None: no
    revert was tried), and the steps that hide or overlap it."""

    step: Step
    fix: FixResult | None
    overlaps: tuple[Overlap, ...] = ()

    @property
    def gain_pct(self) -> float:
        """The median gain of its revert on the tip over its shapes (for the order: largest first)."""
        if self.fix is None or not self.fix.vs_tip:
            return float("-inf")
        return statistics.median(c.change_pct for c in self.fix.vs_tip.values())


def _overlaps(step: Step, interactions: Sequence[Interaction]) -> tuple[Overlap, ...]:
    out = []
    for inter in interactions:
        for p in inter.pairs:
            if p.verdict not in ("hide", "overlap") or step.commit not in (p.a, p.b):
                continue
            mine_a = p.a == step.commit
            out.append(
                Overlap(
                    p.b if mine_a else p.a,
                    p.shape,
                    p.verdict,
                    p.alone_pct if mine_a else p.other_alone_pct,
                    p.with_other_pct if mine_a else p.other_with_pct,
                )
            )
    return tuple(out)


def actions(
    steps: Sequence[Step], fixes: Sequence[FixResult], interactions: Sequence[Interaction]
) -> tuple[Action, ...]:
    """Per verified regression, its revert and what hides it; the largest gain on the tip first."""
    by_commit = {f.step_commit: f for f in fixes}
    found = [
        Action(s, by_commit.get(s.commit), _overlaps(s, interactions)) for s in steps if s.is_regression and s.verified
    ]
    return tuple(sorted(found, key=lambda a: -a.gain_pct))

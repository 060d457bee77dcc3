"""Where the control moved with the commit: the subject's own speed is then the headline.

A control timed in the same process as the subject shares its GPU's power and clock budget: a
power-bound subject that draws less leaves the control more clock, and the ratio counts the
control's rise as the subject's gain (an H200 demo's revert read +69.1% on the ratio where the
subject's own TFLOP/s gained +39.3%). Where the control moved beyond the comparison's noise between
builds measured side by side (by the minimum step or more), the report leads with the subject's own
TFLOP/s change and gives the
ratio's beside it. Pure: it reads ReportData only."""

from __future__ import annotations

from dataclasses import dataclass

from bisector.report.data import ReportData
from bisector.why.fixes import FixResult


@dataclass(frozen=True)
class RevertMove:
    """A revert on the tip, one shape: the subject's own median TFLOP/s change against the tip's, and
    the control's change it implies beside the ratio's (same rounds)."""

    subject_pct: float
    control_pct: float


def revert_move(fix: FixResult, shape: str, data: ReportData) -> RevertMove | None:
    """The move where the step was decided on the ratio and the control moved with the revert by more
    than the comparison's noise (half its 95% interval) and the minimum step; else None. The rounds
    are side by side, so a move that large is the build's, not the machine's drift."""
    tip = fix.vs_tip.get(shape)
    restored, before = fix.restored.get(shape), fix.tip.get(shape)
    if data.metric_of(shape) != "ratio" or tip is None or not restored or not before or tip.change_pct <= -100:
        return None
    subject = 100.0 * (restored / before - 1.0)
    control = 100.0 * ((1.0 + subject / 100.0) / (1.0 + tip.change_pct / 100.0) - 1.0)
    lo, hi = tip.ci95
    noise = max((hi - lo) / 2.0, data.min_step(shape))
    return RevertMove(subject, control) if abs(control) > noise else None


WARNING = (
    "A control timed in the same process moves with the machine (clocks, load) and also with the commit: "
    "a power-bound subject that draws more or less power leaves the control less or more clock. The "
    "ratio then counts the control's move as the subject's, so where the control moved beyond the "
    "step's noise the subject's own TFLOP/s change is the one to quote (in bold); the ratio decided the "
    "step, and both are shown."
)

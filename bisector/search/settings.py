"""How the search decides: the minimum step, the false-step budget, trials per commit and their cap,
the devices it may use at once, and the decisions near the threshold and under drift (off by default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bisector.model import min_step_for


@dataclass(frozen=True)
class SearchSettings:
    min_step_pct: float = 1.0  # smaller changes are not steps
    min_steps: Mapping[str, float] = field(default_factory=dict)  # a suite's or shape's own, over it
    alpha: float = 0.01  # chance of one false step per search
    initial_repeats: int = 3  # trials per commit at first
    max_repeats: int = 24  # UNKNOWN doubles trials up to this
    # Trials a commit gets first once the run's noise is known (pooled over the commits measured):
    # a difference of many noise widths is decided by one trial a side; only a close one buys more.
    first_look: int = 1
    verify: bool = True  # re-measure each culprit against its parent with fresh trials
    interior_points: int = 3  # measured up front besides GOOD and BAD (see module docstring)
    rechecks: int = 2  # passes of step 5 at most (0: none)
    second_look: bool = True  # a step its first fresh look drops is looked at in another lineage
    width: int = 1  # devices free: commits probed at once when an interval is split (k-ary, k = width + 1)
    # A commit probed to split a part is measured on the shapes that moved, or may have, between the
    # part's ends (not shown the same there: `_State.open_shapes`), where the probe measures shapes
    # alone (`probe.shaped`); False: on every shape. On the H200 demo's six shapes a GEMM step's split
    # points timed attention too, ~3 s of a first trial's 4.3 s on the device. What it gives up: the
    # chance find, at a split point, of two opposite steps that cancel between the part's ends on a
    # shape that read the same there (the grid is what looks for those: module docstring, step 1).
    split_on_moved: bool = True
    # A verification's fresh looks measure the candidate's shapes, those its pair has not shown the
    # same, and those it lacks (brought to n trials beyond the look's n at most), where the probe
    # measures shapes alone (`_State.look_shapes`); False: every shape, lacking ones brought to the
    # pair's count first. On one H100 the demo's verification round took ~78 trials of all four
    # shapes (110 s). A shape shown the same over the pair's trials could not join the step from
    # its fresh trials alone before either (a shape joins on all of the pair's trials).
    verify_on_open: bool = True
    # Trials a side one pair's decision may reach (0: `max_repeats`): a pair still unclear there is
    # reported undecided with its interval (bisector/search/zone.py) instead of doubling on.
    decision_trials: int = 0
    # Seconds of trial time between re-measurements of the anchor (GOOD) that tell drift with time
    # apart from steps (bisector/search/drift.py); 0: none. Needs a probe that says when trials ran.
    anchor_s: float = 0.0
    # The indifference zone (bisector/search/zone.py): a pair is a step's when its change is beyond the
    # zone's middle (3/4 of the minimum step) by the detection's level, and a step whose change over
    # all its verified trials is under the minimum step is reported as a small change, not a step.
    zone: bool = False

    def __post_init__(self) -> None:
        if self.min_step_pct <= 0 or any(v <= 0 for v in self.min_steps.values()) or not 0 < self.alpha < 0.5:
            raise ValueError("min_step_pct must be > 0 and alpha in (0, 0.5)")
        if not 1 <= self.initial_repeats <= self.max_repeats:
            raise ValueError("need 1 <= initial_repeats <= max_repeats")
        if not 1 <= self.first_look <= self.initial_repeats:
            raise ValueError("need 1 <= first_look <= initial_repeats")
        if self.width < 1:
            raise ValueError("need width >= 1")
        if self.rechecks < 0:
            raise ValueError("need rechecks >= 0")
        if self.decision_trials < 0 or self.anchor_s < 0:
            raise ValueError("need decision_trials >= 0 and anchor_s >= 0")

    def min_step(self, shape: str) -> float:
        return min_step_for(shape, self.min_step_pct, self.min_steps)

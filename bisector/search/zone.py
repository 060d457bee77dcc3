"""The indifference zone between "no step" and "a step", and the pairs a decision leaves in it.

Steps of at least the minimum step must be found; changes under half of it are not steps; in
between, either answer is right, so the search does not buy trials to tell 2.9% from 3.1%.
A pair whose interval sits inside the zone is reported as a small change with its interval; a pair
still unclear when its decision's trials run out (`SearchSettings.decision_trials`) is reported
undecided, with its interval, instead of doubling on (a decode GEMM's neighbours 2-3% apart on a 3%
minimum step were doubled to 24 trials each). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from bisector.model import Comparison, Step, Verdict

__all__ = ["ZonePair", "in_zone", "zone_pairs", "decision_cap", "merged", "small_step", "rejudged", "zone_middle"]


@dataclass(frozen=True)
class ZonePair:
    """One shape of an adjacent measured pair the search stopped on without a step: `decided` when
    its 95% interval sits inside the zone (a small change), else left undecided at the trial cap."""

    before: str
    after: str
    shape: str
    change_pct: float
    ci95: tuple[float, float]
    trials: tuple[int, int]  # the two commits' trials the comparison read
    decided: bool

    def line(self) -> str:
        """ "a small change (-2.1% [-2.6, -1.6])", or "undecided at 8 trials a side (-2.6% [-3.3, -1.9])"."""
        figures = f"{self.change_pct:+.1f}% [{self.ci95[0]:+.1f}, {self.ci95[1]:+.1f}]"
        if self.decided:
            return f"a small change ({figures})"
        return f"undecided at {min(self.trials)} trials a side ({figures})"


def in_zone(c: Comparison, min_step: float) -> bool:
    """The 95% interval lies between half the minimum step and the minimum step, on one side."""
    lo, hi = c.ci95
    half = min_step / 2.0
    return (half <= lo and hi < min_step) or (-min_step < lo and hi <= -half)


def zone_pairs(
    before: str, after: str, comps: Mapping[str, Comparison], min_step: Callable[[str], float], at_cap: bool = False
) -> list[ZonePair]:
    """The shapes of a finished comparison that land in the zone: SAME ones whose interval sits inside
    it (small changes), and at the trial cap the UNKNOWN ones (undecided, whatever their estimate)."""
    out = []
    for s, c in sorted(comps.items()):
        small = c.verdict is Verdict.SAME and in_zone(c, min_step(s))
        if small or (at_cap and c.verdict is Verdict.UNKNOWN):
            out.append(ZonePair(before, after, s, c.change_pct, c.ci95, (c.n_before, c.n_after), small))
    return out


def zone_middle(min_step: float) -> float:
    """The change a search's detection tests beyond: the middle of the zone, 3/4 of the minimum step."""
    return 0.75 * min_step


NEAR = 1.2  # an estimate up to this many minimum steps is near the threshold


def near_threshold(c: Comparison, min_step: float) -> bool:
    """The estimate is under NEAR minimum steps and the 95% interval reaches no further than twice
    it: whatever more trials say, the change is near the threshold or under it. A change read well
    above it, or a wide interval (the CPU demo's -30% step at a 20% minimum, 9% per-trial noise:
    [-40, -18] at 6 trials a side, its p just short of the detection's), is a question worth its
    trials: a cap there missed that step in a quarter of replays."""
    return abs(c.change_pct) <= NEAR * min_step and max(abs(c.ci95[0]), abs(c.ci95[1])) <= 2.0 * min_step


def decision_cap(max_repeats: int, decision_trials: int, had: int, in_zone_now: bool = True) -> int:
    """Trials a side a pair's decision may reach: `max_repeats`, or with `decision_trials` (0: none)
    that many, never fewer than the pair had when the decision began; only for a question near the
    threshold (`in_zone_now`, `near_threshold`)."""
    if decision_trials <= 0 or not in_zone_now:
        return max_repeats
    return min(max_repeats, max(decision_trials, had))


def merged(pairs: Iterable[ZonePair], steps: Iterable[tuple[str, str, Iterable[str]]] = ()) -> tuple[ZonePair, ...]:
    """One entry per (pair, shape), the last decision's; none where a step was found (parent,
    commit, shapes): a pair decided again later (the bridge, a recheck) says what it says last."""
    found = {(p, c, s) for p, c, shapes in steps for s in shapes}
    last: dict[tuple[str, str, str], ZonePair] = {}
    for z in pairs:
        last[(z.before, z.after, z.shape)] = z
    return tuple(z for k, z in last.items() if k not in found)


def small_step(
    step: Step, trials: Callable[[str], tuple[int, int]], min_step: Callable[[str], float]
) -> list[ZonePair] | None:
    """A verified step whose every change over all its trials is under the minimum step, as the
    small changes it is (each shape's pair and interval); None for a step of the minimum size."""
    if any(abs(step.change_pct.get(s, 0.0)) >= min_step(s) for s in step.shapes):
        return None
    out = []
    for s in step.shapes:
        if s in step.change_pct:
            c = Comparison(s, Verdict.SAME, step.change_pct[s], step.ci95[s], step.p_value[s], *trials(s))
            out.append(ZonePair(step.parent, step.commit, s, c.change_pct, c.ci95, trials(s), in_zone(c, min_step(s))))
    return out


def rejudged(
    pairs: Sequence[ZonePair], now: Callable[[ZonePair], Comparison | None], min_step: Callable[[str], float]
) -> tuple[ZonePair, ...]:
    """The pairs on their comparison `now` (the search's last reading: a shape found drifting since is
    read on its final view): a small change stays one only inside the zone; an undecided pair that
    now reads the same outside it is dropped, as is a pair with nothing to compare."""
    out = []
    for z in pairs:
        c = now(z)
        if c is None:
            continue
        small = c.verdict is Verdict.SAME and in_zone(c, min_step(z.shape))
        if small or (not z.decided and c.verdict is not Verdict.SAME):
            out.append(replace(z, change_pct=c.change_pct, ci95=c.ci95, trials=(c.n_before, c.n_after), decided=small))
    return tuple(out)

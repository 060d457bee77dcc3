"""What the search decided on and where it stopped short: its result beyond the steps.

`DecidedResult` is the search's `SearchResult` with `Decisions`: the pairs in the indifference
zone (small changes and pairs undecided at the cap, bisector/search/zone.py), per shape the metric
it was decided on and the anchor's drift that chose it (bisector/search/drift.py), the latency
shapes whose noise raised their minimum step (bisector/search/latency_floor.py), and the minimum
steps, so that a report can say "no step >= 3%" and why the metric it names decided.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bisector.model import LATENCY_KEY, WARM_KEY, SearchResult, Step, base_shape
from bisector.search.drift import DriftFinding
from bisector.search.latency_floor import LatencyFloor
from bisector.search.zone import ZonePair

__all__ = ["Decisions", "DecidedResult", "decision_lines", "latency_pairs", "warm_pairs"]

ZONE_LINES = 8  # pairs in the zone named in a report; the rest counted


@dataclass(frozen=True)
class Decisions:
    zone: tuple[ZonePair, ...] = ()
    drift: tuple[DriftFinding, ...] = ()
    min_step: Mapping[str, float] = field(default_factory=dict)  # per shape searched, as configured
    latency_floors: tuple[LatencyFloor, ...] = ()  # latency shapes decided at a raised minimum step


@dataclass(frozen=True)
class DecidedResult(SearchResult):
    decisions: Decisions = Decisions()


def _short(sha: str) -> str:
    return sha[:7]


def _per_call(speed_pct: float) -> float:
    """A change of speed (or of a ratio to the control) as the change of the time a call takes."""
    return (100.0 / (100.0 + speed_pct) - 1.0) * 100.0


def _derived(steps: tuple[Step, ...], suffix: str) -> list[tuple[Step, str, float, float | None]]:
    """Each step's changes on a derived shape (its key ends in `suffix`): the step, the base shape,
    the derived shape's change and the base shape's change (None where it did not move)."""
    return [
        (s, base_shape(key), s.change_pct[key], s.change_pct.get(base_shape(key)))
        for s in steps
        for key in s.shapes
        if key.endswith(suffix)
    ]


def latency_pairs(steps: tuple[Step, ...]) -> list[str]:
    """A latency step next to its kernel time: "gemm/decode at 3a52501: eager callers +76% per call;
    the kernel itself -20%" (the kernel's figure where the step measured it)."""
    return [
        f"{base} at {_short(s.commit)}: eager callers {_per_call(change):+.0f}% per call"
        + (
            f"; the kernel itself {_per_call(kernel):+.0f}%"
            if kernel is not None
            else "; the kernel itself not moved by the minimum step"
        )
        for s, base, change, kernel in _derived(steps, LATENCY_KEY)
    ]


def warm_pairs(steps: tuple[Step, ...]) -> list[str]:
    """A step in a shape's warm-cache time (`cache = "warm"`), said to be seen only warm where the cold
    kernel time did not move by the minimum step: "gemm/decode at 3a52501: seen only warm (the L2
    left warm between calls): +30% a call; cold, as every caller that streams its data, not moved"."""
    out = []
    for s, base, change, cold in _derived(steps, WARM_KEY):
        warm = f"{_per_call(change):+.0f}% a call"
        out.append(
            f"{base} at {_short(s.commit)}: "
            + (
                f"seen only warm (the L2 left warm between calls): {warm} warm; cold, not moved by the minimum step"
                if cold is None
                else f"warm {warm}, cold {_per_call(cold):+.0f}%"
            )
        )
    return out


def raised_min_steps(result: SearchResult) -> dict[str, float]:
    """The latency shapes whose minimum step the search raised to what its trial cap resolves
    (latency_floor.py), at the step it tested them at: what a report states as their minimum step."""
    d: Decisions | None = getattr(result, "decisions", None)
    return {f.shape: f.tested_at for f in d.latency_floors} if d is not None else {}


def decision_lines(result: SearchResult) -> list[str]:
    """The lines a report and the summary print about what decided: nothing for a result without
    `Decisions` or with nothing to say."""
    d: Decisions | None = getattr(result, "decisions", None)
    if d is None:
        return []
    lines = [f"{f.shape}: {f.why}" for f in d.drift if f.drifted] + [f.line() for f in d.latency_floors]
    lines += latency_pairs(result.steps) + warm_pairs(result.steps)
    if not result.steps and d.min_step:
        steps = sorted(set(d.min_step.values()))
        lines.append("no step >= " + "/".join(f"{v:g}%" for v in steps))
    zone = [f"{z.shape} {_short(z.before)}..{_short(z.after)}: {z.line()}" for z in d.zone]
    lines += zone[:ZONE_LINES] + (
        [f"... and {len(zone) - ZONE_LINES} more pairs in the zone"] if len(zone) > ZONE_LINES else []
    )
    return lines

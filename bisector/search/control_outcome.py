"""A control that could not run: the control's outcome, kept apart from the subject's status.

A trial whose control was refused or raised still times the subject (status ok / wrong, as its own
output says) and records `control_status = "unavailable"` and `control_error` in its protocol; it
has no ratio. These helpers say so wherever a shape's trials are summed up (probe, report, bench).
"""

from __future__ import annotations

from collections.abc import Iterable

from bisector.model import TrialRecord


def control_error(trial: TrialRecord) -> str | None:
    """Why this trial's control could not run, or None when it ran (or there is none)."""
    if trial.protocol.get("control_status") != "unavailable":
        return None
    return str(trial.protocol.get("control_error") or "no reason recorded")


def unavailable_by_shape(trials: Iterable[TrialRecord]) -> dict[str, tuple[int, int, str]]:
    """shape -> (trials whose control was unavailable, trials that ran, the latest reason)."""
    seen: dict[str, list[TrialRecord]] = {}
    for t in trials:
        seen.setdefault(t.shape, []).append(t)
    out = {}
    for shape, mine in seen.items():
        why = [w for t in mine if (w := control_error(t)) is not None]
        if why:
            out[shape] = (len(why), len(mine), why[-1])
    return out


def notes(trials: Iterable[TrialRecord], control: str) -> tuple[str, ...]:
    """One line per shape whose control was unavailable, for a report's notes."""
    return tuple(
        f"{shape}: the control ({control}) was unavailable in {n} of {total} trials: "
        f"{why.splitlines()[0][:300]}. The subject's times are stored; those trials have no ratio."
        for shape, (n, total, why) in sorted(unavailable_by_shape(trials).items())
    )

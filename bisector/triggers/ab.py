"""The A/B of two commits that nightly and `/perf` both run: measure each side, and while a shape
is undecided double the trials (the search's rule), up to `protocol.max_trials`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bisector.config import Protocol, Thresholds
from bisector.model import Measurement, ProbeStatus
from bisector.triggers import perf


def ab_until_sure(
    probe: Callable[[str, int], Measurement],
    base: str,
    other: str,
    keys: Sequence[str],
    thresholds: Thresholds,
    protocol: Protocol,
) -> tuple[Measurement, Measurement, tuple[perf.ShapeAB, ...] | None]:
    """Both sides' measurements and the per-shape comparison; None when a side did not build or run."""
    repeats = protocol.trials
    while True:
        mb, mo = probe(base, repeats), probe(other, repeats)
        if ProbeStatus.SKIP in (mb.status, mo.status):
            return mb, mo, None
        rows = perf.compare_shapes(keys, mb.samples, mo.samples, thresholds.min_step, thresholds.alpha, mo.wrong)
        if not perf.unsure(rows) or repeats * 2 > protocol.max_trials:
            return mb, mo, rows
        repeats *= 2

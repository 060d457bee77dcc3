"""What the search's parts share: a candidate step, trial counts by commit, and the small helpers
its decisions read (rounds of a k-ary split, a comparison's unclear and different shapes)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from bisector.model import Comparison, Verdict

WALK_AHEAD = 3  # commits named ahead per pick of a walk through wrong results (`split`): a pick holds the
# device ~1.6 s on the H200 demo, a cold setup takes 4-5 s (two ahead still left 9 s of waits there)


Counts = dict[int, dict[str, int]]  # commit index -> shape -> trials


@dataclass
class Candidate:
    """A pair (lo, hi) that differs, to be refined until hi - lo == 1, then verified."""

    lo: int
    hi: int
    dirs: dict[str, float]  # shape -> sign of the change at detection
    repeats: int  # trials per commit at which the step became clear


def levels(n: int, k: int) -> int:
    """Rounds of a k-ary split until n commits are down to adjacent pairs: ceil(log_k n), in integers."""
    out, reach = 0, 1
    while reach < max(2, n):
        reach *= k
        out += 1
    return out


def unclear_shapes(comps: Mapping[str, Comparison]) -> tuple[str, ...]:
    """The shapes a pair's trials have not decided yet."""
    return tuple(s for s, c in comps.items() if c.verdict is Verdict.UNKNOWN)


def different_dirs(comps: Mapping[str, Comparison]) -> dict[str, float]:
    """The shapes a pair's trials call different, each with the sign of its change."""
    return {s: math.copysign(1.0, c.change_pct) for s, c in comps.items() if c.verdict is Verdict.DIFFERENT}

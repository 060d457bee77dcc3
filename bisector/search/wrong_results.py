"""Where did wrong results start (and stop)? Bisection on the correctness flag, driven by a probe.

The step search leaves shapes with wrong results out of its comparisons; this pass names the first
commit of each wrong-result window, and the commit that fixed it, as a kernel engineer would ask.
A correctness flag does not need repeats: one trial per commit decides it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bisector.model import Measurement, Probe, ProbeStatus


@dataclass(frozen=True)
class WrongResult:
    sha: str
    shape: str
    max_abs_err: float | None
    max_rel_err: float | None


@dataclass(frozen=True)
class WrongWindow:
    """Shapes wrong from `first` on; `fixed` is the first commit where they are right again (or None)."""

    shapes: tuple[str, ...]
    first: str
    last_good: str
    fixed: str | None = None


def _first_flip(
    order: Sequence[str],
    lo: int,
    hi: int,
    probe: Probe,
    shapes: frozenset[str],
    wrong_at_hi: bool,
    seen: dict[str, Measurement],
) -> int:
    """Smallest index in (lo, hi] whose "any of `shapes` wrong" equals `wrong_at_hi` (lo has the other)."""

    def state(i: int) -> bool | None:
        sha = order[i]
        if sha not in seen or (seen[sha].status is ProbeStatus.OK and not shapes <= seen[sha].known()):
            seen[sha] = probe(sha, 1)  # a split point the search measured on other shapes only
        m = seen[sha]
        return None if m.status is ProbeStatus.SKIP else bool(m.wrong & shapes)

    while hi - lo > 1:
        mid = (lo + hi) // 2
        # A commit that does not build says nothing: walk outwards to the nearest one that does.
        for k in sorted(range(lo + 1, hi), key=lambda k: (abs(k - mid), k)):
            value = state(k)
            if value is not None:
                break
        else:
            return hi  # every commit between does not build: the flip is at one of them, hi is the first known
        if value == wrong_at_hi:
            hi = k
        else:
            lo = k
    return hi


def _flips(
    order: Sequence[str], seen: Mapping[str, Measurement], points: Sequence[int]
) -> list[tuple[int, int, frozenset[str], frozenset[str]]]:
    """(a, b, shapes wrong at b and not at a, shapes wrong at a and not at b), each shape compared
    between the measured commits that know it (`Measurement.known`), in order: a commit measured on other
    shapes only sits between two that do without ending or starting their window."""
    last: dict[str, int] = {}
    found: dict[tuple[int, int], tuple[set[str], set[str]]] = {}
    for b in points:
        now = seen[order[b]]
        for shape in now.known():
            a = last.get(shape)
            last[shape] = b
            if a is None:
                continue
            was, wrong = shape in seen[order[a]].wrong, shape in now.wrong
            if was != wrong:
                found.setdefault((a, b), (set(), set()))[0 if wrong else 1].add(shape)
    by_b = sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    return [(a, b, frozenset(new), frozenset(gone)) for (a, b), (new, gone) in by_b]


def localize_wrong(order: Sequence[str], measured: Mapping[str, Measurement], probe: Probe) -> tuple[WrongWindow, ...]:
    """Every window of wrong results among the measured commits, its start and its fix bisected."""
    seen = dict(measured)
    points = [i for i, sha in enumerate(order) if sha in seen and seen[sha].status is ProbeStatus.OK]
    windows: list[list[Any]] = []  # [shapes, first wrong, first fixed or None]
    for a, b, new, gone in _flips(order, seen, points):
        if new:
            first = _first_flip(order, a, b, probe, new, True, seen)
            windows.append([new, first, None])
        if gone:
            fixed = _first_flip(order, a, b, probe, gone, False, seen)
            for window in windows:
                if window[0] & gone and window[2] is None:
                    window[2] = fixed
    out = []
    for shapes, first, fixed in windows:
        before = max(
            (i for i in range(first) if order[i] in seen and seen[order[i]].status is ProbeStatus.OK), default=0
        )
        out.append(
            WrongWindow(tuple(sorted(shapes)), order[first], order[before], order[fixed] if fixed is not None else None)
        )
    return tuple(out)

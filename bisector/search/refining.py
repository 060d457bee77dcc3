"""The search's refining: a pair that differs split into parts until each step sits on one commit.

A part of the search's state (search/state.py `State`): where a part is cut (`targets`, k-ary with
several devices), which commits the probe is told to prepare ahead (`prefetch`), the candidates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from bisector.model import Verdict
from bisector.search.candidate import WALK_AHEAD
from bisector.search.candidate import Candidate as _Candidate
from bisector.search.candidate import different_dirs as _different
from bisector.search.comparing import Comparing


class Refining(Comparing):
    """How the search splits a pair that differs until each step sits on one commit (a layer of
    `State`, on `Comparing`)."""

    def usable(self, k: int, need: Iterable[str]) -> bool:
        """Commit k has samples of every shape in `need` (a wrong result there is no sample)."""
        return all(self.samples(k, s) for s in need)

    def sized(
        self, shapes: Iterable[str], other: int, enough: Callable[[str, float, int], bool], otherwise: int
    ) -> int:
        """The fewest trials n in [first_look, max(initial_repeats, otherwise)) a commit needs against one with
        `other` trials for `enough(shape, sd, n)` to hold in every shape, with the trial noise sd pooled
        over the run; `otherwise` when none does or that noise is not known yet. Trials sized to the
        effect: a quiet machine decides with one trial a side what a noisy one needs many for."""
        st = self.settings
        sds = {s: self.noise(s) for s in shapes}
        if not sds or any(sd is None for sd in sds.values()):
            return otherwise
        return next(
            (
                n
                for n in range(st.first_look, max(st.initial_repeats, otherwise))
                if all(enough(s, sd.raw_sd, n) for s, sd in sds.items() if sd is not None)
            ),
            otherwise,
        )

    def first_repeats(self, shapes: Iterable[str], other: int) -> int:
        """Trials a newly measured commit gets first: as few as show "no step" at once against a
        neighbour with `other` trials (the change's standard error under a third of the minimum
        step: its 95% interval then fits inside +-min_step around a chance difference of one
        standard error), else as many as its neighbours have. Each shape on its own minimum step."""

        def enough(shape: str, sd: float, n: int) -> bool:
            return sd * math.sqrt(1.0 / n + 1.0 / other) <= math.log1p(self.min_step(shape) / 100.0) / 3.0

        return self.sized(shapes, other, enough, max(self.settings.initial_repeats, other))

    def split(self, lo: int, hi: int, need: Iterable[str] = ()) -> list[int]:
        """Up to `width` commits inside (lo, hi) that split it into equal parts, each the nearest to
        its target that builds and has the shapes in `need` (probing outwards past SKIPs and wrong
        results, one round for all targets at a time); for width 1, the middle."""
        need = tuple(need)
        targets = self.targets(lo, hi)
        on = self.open_shapes(lo, hi, need)
        sized = on or None  # a split point's trials sized on the shapes it is measured on
        repeats = self.first_repeats(
            on or self.shapes(lo, hi) or need, min(self.count(lo, sized), self.count(hi, sized))
        )
        orders = [sorted(range(lo + 1, hi), key=lambda k: (abs(k - t), k)) for t in targets]
        tried: set[int] = set()
        chosen: list[int] = []
        open_slots = list(range(len(targets)))
        first = 1 if need and self.in_wrong_window(lo, hi, need) else repeats
        while open_slots:
            picks: dict[int, int] = {}
            for q in open_slots:
                k = next((k for k in orders[q] if k not in tried and k not in picks.values()), None)
                if k is not None:
                    picks[q] = k
            if not picks:
                break
            bounds = sorted({lo, hi, *chosen, *picks.values()})
            fallbacks = self.walk_ahead(orders, picks, tried) if first == 1 and need else []
            self.prefetch(fallbacks, zip(bounds, bounds[1:]))
            self.measure_points(list(picks.values()), first, on)
            tried.update(picks.values())
            open_slots = []
            for q, k in picks.items():
                if self.measure(k, first) and self.usable(k, need):
                    chosen.append(k)
                else:
                    open_slots.append(q)
            if open_slots and need:
                first = 1
        if any(self.count(k, sized) < repeats for k in chosen):
            self.measure_points([k for k in chosen if self.count(k, sized) < repeats], repeats, on)
        if on:
            return sorted(k for k in set(chosen) if k not in self.skipped)
        return sorted(k for k in set(chosen) if self.measure(k, repeats))

    def in_wrong_window(self, lo: int, hi: int, need: Sequence[str]) -> bool:
        """A commit between lo and hi already wrong on `need`: inside a window of wrong results, where
        a commit shows whether it is usable in one trial and gets the rest of its trials only once it
        is. The H200 demo's bridge across its GEMM window paid 4 trials for each of eight wrong
        commits (studies/demo_replay.py)."""
        return any(
            self.commits[k] in self.meas and not self.usable(k, need) and k not in self.skipped
            for k in range(lo + 1, hi)
        )

    def walk_ahead(self, orders: Sequence[Sequence[int]], picks: Mapping[int, int], tried: set[int]) -> list[int]:
        """Inside a window of wrong results a pick is often wrong too, so the next ones outwards are
        asked for at once: named first, they are set up while this one is measured (the H200 demo's
        bridge probed nine commits one by one, ~5 s of cold setup each on the path). `WALK_AHEAD` a
        pick, none already measured: a measured one costs no trial, and the walk went on to a commit
        nobody had named (5 cold setups of 3.5-4.6 s on that demo's path)."""
        return [
            k
            for q in picks
            for k in itertools.islice(
                (k for k in orders[q] if k not in tried and k not in picks.values() and not self.measured(k)),
                WALK_AHEAD,
            )
        ]

    def open_shapes(self, lo: int, hi: int, need: Sequence[str]) -> tuple[str, ...]:
        """The shapes a split point of (lo, hi) is measured on (`SearchSettings.split_on_moved`): those
        followed (`need`), and every other one the part's ends have not shown the same. A pair's
        doubling stops at its first DIFFERENT shape, and a step can hide behind it: the H200 demo's
        first grid part was DIFFERENT on the GEMM and still unclear on attention, whose -6% step it
        also held (studies/results/split-on-moved.txt). () where every shape is measured (the setting
        off, or a probe without `shaped`)."""
        if not self.settings.split_on_moved or not self.probe.shapes_alone:
            return ()
        return tuple(sorted({*need, *(set(self.shapes(lo, hi)) - self.shown_same(lo, hi))}))

    def shown_same(self, lo: int, hi: int) -> set[str]:
        """The shapes lo and hi share whose trials so far show them the same (SAME: an equivalence
        interval, whatever the test's level)."""
        return {s for s, c in self.compare_now(lo, hi, self.alpha_verify).items() if c.verdict is Verdict.SAME}

    def targets(self, lo: int, hi: int) -> list[int]:
        """Where `split` cuts (lo, hi): `width` points at equal distances; for width 1, the middle."""
        w = min(self.settings.width, hi - lo - 1)
        return [lo + (hi - lo) * q // (w + 1) for q in range(1, w + 1)]

    def prefetch(self, points: Iterable[int], parts: Iterable[tuple[int, int]] = (), last: Iterable[int] = ()) -> None:
        """Before a round: tell the probe, when it can build and compile commits ahead
        (`probe.prefetch`), which new ones the search may ask for next: `points`, then the split
        points of each of `parts` (both halves of a bisection, every part of a k-ary split), then
        those of the parts still `pending`, then the next level's behind a split point already
        measured (`hidden`), then `last`. The build and cold compile of the next round then
        overlap this round's trials, and a part's standby outlives the refining of the one before
        it (the H200 demo set up 12 new commits on the device's path that an earlier request had
        named)."""
        parts = [*parts, *self.pending]
        ks = [
            *points,
            *(k for a, b in parts if b - a > 1 for k in self.targets(a, b)),
            *(k for a, b in parts for k in self.hidden(a, b)),
            *last,
        ]
        self.probe.prefetch([self.commits[k] for k in dict.fromkeys(ks) if not self.measured(k)])

    def measured(self, k: int) -> bool:
        """Commit k has trials already, or does not build: asking for it costs no new trial."""
        return k in self.skipped or self.commits[k] in self.meas

    def hidden(self, lo: int, hi: int) -> list[int]:
        """The next level's split points behind a split point of (lo, hi) already measured: the
        search reaches them with no trial in between (the H200 demo's split(33, 41) reused the
        measured 37 and asked for 35 at once, set up cold: 3.6 s idle)."""
        if hi - lo <= 1:
            return []
        cuts = self.targets(lo, hi)
        known = [c not in self.skipped and self.commits[c] in self.meas for c in cuts]
        bounds = [lo, *cuts, hi]
        return [
            k
            for q, c in enumerate(cuts)
            if known[q]
            for a, b in ((bounds[q], c), (c, bounds[q + 2]))
            if b - a > 1
            for k in self.targets(a, b)
        ]

    def prefetch_grid(self, lo: int, hi: int) -> list[int]:
        """The grid's interior points between GOOD (lo) and BAD (hi); prefetched, then the split
        points of its parts (the first refinement's), asked for before GOOD and BAD are measured
        and again before the grid is."""
        q1 = self.settings.interior_points + 1
        targets = [lo + round((hi - lo) * q / q1) for q in range(1, q1)]
        bounds = sorted({lo, hi, *(t for t in targets if lo < t < hi)})
        # last, each point's nearest neighbour: where the grid moves when a point does not build
        # (the H200 demo's 3ebbba9 did not import; 7ebe652, asked for then, waited 4.2 s cold)
        near = [t - 1 for q, t in enumerate(bounds[1:-1], 1) if t - 1 > bounds[q - 1]]  # localize's order
        self.prefetch(bounds[1:-1], zip(bounds, bounds[1:]), near)
        return targets

    def add_candidate(self, lo: int, hi: int, dirs: dict[str, float]) -> None:
        for cand in self.candidates:
            if (cand.lo, cand.hi) == (lo, hi):  # found again through another shape
                cand.dirs.update(dirs)
                return
        self.candidates.append(_Candidate(lo, hi, dict(dirs), min(self.count(lo), self.count(hi))))

    def refine(self, lo: int, hi: int, dirs: dict[str, float], seen: int | None = None) -> None:
        """`seen`: the views' version the part was judged on; a shape decided on another view since
        (drift found) is judged again before the part is split (drift.Views.version)."""
        if seen is not None and seen != self.views.version:
            dirs = {s: d for s, d in _different(self.compare_pair(lo, hi, dirs)).items() if s in dirs}
            if not dirs:
                return
        points = [] if hi - lo == 1 else self.split(lo, hi, dirs)
        if not points:  # adjacent, or nothing between builds with usable results: a culprit range
            self.add_candidate(lo, hi, dirs)
            return
        bounds = [lo, *points, hi]
        parts = list(zip(bounds, bounds[1:]))
        comps = self.compare_parts(parts)
        seen = self.views.version
        found = [_different(c) for c in comps]
        for shape, sign in dirs.items():
            if any(shape in f for f in found):
                continue
            # The step is in one part; follow the part that moved most in its direction (the first on a tie).
            moves = [c[shape].change_pct * sign if shape in c else -math.inf for c in comps]
            best = max(range(len(moves)), key=lambda k: (moves[k], -k))
            if self.settings.zone and moves[best] < self.min_step(shape):
                continue  # with the zone, a part that moved less than a step is not chased down to a commit
            found[best][shape] = sign
        todo = [(a, b, f) for (a, b), f in zip(parts, found) if f]
        for q, (a, b, f) in enumerate(todo):
            with self.queued([(x, y) for x, y, _ in todo[q + 1 :]]):
                self.refine(a, b, f, seen)

    @contextmanager
    def queued(self, parts: Sequence[tuple[int, int]]) -> Iterator[None]:
        """Inside, `parts` are pending (refined next, in order), before those pending already."""
        before = self.pending
        self.pending = [*parts, *before]
        try:
            yield
        finally:
            self.pending = before

    def evaluate(self, lo: int, hi: int, only: Iterable[str] | None = None) -> None:
        self.prefetch([], [(lo, hi)])  # its middle, split first if the pair differs (a bridge's gap)
        comps = self.compare_pair(lo, hi, only)
        diff = _different(comps)
        if diff:
            self.refine(lo, hi, diff, self.views.version)

    def bridge(self, grid: Sequence[int]) -> None:
        """A shape with wrong results at a grid point has no pair across it: compare its nearest
        usable grid points on that shape, so a step next to a wrong-result window is found. The
        shapes that share those two points are compared together: one search of the gap, not one
        per shape (the H200 demo's window is wrong on three GEMM shapes; studies/demo_replay.py)."""
        for (a, b), on in self.bridge_gaps(grid).items():
            self.evaluate(a, b, on)

    def bridge_gaps(self, grid: Sequence[int]) -> dict[tuple[int, int], tuple[str, ...]]:
        """The pairs `bridge` compares, (a, b) -> the shapes, in order; known once the grid is measured."""
        shapes = sorted({s for g in grid for s in self.meas[self.commits[g]].samples})
        gaps: dict[tuple[int, int], list[str]] = {}
        for shape in shapes:
            have = [g for g in grid if self.usable(g, (shape,))]
            for a, b in zip(have, have[1:]):
                if any(a < g < b for g in grid):
                    gaps.setdefault((a, b), []).append(shape)
        return {gap: tuple(on) for gap, on in sorted(gaps.items())}

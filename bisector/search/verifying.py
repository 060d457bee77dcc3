"""The search's verification: each candidate against its parent on fresh trials, in a new lineage.

A part of the search's state (search/state.py `State`): the looks ahead, the shapes a pair is
looked at on, the whole-change recheck between the verified steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from bisector.model import Comparison, Step, Verdict, base_shape
from bisector.search.candidate import Candidate as _Candidate
from bisector.search.candidate import Counts as _Counts
from bisector.search.candidate import different_dirs as _different
from bisector.search.refining import Refining
from bisector.search.stats import holds


class Verifying(Refining):
    """How the search verifies a candidate on fresh trials (a layer of `State`, on `Refining`)."""

    def independent(self) -> AbstractContextManager[None]:
        """Trials asked for inside come from one new worker lineage where the probe has one
        (`StoreProbe.independent`), also those of nested calls: fresh trials share no process
        history with the trials that found a step, so a build that reads slow in every trial of
        one lineage (not by its code) does not verify."""
        if self.fresh_lineage:
            return nullcontext()
        return self._within(self.probe.independent())

    def another_lineage(self) -> AbstractContextManager[None]:
        """As `independent`, and a new lineage also inside one: a second look at a step whose first
        fresh look (in the pass's lineage) disagreed with the search."""
        return self._within(self.probe.independent())

    @contextmanager
    def _within(self, lineage: AbstractContextManager[None]) -> Iterator[None]:
        with lineage:
            before, self.fresh_lineage = self.fresh_lineage, True
            try:
                yield
            finally:
                self.fresh_lineage = before

    def verify(self, cand: _Candidate) -> tuple[Step, bool]:
        st = self.settings
        holding: set[str] = set()
        fresh: dict[str, Comparison] | None = None  # the holding look's last comparisons
        aside: tuple[_Counts, _Counts] | None = None  # a look whose trials the final judgement leaves out
        if st.verify:
            holding, fresh, aside = self.fresh_looks(cand)
        unmeasured = st.verify and fresh is None  # the probe could not give the fresh trials (offline): unverified
        final = self.compare_now(cand.lo, cand.hi, self.alpha_verify, aside=aside)
        if st.verify and not unmeasured:
            # It holds in its fresh trials and over all of them: two or three fresh trials a side
            # can show a chance difference (one candidate in a hundred at alpha 1%, and a machine
            # whose speed wanders makes many candidates), which all the pair's trials then belie.
            ok = any(
                s in final
                and final[s].p_value < self.alpha_verify
                and final[s].change_pct * cand.dirs.get(s, final[s].change_pct) > 0
                for s in holding
            )
            # Once the step holds, which shapes it moves is judged on every trial of the pair: a
            # shape that moved less than the others may miss the minimum in four fresh trials alone,
            # and a shape whose fresh trials alone moved (-6% [-14, +2] over all) did not move. A
            # shape joins from all the trials only where the fresh ones lean its way and do not
            # rule it out: on a busy CPU a shape read +25% over all trials of a -59% step, its
            # control +121%, a disturbance of the search's trials that the fresh ones did not share.
            moved = holding | {
                s
                for s, c in final.items()
                if c.verdict is Verdict.DIFFERENT
                and fresh is not None
                and s in fresh
                and fresh[s].verdict is not Verdict.SAME
                and fresh[s].change_pct * c.change_pct > 0
            }
            shapes = sorted(s for s in moved if s in final and final[s].p_value < self.alpha_verify) or sorted(holding)
        else:
            shapes = sorted(cand.dirs)
            ok = True
        if not shapes:
            shapes = sorted(cand.dirs)
        between = tuple(self.commits[k] for k in range(cand.lo + 1, cand.hi + 1))
        step = Step(
            commit=between[0],
            parent=self.commits[cand.lo],
            shapes=tuple(shapes),
            change_pct={s: final[s].change_pct for s in shapes if s in final},
            ci95={s: final[s].ci95 for s in shapes if s in final},
            p_value={s: final[s].p_value for s in shapes if s in final},
            levels={s: lv for s in shapes if s in final and (lv := final[s].levels) is not None},
            candidates=between if len(between) > 1 else (),
            verified=ok and st.verify and not unmeasured,
        )
        return step, ok

    def fresh_looks(
        self, cand: _Candidate
    ) -> tuple[set[str], dict[str, Comparison] | None, tuple[_Counts, _Counts] | None]:
        """The candidate looked at on fresh trials: (the shapes it holds on, the holding look's last
        comparisons, or None where none could be taken; the trials set aside, where a second look
        overruled the first)."""
        aside: tuple[_Counts, _Counts] | None = None
        # its first look's trials asked for ahead, or asked for now
        first, n = self.ahead.get((cand.lo, cand.hi)) or (self.counts(cand.lo, cand.hi), self.look_size(cand))
        alpha = self.alpha_verify / max(1, len(self.candidates))
        on = self.look_shapes(cand)
        holding, fresh = self.look(cand, n, alpha, on)
        if not holding and fresh is not None and self.settings.second_look:
            # One worker lineage can read one build ~2x slow throughout, another reads it as it
            # is (studies/results/cpu-slow-builds.txt, part 9: a real step's parent, slow in the
            # verification's lineage only, made the step vanish there). Before a step is dropped,
            # another new lineage looks, at half the level (two chances to hold); if it holds
            # there, the first look's trials are set aside: two lineages (the search's and this
            # one) against one.
            denied = (first, self.counts(cand.lo, cand.hi))
            with self.another_lineage():
                holding, fresh = self.look(cand, n, alpha / 2.0, on)
            aside = denied if holding else None
        return holding, fresh, aside

    def look_size(self, cand: _Candidate) -> int:
        """Fresh trials a side of a candidate's first look, sized to the step found: enough that it
        stands ten noise widths clear (two a side at least, so the pair's own spread floors the
        pooled noise); `look` doubles them only while the answer is unclear."""
        size = min(
            (
                abs(math.log1p(c.change_pct / 100.0))
                for c in self.compare_now(cand.lo, cand.hi, 1.0, cand.dirs).values()
            ),
            default=0.0,
        )
        return max(
            2,
            self.sized(
                cand.dirs, 1, lambda _, sd, k: size >= 10.0 * sd * math.sqrt(2.0 / k), self.settings.initial_repeats
            ),
        )

    def look_ahead(self, pairs: Sequence[tuple[int, int, int, tuple[str, ...] | None]]) -> None:
        """The first fresh look of each pair (lo, hi, n a side, on these shapes or None: every one)
        asked for in one round, side by side, before the looks are judged one by one: judged in
        turn, each look's trials set up only once the look before had ended (~2.3 s with the H200
        idle, each verification of the demo). A pair sharing a commit with one before it is left to
        its own round."""
        mine: dict[tuple[int, int], tuple[int, tuple[str, ...] | None]] = {}
        used: set[int] = set()
        for lo, hi, n, on in pairs:
            if (
                (lo, hi) not in mine
                and not {lo, hi} & used
                and self.commits[lo] in self.meas
                and self.commits[hi] in self.meas
            ):
                mine[(lo, hi)] = (n, on)
                used |= {lo, hi}
        if len(mine) < 2:
            return
        starts = {pair: self.counts(*pair) for pair in mine}
        with self.independent():
            self.measure_shaped(
                {
                    k: per
                    for (lo, hi), (n, on) in mine.items()
                    for k, per in self.fresh_wants(lo, hi, n, self.unshared(lo, hi), on).items()
                }
            )
        for pair, (n, _) in mine.items():
            self.ahead[pair] = (starts[pair], n)

    def look_shapes(self, cand: _Candidate) -> tuple[str, ...] | None:
        """The shapes a verification's fresh looks measure (`SearchSettings.verify_on_open`): the
        candidate's own, those the pair has not shown the same over its trials, and those it lacks
        (a split point measured on its part's open shapes only); None (every shape) with the setting
        off or a probe without `shaped`. A lacking shape was shown the same between the ends of a
        part around the pair, but two steps that cancel there are each found this way (simulated:
        a -17% GEMM step beside a +23% one, both inside a part that read +2%). Fixed at a pair's
        first ask, so a look asked for ahead and the looks after it agree."""
        pair = (cand.lo, cand.hi)
        if pair not in self.looked_on:
            if not self.settings.verify_on_open or not self.probe.shapes_alone:
                self.looked_on[pair] = None
            else:
                same = self.shown_same(*pair) - set(cand.dirs)
                self.looked_on[pair] = tuple(sorted({*self.shapes(*pair), *self.unshared(*pair)} - same))
        return self.looked_on[pair]

    def expect(self, cands: Sequence[_Candidate]) -> None:
        """Tell the probe, where it listens (`probe.expect_steps`), which one-commit steps are about
        to be verified, with their changes so far: a run that measures more of a step afterwards (its
        revert on the tip) can set that up while the verification's trials hold the device."""
        found = [
            (self.commits[c.hi], {s: comp.change_pct for s, comp in self.compare_now(c.lo, c.hi, 1.0, c.dirs).items()})
            for c in cands
            if c.hi - c.lo == 1
        ]
        if found:
            self.probe.expect_steps(found)

    def look(
        self, cand: _Candidate, n: int, alpha: float, on: Iterable[str] | None = None
    ) -> tuple[set[str], dict[str, Comparison] | None]:
        """Fresh trials of the candidate's pair, n a side (of the shapes `on`, None: every one),
        doubled while unclear: the shapes in which they show the step, and the last round's
        comparisons (None: the probe could not give fresh trials, an offline replay)."""
        st = self.settings
        while True:
            fresh = self.fresh_compare(cand.lo, cand.hi, n, also=self.unshared(cand.lo, cand.hi), only=on)
            if any(short_look(s, c, n) for s, c in fresh.items()):
                return set(), None
            holding = self.holding(cand, fresh, alpha)
            settled = all(c.verdict is Verdict.SAME for s, c in fresh.items() if s in cand.dirs)
            # A found step gets a second, larger look before it is dropped, even where pairs
            # of the search may not double (max_repeats == initial_repeats).
            cap = max(st.max_repeats, 2 * st.initial_repeats)
            if holding or settled or n >= cap:
                return holding, fresh
            n = min(cap, 2 * n)

    def holding(self, cand: _Candidate, fresh: Mapping[str, Comparison], alpha: float) -> set[str]:
        """Shapes in which a look's fresh trials show the candidate's step (or a new one outright)."""
        return {
            s
            for s, c in fresh.items()
            if holds(c, cand.dirs.get(s, math.copysign(1.0, c.change_pct)), self.min_step(s), alpha)
            and (s in cand.dirs or c.verdict is Verdict.DIFFERENT)
        }

    def unexplained(self, lo: int, hi: int, steps: Sequence[Step]) -> dict[str, float]:
        """Shapes (-> sign) in which GOOD and BAD, measured again side by side, differ by more than
        the verified steps account for: the fresh trials of BAD, with the steps' changes (over all
        their trials) taken out, compared with GOOD's at a verification's level. A false alarm
        costs a recheck; a run with nothing missing pays 2 x `initial_repeats` trials to ask."""
        n = self.settings.initial_repeats
        out = {}
        for s, (before, after) in self.fresh_samples(lo, hi, n).items():
            if min(len(before), len(after)) < n:
                return {}  # no fresh trials to be had (an offline replay)
            explained = math.exp(sum(math.log1p(step.change_pct[s] / 100.0) for step in steps if s in step.change_pct))
            rest = self.compare_samples(s, before, [x / explained for x in after], self.alpha_verify, detect=True)
            if rest.verdict is Verdict.DIFFERENT:
                out[s] = math.copysign(1.0, rest.change_pct)
        return out

    def recheck(self, lo: int, hi: int, found: Sequence[_Candidate], missing: Mapping[str, float]) -> list[_Candidate]:
        """Step 5 (module docstring): the ends of each segment between `found` measured again side
        by side; each shape `missing` a step is followed into the segment that moved most its way
        (by half the minimum step at least), as is a shape whose segment differs outright. Returns
        the candidates this adds."""
        with self.independent():  # one new lineage for its segments and their bisection
            return self._recheck(lo, hi, found, missing)

    def _recheck(self, lo: int, hi: int, found: Sequence[_Candidate], missing: Mapping[str, float]) -> list[_Candidate]:
        cuts = sorted((c.lo, c.hi) for c in found)
        ends = [lo] + [k for cut in cuts for k in cut] + [hi]
        segments = [(a, b) for a, b in zip(ends[::2], ends[1::2]) if b > a]
        st, before = self.settings, len(self.candidates)
        n = st.initial_repeats
        # a segment's ends measured on the missing shapes too: a split point was measured on the
        # shapes it was followed for only (`split_on_moved`)
        fresh = [
            self.fresh_compare(a, b, n, self.alpha_verify / max(1, len(segments)), missing, detect=True)
            for a, b in segments
        ]
        if any(min(c.n_before, c.n_after) < n for f in fresh for c in f.values()):
            return []  # no fresh trials to be had (an offline replay): nothing to recheck with
        follow: dict[int, dict[str, float]] = {q: _different(f) for q, f in enumerate(fresh)}
        for shape, sign in missing.items():
            moves = [f[shape].change_pct * sign if shape in f else -math.inf for f in fresh]
            best = max(range(len(moves)), key=lambda q: moves[q]) if moves else None
            if best is not None and moves[best] >= self.min_step(shape) / 2.0:
                follow[best][shape] = sign
        for q, dirs in follow.items():
            if dirs:
                self.refine_fresh(*segments[q], dirs)
        return self.candidates[before:]

    def refine_fresh(self, lo: int, hi: int, dirs: dict[str, float]) -> None:
        """Bisect (lo, hi) for a step in `dirs` deciding each half on fresh trials alone, the middle
        measured side by side with each end: the search's own refining already chose on the trials
        it had, and chose wrong, so none of those are trusted here. It follows the half that moved
        most in the step's direction, one step per call."""
        n = self.settings.initial_repeats
        while hi - lo > 1:
            points = self.split(lo, hi, dirs)
            if not points:
                break
            mid = points[len(points) // 2]
            halves = [(lo, mid), (mid, hi)]
            fresh = [self.fresh_compare(a, b, n) for a, b in halves]
            moves = [sum(c[s].change_pct * sign for s, sign in dirs.items() if s in c) for c in fresh]
            lo, hi = halves[0] if moves[0] >= moves[1] else halves[1]
        self.add_candidate(lo, hi, dirs)

    def fresh_samples(
        self, lo: int, hi: int, n: int, also: Iterable[str] = (), only: Iterable[str] | None = None
    ) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Ask both commits for n more trials of the shapes they share (and `also`; of those, `only`
        where given), side by side, in a new worker lineage (`independent`); per shape, only those
        (lo's, hi's)."""
        only = None if only is None else set(only)
        start, asked = self.ahead.pop((lo, hi), (None, 0))
        if start is None or asked != n:  # not asked for ahead (`look_ahead`), or not as many
            start = self.counts(lo, hi)
            with self.independent():
                self.measure_shaped(self.fresh_wants(lo, hi, n, also, only))
        return {
            s: (self.samples(lo, s, start[lo].get(s, 0)), self.samples(hi, s, start[hi].get(s, 0)))
            for s in self.shapes(lo, hi)
            if only is None or s in only
        }

    def fresh_compare(
        self,
        lo: int,
        hi: int,
        n: int,
        alpha: float | None = None,
        also: Iterable[str] = (),
        only: Iterable[str] | None = None,
        detect: bool = False,
    ) -> dict[str, Comparison]:
        """Compare n fresh trials a side (`fresh_samples`), at a verification's level unless told."""
        return {
            s: self.compare_samples(s, before, after, self.alpha_verify if alpha is None else alpha, detect)
            for s, (before, after) in self.fresh_samples(lo, hi, n, also, only).items()
        }


def short_look(shape: str, c: Comparison, n: int) -> bool:
    """Whether a look's comparison lacks the fresh trials asked for: none to be had (an offline
    replay), or a latency shape with fewer than two a side (a trial that judged its call
    device-bound times no latency; one sample short of n is still a look)."""
    got = min(c.n_before, c.n_after)
    return got < n if shape == base_shape(shape) else got < min(n, 2)

"""The search's comparisons: a pair of commits per shape, on the trials it has or fresh ones.

A part of the search's state (search/state.py `State`): pooled-noise comparisons, the per-decision
cap and the indifference zone (search/zone.py), each shape's minimum step (a latency shape's raised
to what the cap resolves on its noise: search/latency_floor.py), and which pairs are still unclear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from bisector.model import LATENCY_KEY, Comparison, Step, Uncertain, Verdict
from bisector.search.candidate import Candidate as _Candidate
from bisector.search.candidate import Counts as _Counts
from bisector.search.candidate import unclear_shapes as _unclear
from bisector.search.latency_floor import LatencyFloor, floor_of, latency_min_step
from bisector.search.measuring import Measuring
from bisector.search.samples import PooledNoise, compare_pooled, pooled_noise
from bisector.search.zone import ZonePair, decision_cap, near_threshold, zone_middle, zone_pairs
from bisector.search.zone import rejudged as zone_rejudged
from bisector.search.zone import small_step as zone_small


class Comparing(Measuring):
    """How the search compares two commits per shape (a layer of `State`, on `Measuring`)."""

    def noise(self, shape: str) -> PooledNoise | None:
        """The trial noise of `shape` at this point of the search (samples.pooled_noise)."""
        return pooled_noise(self.meas.values(), shape)

    def min_step(self, shape: str, pool: PooledNoise | None = None) -> float:
        """The minimum step `shape` is decided at now: its own (`SearchSettings.min_step`), a latency
        shape's raised to what `max_repeats` trials a side resolve on its noise (`pool`, else the
        run's so far: latency_floor.py)."""
        own = self.settings.min_step(shape)
        if not shape.endswith(LATENCY_KEY):
            return own
        return latency_min_step(shape, own, pool or self.noise(shape), self.settings.max_repeats)

    def latency_floors(self) -> tuple[LatencyFloor, ...]:
        """The latency shapes decided at a raised minimum step, on the run's noise as it ends."""
        got = (
            floor_of(s, self.settings.min_step(s), self.noise(s), self.settings.max_repeats)
            for s in sorted(self.every_shape)
            if s.endswith(LATENCY_KEY)
        )
        return tuple(f for f in got if f is not None)

    def compare_samples(
        self, shape: str, before: Sequence[float], after: Sequence[float], alpha: float, detect: bool = False
    ) -> Comparison:
        """`detect`: a search's pair, tested beyond the indifference zone's middle where it has one. A
        latency shape's raised minimum step (`min_step`) widens what reads SAME; its detection still
        tests beyond the middle of its own zone: a -40% dispatch step read on the 2 trials a side a
        replay has was lost when tested beyond the raised zone's middle."""
        pool = self.noise(shape)
        return compare_pooled(
            before,
            after,
            self.min_step(shape, pool),
            alpha,
            shape,
            pool,
            zone_middle(self.settings.min_step(shape)) if detect and self.settings.zone else 0.0,
        )

    def compare_now(
        self,
        i: int,
        j: int,
        alpha: float,
        only: Iterable[str] | None = None,
        aside: tuple[_Counts, _Counts] | None = None,
        detect: bool = False,
    ) -> dict[str, Comparison]:
        """Compare all trials of i and j per shape; `aside`: the trials between two `counts` left out."""

        def kept(k: int, s: str) -> tuple[float, ...]:
            got = self.samples(k, s)
            if aside is None:
                return got
            a, b = aside[0][k].get(s, 0), aside[1][k].get(s, 0)
            return got[:a] + got[b:]

        return {
            s: self.compare_samples(s, kept(i, s), kept(j, s), alpha, detect)
            for s in self.shapes(i, j)
            if only is None or s in only
        }

    def fresh_wants(
        self, lo: int, hi: int, n: int, also: Iterable[str] = (), only: Iterable[str] | None = None
    ) -> dict[int, dict[str, int]]:
        """n trials more of each shape lo and hi share, and of `also` (of those, `only` where given),
        for each of the two: the shape's count now plus n. A shape the commit lacks (a split point
        measured on its part's open shapes: `split_on_moved`) is first brought to the trials it has
        of the shared ones, so that a step is judged on as many trials of it as of the shapes the
        search followed; in a look on open shapes (`only`: `look_shapes`) to n of them at most. A
        pair whose noisy GEMM had doubled to eight trials otherwise took eight trial processes more
        for the shapes it lacked (the H100 demo's #115 pair, 10 trials where 4 would do)."""
        shared = self.shapes(lo, hi)
        on = sorted(s for s in {*shared, *also} if only is None or s in only)
        wants = {}
        for k in (lo, hi):
            have, base = self.meas[self.commits[k]].samples, self.count(k, shared)
            if only is not None:
                base = min(base, n)
            wants[k] = {s: (len(have[s]) if s in have else base) + n for s in on}
        return wants

    def unshared(self, lo: int, hi: int) -> list[str]:
        """The run's shapes lo and hi do not both have samples of, other than those wrong at either."""
        wrong = self.meas[self.commits[lo]].wrong | self.meas[self.commits[hi]].wrong
        return sorted(self.every_shape - set(self.shapes(lo, hi)) - wrong)

    def counts(self, *idxs: int) -> _Counts:
        """Trials per shape of each commit now: where the next fresh trials will start."""
        return {k: {s: len(v) for s, v in self.meas[self.commits[k]].samples.items()} for k in idxs}

    def compare_pair(self, i: int, j: int, only: Iterable[str] | None = None) -> dict[str, Comparison]:
        """Compare, doubling trials while some shape is UNKNOWN and none is DIFFERENT."""
        st = self.settings
        only = tuple(only) if only is not None else None
        start: int | None = None  # trials a side when the decision began
        while True:
            if self.views.far_apart(self.commits[i], self.commits[j]):
                self.remeasure_anchor()  # trials far apart in time: the anchor says first what time did
            comps = self.compare_now(i, j, self.alpha_detect, only, detect=True)
            verdicts = {c.verdict for c in comps.values()}
            if Verdict.DIFFERENT in verdicts or Verdict.UNKNOWN not in verdicts:
                return self.noted(i, j, comps)
            unclear = _unclear(comps)
            n = min(self.count(i, unclear), self.count(j, unclear))
            start = n if start is None else start
            cap = decision_cap(st.max_repeats, st.decision_trials, start, self.in_reach(comps, unclear))
            if n >= cap:
                return self.at_cap(i, j, comps)
            target = min(cap, 2 * n)
            self.measure_shaped({i: dict.fromkeys(unclear, target), j: dict.fromkeys(unclear, target)})
            if min(self.count(i, unclear), self.count(j, unclear)) <= n:  # the probe gave no more trials: stop here
                return self.at_cap(i, j, comps)

    def compare_parts(
        self, parts: Sequence[tuple[int, int]], only: Iterable[str] | None = None
    ) -> list[dict[str, Comparison]]:
        """`compare_pair` of every part, their doublings in one round at a time (width > 1): a
        level of a k-ary split costs as many rounds as its least clear part, not their sum."""
        if self.settings.width == 1 or len(parts) < 2:
            return [self.compare_pair(a, b, only) for a, b in parts]
        st = self.settings
        only = tuple(only) if only is not None else None
        out: dict[int, dict[str, Comparison]] = {}
        starts: dict[int, int] = {}  # per part, trials a side when its decision began
        while len(out) < len(parts):
            wants: dict[int, dict[str, int]] = {}
            asked: list[tuple[int, tuple[str, ...], int]] = []  # (part, its unclear shapes, trials a side before)
            for q, (i, j) in enumerate(parts):
                if q in out:
                    continue
                if self.views.far_apart(self.commits[i], self.commits[j]):
                    self.remeasure_anchor()
                comps = self.compare_now(i, j, self.alpha_detect, only, detect=True)
                verdicts = {c.verdict for c in comps.values()}
                unclear = _unclear(comps)
                n = min(self.count(i, unclear), self.count(j, unclear))
                cap = decision_cap(
                    st.max_repeats, st.decision_trials, starts.setdefault(q, n), self.in_reach(comps, unclear)
                )
                if Verdict.DIFFERENT in verdicts or Verdict.UNKNOWN not in verdicts:
                    out[q] = self.noted(i, j, comps)
                elif n >= cap:
                    out[q] = self.at_cap(i, j, comps)
                else:
                    target = min(cap, 2 * n)
                    for k in (i, j):
                        per = wants.setdefault(k, {})
                        for s in unclear:
                            per[s] = max(per.get(s, 0), target)
                    asked.append((q, unclear, n))
            if wants:
                self.measure_shaped(wants)
            for q, unclear, n in asked:
                i, j = parts[q]
                if min(self.count(i, unclear), self.count(j, unclear)) <= n:  # the probe gave no more trials: stop here
                    out[q] = self.at_cap(i, j, self.compare_now(i, j, self.alpha_detect, only, detect=True))
        return [out[q] for q in range(len(parts))]

    def at_cap(self, i: int, j: int, comps: dict[str, Comparison]) -> dict[str, Comparison]:
        """No more trials for this pair. A shape that moved by the minimum step or more, significant
        at a verification's level (not yet at the detection's per-look share), is followed as a
        step: missing it would be final, while a false one costs a verification, whose fresh trials
        decide (measured: more exact culprits, no more false steps, a few % more trials on noisy
        ranges; studies/results/search-accuracy.txt, demo-replay.txt). The others stay UNKNOWN,
        reported as unsure."""
        out = dict(comps)
        for s, c in comps.items():
            big = abs(c.change_pct) >= self.min_step(s)
            if c.verdict is Verdict.UNKNOWN and big and c.p_value < self.alpha_verify:
                out[s] = replace(c, verdict=Verdict.DIFFERENT)
        unknown = tuple(s for s, c in out.items() if c.verdict is Verdict.UNKNOWN)
        if unknown:
            self.uncertain.append(Uncertain(self.commits[i], self.commits[j], unknown))
        self.zone += zone_pairs(self.commits[i], self.commits[j], out, self.min_step, at_cap=True)
        if unknown:
            self.capped[(i, j)] = self.views.version
        return out

    def stale_caps(self) -> list[tuple[int, int]]:
        """Pairs left unsure at the cap before a shape's view changed (drift found since): their
        question is asked again on the view it is now decided on."""
        stale = [pair for pair, seen in self.capped.items() if seen != self.views.version]
        for pair in stale:
            self.capped[pair] = self.views.version
        return stale

    def small(self, cand: _Candidate, step: Step) -> bool:
        """With the zone on, a verified step whose every change is under the minimum step is noted as
        a small change (zone.small_step), not reported as a step."""
        got = (
            zone_small(step, lambda s: (self.count(cand.lo, [s]), self.count(cand.hi, [s])), self.min_step)
            if self.settings.zone
            else None
        )
        self.zone += got or []
        return got is not None

    def rejudged(self, pairs: Sequence[ZonePair]) -> tuple[ZonePair, ...]:
        """The zone's pairs read again on the measurements as the search ends (zone.rejudged)."""
        index = {sha: k for k, sha in enumerate(self.commits)}

        def now(z: ZonePair) -> Comparison | None:
            i, j = index[z.before], index[z.after]
            if z.shape not in self.shapes(i, j):
                return None
            return self.compare_samples(
                z.shape, self.samples(i, z.shape), self.samples(j, z.shape), self.alpha_detect, detect=True
            )

        return zone_rejudged(pairs, now, self.min_step)

    def in_reach(self, comps: Mapping[str, Comparison], unclear: Iterable[str]) -> bool:
        """Every unclear shape's interval reaches no further than the zone allows (zone.near_threshold):
        more trials would only say on which side of the minimum step a change near it falls."""
        return all(near_threshold(comps[s], self.min_step(s)) for s in unclear)

    def noted(self, i: int, j: int, comps: dict[str, Comparison]) -> dict[str, Comparison]:
        """`comps`, its shapes inside the indifference zone noted as small changes (zone.py)."""
        self.zone += zone_pairs(self.commits[i], self.commits[j], comps, self.min_step)
        return comps

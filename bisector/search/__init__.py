"""Pure multi-step localization over a commit range, driven by an injected probe.

The search (Pinpoint-style):
1. Measure GOOD and BAD, and `interior_points` evenly spaced commits between them. The interior
   points are there because two opposite steps of equal size cancel end to end: a range whose
   ends look the SAME can still hide a regression and its revert. With three interior points
   both steps are found unless they fall between the same two grid points; for one step the grid
   costs one extra commit, since bisection would probe the middle one anyway.
2. Compare every adjacent pair of measured commits per shape (stats.compare). UNKNOWN doubles the
   trials of both commits up to `max_repeats`, of the unclear shapes only where the probe can measure
   some shapes alone (`probe.shaped`); UNKNOWN at the cap counts as SAME-but-uncertain and
   is reported in `uncertain`, unless the change is twice the minimum step and significant at a
   verification's level: then it is followed as a step, and verification decides.
3. Refine every pair that is DIFFERENT in any shape by probing its middle commit (SKIP-aware: the
   nearest buildable commit to the middle), until each step sits between a commit and its parent.
   When a pair was DIFFERENT in a shape but neither half is, the shape follows the half with the
   larger change in the same direction: a step just above the minimum size is not lost because
   its halves' estimates fell just below it. A gap made only of SKIPs is a culprit range.
4. Verify each culprit against its parent with fresh trials (the probe is cumulative: asking for
   `current + n` gives n new trials), side by side; a step holds when its fresh trials show it and
   all the pair's trials agree. Steps that do not hold are dropped. The fresh trials come from a
   new worker lineage where the probe has one (`independent`): a build that read slow in every
   trial forked from one zygote (its history, not its code) does not verify.
5. Account for the whole change: GOOD and BAD are measured again side by side. A shape whose
   change the verified steps do not explain (at a verification's level) is followed into the
   segment between them whose ends, also measured again side by side, moved most its way; that
   segment is bisected on fresh side-by-side trials alone and its culprit verified as above (twice
   at most). It finds a step that comparisons of trials taken at different times missed, on a
   machine whose speed wanders (a neighbour that comes and goes): studies/results/demo-replay.txt.
   A quiet run pays 2 x `initial_repeats` trials for the question.

k-ary probes: with `width` W > 1 devices free, step 3 splits the suspect interval into W+1 parts
and asks for its W inner commits at once (`probe.together`), so a step is pinned in about
log_{W+1} N rounds instead of log2 N; the grid of step 1 is measured in one round too. The
decisions stay the same ones (every adjacent pair compared, a shape followed into the part that
moved most), and the multiple-testing budget counts the (W+1) comparisons of each level. Where
the commits run is the probe's business: the search only says which it wants together.

Decisions near the threshold and under drift (search/zone.py, drift.py; off here, on in the config): with
`zone`, changes between half the minimum step and the minimum are neither steps nor chased, and are
reported with their intervals; `decision_trials` caps a pair's doubling where its question is near
the threshold; `anchor_s` re-measures GOOD over time and decides each shape on the view (subject,
ratio) that does not drift; a latency view is a shape of its own. `localize` returns a DecidedResult.

Multiple testing: `alpha` is the budget for a false step in the whole search. Detection tests each
shape at alpha / (shapes x expected comparisons); verification, an independent second test, at
alpha / (shapes x candidates): when the machine's speed wanders, detection makes many candidates,
and a few fresh trials a side would pass one of them in forty by chance.
"""

from __future__ import annotations

import itertools
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, ContextManager, Iterable, Iterator, Mapping, Sequence

from bisector.model import (Comparison, Measurement, Probe, ProbeStatus, SearchResult, Step, Uncertain, Verdict,  # noqa: F401
                            base_shape, min_step_for, processes_beyond)
from bisector.search.decisions import DecidedResult, Decisions
from bisector.search.drift import Views, merged_measurement as _merged_measurement, probe_wants
from bisector.search.result_form import merged_uncertain as _merged, result_json, uncertain_json
from bisector.search.zone import ZonePair, decision_cap, merged, near_threshold, zone_middle, zone_pairs
from bisector.search.zone import rejudged as zone_rejudged, small_step as zone_small
from bisector.search.samples import POOLED_MIN_DF, PooledNoise, compare_pooled, pooled_noise
from bisector.search.stats import holds, log_sd

WALK_AHEAD = 3  # commits named ahead per pick of a walk through wrong results (`split`): a pick holds the
# device ~1.6 s on the H200 demo, a cold setup takes 4-5 s (two ahead still left 9 s of waits there)

__all__ = ["SearchSettings", "localize", "result_json", "uncertain_json"]


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


_Counts = dict[int, dict[str, int]]  # commit index -> shape -> trials


@dataclass
class _Candidate:
    lo: int
    hi: int
    dirs: dict[str, float]  # shape -> sign of the change at detection
    repeats: int  # trials per commit at which the step became clear


@dataclass
class _State:
    commits: Sequence[str]
    probe: Probe
    settings: SearchSettings
    meas: dict[str, Measurement] = field(default_factory=dict)  # set through `keep`, which counts processes
    probes: list[tuple[str, int]] = field(default_factory=list)
    processes: int = 0  # trial processes the measurements came from (`keep`)
    skipped: set[int] = field(default_factory=set)
    uncertain: list[Uncertain] = field(default_factory=list)
    candidates: list[_Candidate] = field(default_factory=list)
    alpha_detect: float = 0.01
    alpha_verify: float = 0.01
    fresh_lineage: bool = False  # inside `independent`
    # Parts the search will refine after the one it is in (depth first), next first: their split
    # points are named in every prefetch, so their standbys outlive the recursion into this part.
    pending: list[tuple[int, int]] = field(default_factory=list)
    # Fresh trials asked for a pair ahead of its look (`look_ahead`): (lo, hi) -> (where they start, n).
    ahead: dict[tuple[int, int], tuple[_Counts, int]] = field(default_factory=dict)
    # The shapes a pair's verification looks at (`look_shapes`), fixed at its first look.
    looked_on: dict[tuple[int, int], tuple[str, ...] | None] = field(default_factory=dict)
    every_shape: frozenset[str] = frozenset()  # the shapes GOOD and BAD were measured on
    zone: list[ZonePair] = field(default_factory=list)  # pairs stopped on in the indifference zone
    anchor: int = 0  # the commit re-measured for drift (GOOD)
    capped: dict[tuple[int, int], int] = field(default_factory=dict)  # pairs unsure at the cap -> the views' version then
    views: Views = field(init=False)  # the probe's measurements as given, and what each shape is decided on

    def __post_init__(self) -> None:
        self.views = Views(self.settings.anchor_s, self.settings.min_step)

    # -- probing -------------------------------------------------------------------------------
    def keep(self, sha: str, m: Measurement) -> None:
        """`m` is now sha's measurement. The trial processes it adds are counted: a process measures
        every shape it was asked for, so a call adds its largest gain over the shapes. Each commit's
        smallest count, summed, missed the processes that measured some shapes only: an H100
        demo's `--json` said 124 trials for a search of 326."""
        old = self.meas.get(sha)
        self.views.put(m)
        m = self.views.decided(sha)
        self.processes += processes_beyond({k: len(v) for k, v in old.samples.items()} if old else {}, m)
        self.meas[sha] = m
        if self.views.refresh():  # a shape now decided on another view: every commit read again
            self.meas = {k: self.views.decided(k) for k in self.meas}
            self.views.version += 1

    def remeasure_anchor(self) -> None:
        """One trial more of the anchor on every shape, so that drift with time shows on it."""
        self.views.asked()
        have = self.meas[self.commits[self.anchor]].samples
        more = {s: len(v) + 1 for s, v in have.items() if s == base_shape(s)}
        if more and getattr(self.probe, "shaped", None) is not None:
            self.measure_shaped({self.anchor: more})
        elif more:
            self.measure(self.anchor, max(more.values()))

    def measure(self, i: int, repeats: int) -> bool:
        """Make sure commit i has `repeats` trials; False when it is SKIP."""
        if i in self.skipped:
            return False
        sha = self.commits[i]
        have = self.meas.get(sha)
        if have is not None and have.count() >= repeats:
            return True
        if have is not None and have.status is ProbeStatus.OK and getattr(self.probe, "shaped", None) is not None and (
                len({len(v) for v in have.samples.values()}) > 1 or self.every_shape - have.known()):
            # shapes measured unequally (`measure_shaped`), or some only (a split point, `split_on_moved`):
            # only those short of `repeats`, so that none is cut back to it and none is added
            self.measure_shaped({i: dict.fromkeys(have.samples, repeats)})
            return True
        m = self.probe(sha, repeats)
        self.probes.append((sha, repeats))
        if m.status is ProbeStatus.SKIP:
            if have is None:  # a commit that built before keeps its trials if a later one fails
                self.keep(sha, m)
                self.skipped.add(i)
            return False
        self.keep(sha, m)
        return True

    def measure_together(self, wants: Mapping[int, int]) -> None:
        """Make sure each commit i has wants[i] trials, measured side by side when the probe can
        (`probe.together`): a pair's fresh trials then share the machine's state of the moment."""
        if self.views.due():
            self.remeasure_anchor()
        together = getattr(self.probe, "together", None)
        wants = {i: n for i, n in wants.items() if i not in self.skipped and (
            self.commits[i] not in self.meas or self.meas[self.commits[i]].count() < n)}
        if together is None or len(wants) < 2 or any(self.commits[i] not in self.meas for i in wants):
            for i, n in wants.items():
                self.measure(i, n)
            return
        got = together({self.commits[i]: n for i, n in wants.items()})
        for i, n in wants.items():
            sha = self.commits[i]
            self.probes.append((sha, n))
            if got[sha].status is ProbeStatus.OK:
                self.keep(sha, got[sha])  # a commit that measured before keeps its trials if it fails now

    def measure_shaped(self, wants: Mapping[int, Mapping[str, int]]) -> None:
        """Make sure each measured commit i has wants[i][shape] trials of each shape asked for, side
        by side, the trial processes measuring only the shapes still short (`probe.shaped`): a pair
        unclear on one cheap shape doubles that shape, not the whole trial (on the H200 demo 50 of
        54 doubling trials were for some shapes only, attention 0.89 s of a trial's 1.14 s on the
        device). A probe without `shaped` measures every shape, to the largest count asked."""
        if self.views.due():
            self.remeasure_anchor()
        short = {i: {s: n for s, n in per.items() if len(self.meas[self.commits[i]].samples.get(s, ())) < n}
                 for i, per in wants.items() if i not in self.skipped and self.commits[i] in self.meas}
        short = {i: per for i, per in short.items() if per}
        if not short:
            return
        shaped = getattr(self.probe, "shaped", None)
        if shaped is None:
            self.measure_together({i: max(per.values()) for i, per in short.items()})
            return
        got = shaped({self.commits[i]: probe_wants(per) for i, per in short.items()})
        for i, per in short.items():
            sha = self.commits[i]
            self.probes.append((sha, max(per.values())))
            m = got.get(sha)
            if m is not None and m.status is ProbeStatus.OK:
                self.keep(sha, _merged_measurement(self.views.raw[sha], m))

    def measure_many(self, idxs: Sequence[int], repeats: int) -> None:
        """`measure(i, repeats)` for commits the search measures whatever their values (GOOD, BAD,
        the grid) in one round (`probe.together`): their trial processes set up at once and take the
        device in turn. One by one, each commit's setup (seconds on a GPU: context, module load)
        stood between the device and the previous commit's last trial; the decisions are the same."""
        if self.views.due():
            self.remeasure_anchor()
        together = getattr(self.probe, "together", None)
        todo = [i for i in dict.fromkeys(idxs) if i not in self.skipped and (
            self.commits[i] not in self.meas or self.meas[self.commits[i]].count() < repeats)]
        if together is None or len(todo) < 2:
            for i in todo:
                self.measure(i, repeats)
            return
        got = together({self.commits[i]: repeats for i in todo})
        for i in todo:
            sha, m = self.commits[i], got[self.commits[i]]
            self.probes.append((sha, repeats))
            if m.status is ProbeStatus.OK:
                self.keep(sha, m)
            elif sha not in self.meas:  # as in `measure`: a commit that measured before keeps its trials
                self.keep(sha, m)
                self.skipped.add(i)

    def measure_points(self, idxs: Sequence[int], repeats: int, on: Sequence[str]) -> None:
        """`measure_many` for split points, on the shapes `on` only (`open_shapes`; () for every shape).
        A new commit that does not build or run becomes a SKIP, as in `measure_many`."""
        if not on:
            self.measure_many(idxs, repeats)
            return
        idxs = [i for i in dict.fromkeys(idxs) if i not in self.skipped]
        self.measure_shaped({i: dict.fromkeys(on, repeats) for i in idxs if self.commits[i] in self.meas})
        new = [i for i in idxs if self.commits[i] not in self.meas]
        if not new:
            return
        shaped = getattr(self.probe, "shaped")  # `on` is () without it
        got = shaped({self.commits[i]: probe_wants(dict.fromkeys(on, repeats)) for i in new})
        for i in new:
            sha = self.commits[i]
            m = got.get(sha) or Measurement(sha, ProbeStatus.SKIP, reason="not measured")
            self.probes.append((sha, repeats))
            self.keep(sha, m)
            if m.status is not ProbeStatus.OK:
                self.skipped.add(i)

    def count(self, i: int, shapes: Iterable[str] | None = None) -> int:
        """Trials of commit i: the fewest of any shape (of `shapes`, where given)."""
        m = self.meas[self.commits[i]]
        if shapes is None:
            return m.count()
        return min((len(m.samples.get(s, ())) for s in shapes), default=0)

    def samples(self, i: int, shape: str, start: int = 0) -> tuple[float, ...]:
        m = self.meas[self.commits[i]]
        if shape in m.wrong:
            return ()  # a wrong result never makes a commit look fast (or slow)
        return tuple(m.samples.get(shape, ()))[start:]

    def shapes(self, i: int, j: int) -> list[str]:
        a, b = self.meas[self.commits[i]], self.meas[self.commits[j]]
        return sorted(s for s in a.samples if s in b.samples and s not in a.wrong and s not in b.wrong)

    # -- comparing -----------------------------------------------------------------------------
    def noise(self, shape: str) -> PooledNoise | None:
        """The trial noise of `shape` at this point of the search (samples.pooled_noise)."""
        return pooled_noise(self.meas.values(), shape)

    def compare_samples(self, shape: str, before: Sequence[float], after: Sequence[float],
                        alpha: float, detect: bool = False) -> Comparison:
        """`detect`: a search's pair, tested beyond the indifference zone's middle where it has one."""
        step = self.settings.min_step(shape)
        return compare_pooled(before, after, step, alpha, shape, self.noise(shape),
                              zone_middle(step) if detect and self.settings.zone else 0.0)

    def compare_now(self, i: int, j: int, alpha: float, only: Iterable[str] | None = None,
                    aside: tuple[_Counts, _Counts] | None = None, detect: bool = False) -> dict[str, Comparison]:
        """Compare all trials of i and j per shape; `aside`: the trials between two `counts` left out."""
        def kept(k: int, s: str) -> tuple[float, ...]:
            got = self.samples(k, s)
            if aside is None:
                return got
            a, b = aside[0][k].get(s, 0), aside[1][k].get(s, 0)
            return got[:a] + got[b:]
        return {s: self.compare_samples(s, kept(i, s), kept(j, s), alpha, detect)
                for s in self.shapes(i, j) if only is None or s in only}

    def fresh_wants(self, lo: int, hi: int, n: int, also: Iterable[str] = (),
                    only: Iterable[str] | None = None) -> dict[int, dict[str, int]]:
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

    def compare_parts(self, parts: Sequence[tuple[int, int]], only: Iterable[str] | None = None
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
                cap = decision_cap(st.max_repeats, st.decision_trials, starts.setdefault(q, n), self.in_reach(comps, unclear))
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
        st = self.settings
        out = dict(comps)
        for s, c in comps.items():
            big = abs(c.change_pct) >= st.min_step(s)
            if c.verdict is Verdict.UNKNOWN and big and c.p_value < self.alpha_verify:
                out[s] = replace(c, verdict=Verdict.DIFFERENT)
        unknown = tuple(s for s, c in out.items() if c.verdict is Verdict.UNKNOWN)
        if unknown:
            self.uncertain.append(Uncertain(self.commits[i], self.commits[j], unknown))
        self.zone += zone_pairs(self.commits[i], self.commits[j], out, self.settings.min_step, at_cap=True)
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
        got = zone_small(step, lambda s: (self.count(cand.lo, [s]), self.count(cand.hi, [s])), self.settings.min_step) \
            if self.settings.zone else None
        self.zone += got or []
        return got is not None

    def rejudged(self, pairs: Sequence[ZonePair]) -> tuple[ZonePair, ...]:
        """The zone's pairs read again on the measurements as the search ends (zone.rejudged)."""
        index = {sha: k for k, sha in enumerate(self.commits)}

        def now(z: ZonePair) -> Comparison | None:
            i, j = index[z.before], index[z.after]
            if z.shape not in self.shapes(i, j):
                return None
            return self.compare_samples(z.shape, self.samples(i, z.shape), self.samples(j, z.shape), self.alpha_detect,
                                        detect=True)
        return zone_rejudged(pairs, now, self.settings.min_step)

    def in_reach(self, comps: Mapping[str, Comparison], unclear: Iterable[str]) -> bool:
        """Every unclear shape's interval reaches no further than the zone allows (zone.near_threshold):
        more trials would only say on which side of the minimum step a change near it falls."""
        return all(near_threshold(comps[s], self.settings.min_step(s)) for s in unclear)

    def noted(self, i: int, j: int, comps: dict[str, Comparison]) -> dict[str, Comparison]:
        """`comps`, its shapes inside the indifference zone noted as small changes (zone.py)."""
        self.zone += zone_pairs(self.commits[i], self.commits[j], comps, self.settings.min_step)
        return comps

    # -- refining ------------------------------------------------------------------------------
    def usable(self, k: int, need: Iterable[str]) -> bool:
        """Commit k has samples of every shape in `need` (a wrong result there is no sample)."""
        return all(self.samples(k, s) for s in need)

    def sized(self, shapes: Iterable[str], other: int, enough: Callable[[str, float, int], bool], otherwise: int) -> int:
        """The fewest trials n in [first_look, max(initial_repeats, otherwise)) a commit needs against one with
        `other` trials for `enough(shape, sd, n)` to hold in every shape, with the trial noise sd pooled
        over the run; `otherwise` when none does or that noise is not known yet. Trials sized to the
        effect: a quiet machine decides with one trial a side what a noisy one needs many for."""
        st = self.settings
        sds = {s: self.noise(s) for s in shapes}
        if not sds or any(sd is None for sd in sds.values()):
            return otherwise
        return next((n for n in range(st.first_look, max(st.initial_repeats, otherwise))
                     if all(enough(s, sd.raw_sd, n) for s, sd in sds.items() if sd is not None)), otherwise)

    def first_repeats(self, shapes: Iterable[str], other: int) -> int:
        """Trials a newly measured commit gets first: as few as show "no step" at once against a
        neighbour with `other` trials (the change's standard error under a third of the minimum
        step: its 95% interval then fits inside +-min_step around a chance difference of one
        standard error), else as many as its neighbours have. Each shape on its own minimum step."""
        def enough(shape: str, sd: float, n: int) -> bool:
            return sd * math.sqrt(1.0 / n + 1.0 / other) <= math.log1p(self.settings.min_step(shape) / 100.0) / 3.0
        return self.sized(shapes, other, enough, max(self.settings.initial_repeats, other))

    def split(self, lo: int, hi: int, need: Iterable[str] = ()) -> list[int]:
        """Up to `width` commits inside (lo, hi) that split it into equal parts, each the nearest to
        its target that builds and has the shapes in `need` (probing outwards past SKIPs and wrong
        results, one round for all targets at a time); for width 1, the middle."""
        need = tuple(need)
        targets = self.targets(lo, hi)
        on = self.open_shapes(lo, hi, need)
        sized = on or None  # a split point's trials sized on the shapes it is measured on
        repeats = self.first_repeats(on or self.shapes(lo, hi) or need,
                                     min(self.count(lo, sized), self.count(hi, sized)))
        orders = [sorted(range(lo + 1, hi), key=lambda k: (abs(k - t), k)) for t in targets]
        tried: set[int] = set()
        chosen: list[int] = []
        open_slots = list(range(len(targets)))
        # Inside a window of wrong results (a commit between lo and hi already wrong on `need`, or a
        # pick that just was), a commit shows whether it is usable in one trial: the rest of its
        # trials only once it is. The H200 demo's bridge across its GEMM window paid 4 trials for
        # each of eight wrong commits (studies/demo_replay.py).
        first = 1 if need and any(self.commits[k] in self.meas and not self.usable(k, need) and k not in self.skipped
                                  for k in range(lo + 1, hi)) else repeats
        while open_slots:
            picks: dict[int, int] = {}
            for q in open_slots:
                k = next((k for k in orders[q] if k not in tried and k not in picks.values()), None)
                if k is not None:
                    picks[q] = k
            if not picks:
                break
            bounds = sorted({lo, hi, *chosen, *picks.values()})
            # Inside a window of wrong results a pick is often wrong too, and the next one outwards
            # is asked for at once: named first, it is set up while this one is measured (the H200
            # demo's bridge probed nine commits one by one, ~5 s of cold setup each on the path).
            # `WALK_AHEAD` a pick, none already measured: a measured one costs no trial, and the walk
            # went on to a commit nobody had named (5 cold setups of 3.5-4.6 s on that demo's path).
            fallbacks = [k for q in picks for k in itertools.islice(
                (k for k in orders[q] if k not in tried and k not in picks.values() and not self.measured(k)),
                WALK_AHEAD)] if first == 1 and need else []
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

    def open_shapes(self, lo: int, hi: int, need: Sequence[str]) -> tuple[str, ...]:
        """The shapes a split point of (lo, hi) is measured on (`SearchSettings.split_on_moved`): those
        followed (`need`), and every other one the part's ends have not shown the same. A pair's
        doubling stops at its first DIFFERENT shape, and a step can hide behind it: the H200 demo's
        first grid part was DIFFERENT on the GEMM and still unclear on attention, whose -6% step it
        also held (studies/results/split-on-moved.txt). () where every shape is measured (the setting
        off, or a probe without `shaped`)."""
        if not self.settings.split_on_moved or getattr(self.probe, "shaped", None) is None:
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
        ask = getattr(self.probe, "prefetch", None)
        if ask is None:
            return
        parts = [*parts, *self.pending]
        ks = [*points, *(k for a, b in parts if b - a > 1 for k in self.targets(a, b)),
              *(k for a, b in parts for k in self.hidden(a, b)), *last]
        ask([self.commits[k] for k in dict.fromkeys(ks) if not self.measured(k)])

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
        return [k for q, c in enumerate(cuts) if known[q]
                for a, b in ((bounds[q], c), (c, bounds[q + 2])) if b - a > 1 for k in self.targets(a, b)]

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
            if self.settings.zone and moves[best] < self.settings.min_step(shape):
                continue  # with the zone, a part that moved less than a step is not chased down to a commit
            found[best][shape] = sign
        todo = [(a, b, f) for (a, b), f in zip(parts, found) if f]
        for q, (a, b, f) in enumerate(todo):
            with self.queued([(x, y) for x, y, _ in todo[q + 1:]]):
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

    # -- verifying -----------------------------------------------------------------------------
    def independent(self) -> ContextManager[None]:
        """Trials asked for inside come from one new worker lineage where the probe has one
        (`StoreProbe.independent`), also those of nested calls: fresh trials share no process
        history with the trials that found a step, so a build that reads slow in every trial of
        one lineage (not by its code) does not verify."""
        fresh = getattr(self.probe, "independent", None)
        if fresh is None or self.fresh_lineage:
            return nullcontext()
        return self._within(fresh())

    def another_lineage(self) -> ContextManager[None]:
        """As `independent`, and a new lineage also inside one: a second look at a step whose first
        fresh look (in the pass's lineage) disagreed with the search."""
        fresh = getattr(self.probe, "independent", None)
        return nullcontext() if fresh is None else self._within(fresh())

    @contextmanager
    def _within(self, lineage: ContextManager[None]) -> Iterator[None]:
        with lineage:
            before, self.fresh_lineage = self.fresh_lineage, True
            try:
                yield
            finally:
                self.fresh_lineage = before

    def verify(self, cand: _Candidate) -> tuple[Step, bool]:
        st = self.settings
        holding: set[str] = set()
        unmeasured = False  # the probe could not give the fresh trials (an offline replay): unverified
        fresh: dict[str, Comparison] | None = None  # the holding look's last comparisons
        aside: tuple[_Counts, _Counts] | None = None  # a look whose trials the final judgement leaves out
        if st.verify:
            # its first look's trials asked for ahead, or asked for now
            first, n = self.ahead.get((cand.lo, cand.hi)) or (self.counts(cand.lo, cand.hi), self.look_size(cand))
            alpha = self.alpha_verify / max(1, len(self.candidates))
            on = self.look_shapes(cand)
            holding, fresh = self.look(cand, n, alpha, on)
            if not holding and fresh is not None and st.second_look:
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
            unmeasured = fresh is None
        final = self.compare_now(cand.lo, cand.hi, self.alpha_verify, aside=aside)
        if st.verify and not unmeasured:
            # It holds in its fresh trials and over all of them: two or three fresh trials a side
            # can show a chance difference (one candidate in a hundred at alpha 1%, and a machine
            # whose speed wanders makes many candidates), which all the pair's trials then belie.
            ok = any(s in final and final[s].p_value < self.alpha_verify
                     and final[s].change_pct * cand.dirs.get(s, final[s].change_pct) > 0 for s in holding)
            # Once the step holds, which shapes it moves is judged on every trial of the pair: a
            # shape that moved less than the others may miss the minimum in four fresh trials alone,
            # and a shape whose fresh trials alone moved (-6% [-14, +2] over all) did not move. A
            # shape joins from all the trials only where the fresh ones lean its way and do not
            # rule it out: on a busy CPU a shape read +25% over all trials of a -59% step, its
            # control +121%, a disturbance of the search's trials that the fresh ones did not share.
            moved = holding | {s for s, c in final.items() if c.verdict is Verdict.DIFFERENT
                               and fresh is not None and s in fresh and fresh[s].verdict is not Verdict.SAME
                               and fresh[s].change_pct * c.change_pct > 0}
            shapes = sorted(s for s in moved if s in final and final[s].p_value < self.alpha_verify) or sorted(holding)
        else:
            shapes = sorted(cand.dirs)
            ok = True
        if not shapes:
            shapes = sorted(cand.dirs)
        between = tuple(self.commits[k] for k in range(cand.lo + 1, cand.hi + 1))
        step = Step(
            commit=between[0], parent=self.commits[cand.lo], shapes=tuple(shapes),
            change_pct={s: final[s].change_pct for s in shapes if s in final},
            ci95={s: final[s].ci95 for s in shapes if s in final}, p_value={s: final[s].p_value for s in shapes if s in final},
            levels={s: lv for s in shapes if s in final and (lv := final[s].levels) is not None},
            candidates=between if len(between) > 1 else (), verified=ok and st.verify and not unmeasured,
        )
        return step, ok

    def look_size(self, cand: _Candidate) -> int:
        """Fresh trials a side of a candidate's first look, sized to the step found: enough that it
        stands ten noise widths clear (two a side at least, so the pair's own spread floors the
        pooled noise); `look` doubles them only while the answer is unclear."""
        size = min((abs(math.log1p(c.change_pct / 100.0))
                    for c in self.compare_now(cand.lo, cand.hi, 1.0, cand.dirs).values()), default=0.0)
        return max(2, self.sized(cand.dirs, 1, lambda _, sd, k: size >= 10.0 * sd * math.sqrt(2.0 / k),
                                 self.settings.initial_repeats))

    def look_ahead(self, pairs: Sequence[tuple[int, int, int, tuple[str, ...] | None]]) -> None:
        """The first fresh look of each pair (lo, hi, n a side, on these shapes or None: every one)
        asked for in one round, side by side, before the looks are judged one by one: judged in
        turn, each look's trials set up only once the look before had ended (~2.3 s with the H200
        idle, each verification of the demo). A pair sharing a commit with one before it is left to
        its own round."""
        mine: dict[tuple[int, int], tuple[int, tuple[str, ...] | None]] = {}
        used: set[int] = set()
        for lo, hi, n, on in pairs:
            if (lo, hi) not in mine and not {lo, hi} & used and self.commits[lo] in self.meas and self.commits[hi] in self.meas:
                mine[(lo, hi)] = (n, on)
                used |= {lo, hi}
        if len(mine) < 2:
            return
        starts = {pair: self.counts(*pair) for pair in mine}
        with self.independent():
            self.measure_shaped({k: per for (lo, hi), (n, on) in mine.items()
                                 for k, per in self.fresh_wants(lo, hi, n, self.unshared(lo, hi), on).items()})
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
            if not self.settings.verify_on_open or getattr(self.probe, "shaped", None) is None:
                self.looked_on[pair] = None
            else:
                same = self.shown_same(*pair) - set(cand.dirs)
                self.looked_on[pair] = tuple(sorted({*self.shapes(*pair), *self.unshared(*pair)} - same))
        return self.looked_on[pair]

    def expect(self, cands: Sequence[_Candidate]) -> None:
        """Tell the probe, where it listens (`probe.expect_steps`), which one-commit steps are about
        to be verified, with their changes so far: a run that measures more of a step afterwards (its
        revert on the tip) can set that up while the verification's trials hold the device."""
        tell = getattr(self.probe, "expect_steps", None)
        if tell is None:
            return
        found = [(self.commits[c.hi], {s: comp.change_pct for s, comp in self.compare_now(c.lo, c.hi, 1.0, c.dirs).items()})
                 for c in cands if c.hi - c.lo == 1]
        if found:
            tell(found)

    def look(self, cand: _Candidate, n: int, alpha: float, on: Iterable[str] | None = None
             ) -> tuple[set[str], dict[str, Comparison] | None]:
        """Fresh trials of the candidate's pair, n a side (of the shapes `on`, None: every one),
        doubled while unclear: the shapes in which they show the step, and the last round's
        comparisons (None: the probe could not give fresh trials, an offline replay)."""
        st = self.settings
        while True:
            fresh = self.fresh_compare(cand.lo, cand.hi, n, also=self.unshared(cand.lo, cand.hi), only=on)
            if any(min(c.n_before, c.n_after) < n for c in fresh.values()):
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
        return {s for s, c in fresh.items()
                if holds(c, cand.dirs.get(s, math.copysign(1.0, c.change_pct)), self.settings.min_step(s), alpha)
                and (s in cand.dirs or c.verdict is Verdict.DIFFERENT)}

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
        fresh = [self.fresh_compare(a, b, n, self.alpha_verify / max(1, len(segments)), missing, detect=True)
                 for a, b in segments]
        if any(min(c.n_before, c.n_after) < n for f in fresh for c in f.values()):
            return []  # no fresh trials to be had (an offline replay): nothing to recheck with
        follow: dict[int, dict[str, float]] = {q: _different(f) for q, f in enumerate(fresh)}
        for shape, sign in missing.items():
            moves = [f[shape].change_pct * sign if shape in f else -math.inf for f in fresh]
            best = max(range(len(moves)), key=lambda q: moves[q]) if moves else None
            if best is not None and moves[best] >= st.min_step(shape) / 2.0:
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

    def fresh_samples(self, lo: int, hi: int, n: int, also: Iterable[str] = (), only: Iterable[str] | None = None
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
        return {s: (self.samples(lo, s, start[lo].get(s, 0)), self.samples(hi, s, start[hi].get(s, 0)))
                for s in self.shapes(lo, hi) if only is None or s in only}

    def fresh_compare(self, lo: int, hi: int, n: int, alpha: float | None = None, also: Iterable[str] = (),
                      only: Iterable[str] | None = None, detect: bool = False) -> dict[str, Comparison]:
        """Compare n fresh trials a side (`fresh_samples`), at a verification's level unless told."""
        return {s: self.compare_samples(s, before, after, self.alpha_verify if alpha is None else alpha, detect)
                for s, (before, after) in self.fresh_samples(lo, hi, n, also, only).items()}


def levels(n: int, k: int) -> int:
    """Rounds of a k-ary split until n commits are down to adjacent pairs: ceil(log_k n), in integers."""
    out, reach = 0, 1
    while reach < max(2, n):
        reach *= k
        out += 1
    return out


def _unclear(comps: Mapping[str, Comparison]) -> tuple[str, ...]:
    """The shapes a pair's trials have not decided yet."""
    return tuple(s for s, c in comps.items() if c.verdict is Verdict.UNKNOWN)


def _different(comps: Mapping[str, Comparison]) -> dict[str, float]:
    return {s: math.copysign(1.0, c.change_pct) for s, c in comps.items() if c.verdict is Verdict.DIFFERENT}


def localize(commits: Sequence[str], probe: Probe, settings: SearchSettings = SearchSettings()) -> DecidedResult:
    """Find every step between commits[0] (GOOD) and commits[-1] (BAD); see the module docstring."""
    st = _State(commits=list(commits), probe=probe, settings=settings)
    n = len(st.commits)
    if n < 2:
        return _result(st, [], [])
    st.prefetch_grid(0, n - 1)
    st.measure_many([0, n - 1], settings.initial_repeats)  # one round; a SKIP among them is walked past below
    lo = next((i for i in range(n) if st.measure(i, settings.initial_repeats)), None)
    hi = next((i for i in range(n - 1, -1, -1) if i != lo and st.measure(i, settings.initial_repeats)), None)
    if lo is None or hi is None or hi <= lo:
        return _result(st, [], [])
    st.anchor, st.views.anchor = lo, st.commits[lo]
    st.every_shape = st.meas[st.commits[lo]].known() | st.meas[st.commits[hi]].known()
    n_shapes = max(1, len(st.shapes(lo, hi)))
    looks = (settings.width + 1) * levels(hi - lo + 1, settings.width + 1) + 2 * settings.interior_points + 2
    st.alpha_detect = settings.alpha / (n_shapes * looks)
    st.alpha_verify = settings.alpha / n_shapes

    grid = [lo]
    targets = st.prefetch_grid(lo, hi)
    st.measure_many(targets, settings.initial_repeats)  # one round; one that does not build moves below
    for target in targets:
        if target <= grid[-1] or target >= hi:
            continue
        near = sorted(range(grid[-1] + 1, hi), key=lambda k: (abs(k - target), k))
        for k in near[:3]:  # a grid point that does not build moves a little, not far
            if st.measure(k, settings.initial_repeats):
                grid.append(k)
                break
    grid.append(hi)
    pairs = list(zip(grid, grid[1:]))
    # the bridge's gaps are known now: pending while the grid's pairs are refined, so their first
    # split points are set up ahead (the H200 demo's bridge began with a 4.2 s cold setup)
    with st.queued(list(st.bridge_gaps(grid))):
        if settings.width == 1:
            for q, (a, b) in enumerate(pairs):
                with st.queued(pairs[q + 1:]):
                    st.evaluate(a, b)
        else:  # the grid's pairs compared in rounds together, then each that moved refined
            judged = st.compare_parts(pairs)
            seen = st.views.version
            for (a, b), comps in zip(pairs, judged):
                diff = _different(comps)
                if diff:
                    st.refine(a, b, diff, seen)
    st.bridge(grid)
    while stale := st.stale_caps():
        for a, b in stale:
            st.evaluate(a, b)

    steps, dropped, holding = [], [], []
    todo = list(st.candidates)
    for attempt in range(1 + settings.rechecks):
        # one new worker lineage a pass: none of its candidates was found in it (a recheck's are
        # found in a lineage of their own, and verified in the next pass's)
        with st.independent():
            check = settings.verify and attempt < settings.rechecks  # the whole change asked below
            todo = sorted(todo, key=lambda c: c.lo)
            st.expect(todo)
            if settings.verify:
                st.look_ahead([(c.lo, c.hi, st.look_size(c), st.look_shapes(c)) for c in todo]
                              + ([(lo, hi, settings.initial_repeats, None)] if check else []))
            for cand in todo:
                step, ok = st.verify(cand)
                if ok and st.small(cand, step):
                    continue
                (steps if ok else dropped).append(step)
                if ok:
                    holding.append(cand)
            missing = st.unexplained(lo, hi, steps) if check else {}
            st.ahead.clear()  # a look asked for ahead and not taken is not fresh in the next pass
        if not missing:
            break
        todo = st.recheck(lo, hi, holding, missing)
        if not todo:
            break
    order = {sha: k for k, sha in enumerate(st.commits)}
    return _result(st, sorted(steps, key=lambda s: order[s.commit]), sorted(dropped, key=lambda s: order[s.commit]))


def _result(st: _State, steps: list[Step], dropped: list[Step]) -> DecidedResult:
    wrong = {sha: m.wrong for sha, m in st.meas.items() if m.wrong}
    decisions = Decisions(st.rejudged(merged(st.zone, ((s.parent, s.commit, s.shapes) for s in steps))),
                          tuple(st.views.findings.values()), {s: st.settings.min_step(s) for s in sorted(st.every_shape)})
    return DecidedResult(
        steps=tuple(steps), dropped=tuple(dropped), probes=tuple(st.probes), measurements=dict(st.views.raw),
        skipped=tuple(st.commits[k] for k in sorted(st.skipped)), wrong=wrong, uncertain=_merged(st.uncertain),
        processes=st.processes, decisions=decisions,
    )

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

Here only the driver (`localize`); the state it drives is search/state.py, one layer per concern
(measuring.py, comparing.py, refining.py, verifying.py), and what it asks a probe is the `Prober`
Protocol of search/prober.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from bisector.model import Probe, SearchResult, Step
from bisector.search.candidate import Candidate, levels
from bisector.search.candidate import different_dirs as _different
from bisector.search.decisions import DecidedResult, Decisions
from bisector.search.prober import Prober, as_prober
from bisector.search.result_form import merged_uncertain as _merged
from bisector.search.result_form import result_json, uncertain_json
from bisector.search.settings import SearchSettings
from bisector.search.state import State
from bisector.search.zone import merged

__all__ = ["SearchResult", "SearchSettings", "localize", "result_json", "uncertain_json"]


def localize(
    commits: Sequence[str], probe: Prober | Probe, settings: SearchSettings = SearchSettings()
) -> DecidedResult:
    """Find every step between commits[0] (GOOD) and commits[-1] (BAD); see the module docstring.
    `probe`: a whole `Prober`, or a plain `probe(sha, repeats)` (search/prober.py)."""
    st = State(commits=list(commits), probe=as_prober(probe), settings=settings)
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

    grid = _grid(st, lo, hi)
    pairs = list(zip(grid, grid[1:]))
    # the bridge's gaps are known now: pending while the grid's pairs are refined, so their first
    # split points are set up ahead (the H200 demo's bridge began with a 4.2 s cold setup)
    with st.queued(list(st.bridge_gaps(grid))):
        if settings.width == 1:
            for q, (a, b) in enumerate(pairs):
                with st.queued(pairs[q + 1 :]):
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
    steps, dropped = _verified(st, lo, hi)
    order = {sha: k for k, sha in enumerate(st.commits)}
    return _result(st, sorted(steps, key=lambda s: order[s.commit]), sorted(dropped, key=lambda s: order[s.commit]))


def _grid(st: State, lo: int, hi: int) -> list[int]:
    """The first grid over (lo, hi), its ends included: a point that does not build moves to the
    nearest of the three commits beside it that does, between the grid's last point and hi."""
    repeats = st.settings.initial_repeats
    grid = [lo]
    targets = st.prefetch_grid(lo, hi)
    st.measure_many(targets, repeats)  # one round; one that does not build moves below
    for target in targets:
        if target <= grid[-1] or target >= hi:
            continue
        near = sorted(range(grid[-1] + 1, hi), key=lambda k: (abs(k - target), k))
        for k in near[:3]:  # a grid point that does not build moves a little, not far
            if st.measure(k, repeats):
                grid.append(k)
                break
    grid.append(hi)
    return grid


def _verified(st: State, lo: int, hi: int) -> tuple[list[Step], list[Step]]:
    """The candidates verified on fresh trials: (the steps that held, those dropped). While
    `settings.rechecks` allow, a whole change the held steps do not explain is searched again."""
    settings = st.settings
    steps: list[Step] = []
    dropped: list[Step] = []
    holding: list[Candidate] = []
    todo = list(st.candidates)
    for attempt in range(1 + settings.rechecks):
        # one new worker lineage a pass: none of its candidates was found in it (a recheck's are
        # found in a lineage of their own, and verified in the next pass's)
        with st.independent():
            check = settings.verify and attempt < settings.rechecks  # the whole change asked below
            todo = sorted(todo, key=lambda c: c.lo)
            st.expect(todo)
            if settings.verify:
                st.look_ahead(
                    [(c.lo, c.hi, st.look_size(c), st.look_shapes(c)) for c in todo]
                    + ([(lo, hi, settings.initial_repeats, None)] if check else [])
                )
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
    return steps, dropped


def _result(st: State, steps: list[Step], dropped: list[Step]) -> DecidedResult:
    wrong = {sha: m.wrong for sha, m in st.meas.items() if m.wrong}
    decisions = Decisions(
        st.rejudged(merged(st.zone, ((s.parent, s.commit, s.shapes) for s in steps))),
        tuple(st.views.findings.values()),
        {s: st.settings.min_step(s) for s in sorted(st.every_shape)},
        st.latency_floors(),
    )
    return DecidedResult(
        steps=tuple(steps),
        dropped=tuple(dropped),
        probes=tuple(st.probes),
        measurements=dict(st.views.raw),
        skipped=tuple(st.commits[k] for k in sorted(st.skipped)),
        wrong=wrong,
        uncertain=_merged(st.uncertain),
        processes=st.processes,
        decisions=decisions,
    )

"""Candidate fixes: each regression's revert carried to the tip, built, and measured there side by
side with the tip as it is and the culprit's parent.

Side by side (one trial of each per round, bisector/measure/probe.py `side_by_side`), because the three
are compared with each other: measured minutes apart, a busy machine once read "45.6% still
missing" for a revert that restores fully. All reverts go in one batch with the tip measured once
per round for all of them; each revert and each parent only on its step's shapes, on the metric
the search decided on. The verdict per shape is restored, partly restored, not restored, undecided
or slower than the tip (FixResult.verdict): judged against what undoing the step's own change
should buy on the tip, so a later step's loss on the same shape is not counted against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import git

from bisector import gitrepo
from bisector.build.builder import patch_hash
from bisector.config import Config, Thresholds
from bisector.measure.probe import NOT_MEASURED, At, Item, StoreProbe, Taken, fresh, fresh_tflops, side_by_side
from bisector.model import (
    BuildStatus,
    Commit,
    Comparison,
    Measurement,
    ProbeStatus,
    SearchResult,
    Step,
    Verdict,
    base_shape,
    min_step_for,
    regression,
)
from bisector.search.decisions import raised_min_steps
from bisector.search.samples import PooledNoise, compare_pooled
from bisector.why import interactions
from bisector.why.interactions import Interaction
from bisector.why.session import Session


@dataclass(frozen=True)
class FixResult:
    """A candidate patch (the culprit's revert carried to the tip), measured on the tip side by side
    with the tip as it is and the culprit's parent (one trial of each per round)."""

    step_commit: str
    patch_path: str | None
    applied: bool
    conflict: str = ""  # why the patch did not apply, with the files
    shapes: tuple[str, ...] = ()
    baseline: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s: the culprit's parent
    tip: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s: the tip as it is
    restored: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s: the tip with the patch
    vs_parent: Mapping[str, Comparison] = field(default_factory=dict)  # patched tip against the parent (the metric)
    vs_tip: Mapping[str, Comparison] = field(default_factory=dict)  # patched tip against the tip (the metric)
    trials: int = 0  # side-by-side trials of each of the three
    correct: bool = True
    error: str = ""
    # What the revert should buy on the tip: the step's own change at its culprit (the metric, per
    # shape), the verified regressions after it on the same shape (culprit, change), and the
    # resolution (thresholds.min_step_pct) within which a gain counts as the whole of it.
    own_pct: Mapping[str, float] = field(default_factory=dict)
    later: Mapping[str, tuple[tuple[str, float], ...]] = field(default_factory=dict)
    min_step_pct: float = 0.0
    min_steps: Mapping[str, float] = field(default_factory=dict)  # a suite's or shape's own (Thresholds)

    def remaining_pct(self, shape: str) -> float | None:
        """How far the patched tip still is from the pre-step commit on the search's metric (negative: below)."""
        c = self.vs_parent.get(shape)
        return c.change_pct if c is not None else None

    def expected_pct(self, shape: str) -> float | None:
        """The gain on the tip that undoes the step's own change: +5.6% for a -5.3% step."""
        own = self.own_pct.get(shape)
        return None if own is None or own <= -100 else 100.0 * (100.0 / (100.0 + own) - 1.0)

    def verdict(self, shape: str) -> str:
        """restored | partly restored | not restored | undecided | slower than the tip | not measured.

        Decided by intervals only. Restored: back within +-min_step of the parent (decided), or its
        gain on the tip is at least the step's own give-back less min_step (the lower end of the
        interval says so): a later step's loss on the same shape is that step's, not this revert's.
        Partly: a gain above zero and below that, both decided, with the patched tip decidedly below
        the parent (the give-back is the search's reading of the step, itself a few percent off: an
        H200 demo read "partly" at +54.2% of +69.7% while the same rounds put the patched tip at
        -4.5% [-10.1, +1.5] of the parent). Not restored: no gain above the
        resolution, decided. Anything else is undecided (more trials would tell)."""
        par, tip = self.vs_parent.get(shape), self.vs_tip.get(shape)
        if par is None or tip is None:
            return "not measured"
        resolution = min_step_for(shape, self.min_step_pct, self.min_steps)
        if tip.verdict is Verdict.DIFFERENT and tip.change_pct < 0:
            return "slower than the tip"
        if par.verdict is Verdict.SAME or -resolution < par.ci95[0] <= par.ci95[1] < resolution:
            return "restored"  # back at the parent: the interval lies within the resolution
        tol = math.log1p(resolution / 100.0)
        lo, hi = (math.log1p(x / 100.0) if x > -100 else -math.inf for x in tip.ci95)
        want = self.expected_pct(shape)
        if want is None:  # the step's size unknown: the parent's interval decides alone
            p_lo, p_hi = par.ci95
            if p_hi < -resolution:
                return "partly restored" if lo > 0 else "not restored" if hi < tol else "undecided"
            return "restored" if p_lo > -resolution else "undecided"
        short = math.log1p(want / 100.0) - tol
        if lo >= short:
            return "restored"
        if hi < short and lo > 0 and par.ci95[1] < 0:  # short of the step, and decidedly below the parent
            return "partly restored"
        if hi < min(short, tol):
            return "not restored"
        return "undecided"


@dataclass(frozen=True)
class _Slice:
    """n fresh trials of one commit (under one patch) in the batch, from `start` on."""

    probe: StoreProbe
    sha: str
    start: At
    n: int

    def item(self) -> Item:
        return (self.probe, self.sha, self.start + self.n)

    def samples(self, m: Measurement) -> dict[str, tuple[float, ...]]:
        return fresh(m, self.start, self.n)

    def tflops(self) -> dict[str, float]:
        return fresh_tflops(self.probe, self.sha, self.start, self.n)


def _fixable(result: SearchResult) -> list[Step]:
    """The steps whose revert is tried: verified regressions with one culprit."""
    return [s for s in result.steps if s.is_regression and not s.candidates]


def side_trials(config: Config) -> int:
    """Fresh trials of each side of a side-by-side check (a revert, an interaction): two at least,
    a spread to compare against."""
    return max(2, config.protocol.trials)


def expected_trials(result: SearchResult, config: Config) -> int:
    """Trial processes verify_fixes takes at first when every revert applies: n each of the tip, of
    every revert, of each distinct parent and of each interacting group's combinations of two or
    more reverts (for the progress display's estimate)."""
    steps = _fixable(result)
    if not steps:
        return 0
    combos = sum(interactions.multi_combos(g) for g, _, _ in interactions.groups(result.steps))
    return side_trials(config) * (1 + len(steps) + len({s.parent for s in steps}) + combos)


def revert_probe(session: Session, patch: str, shapes: Sequence[str]) -> StoreProbe:
    """The probe a revert is measured through: its patch, on its step's shapes (in config order)."""
    # a latency step: its shape
    keep = tuple(s for s in session.config.shapes if s.key in {base_shape(k) for k in shapes})
    return session.probe(patch=patch, patch_hash=patch_hash(patch), shapes=keep, max_crashes=1)


def set_up_reverts(session: Session, tip: str, found: Sequence[tuple[str, Mapping[str, float]]]) -> None:
    """The reverts of the regressions the search is about to verify (commit -> change per shape so
    far), set up on the tip while it verifies them: built, compiled cold and each one's first trial
    held by the warmer (bisector/measure/warmer.py), so the fixes stage takes the device at once.
    Before, that stage began with a patched build's cold setup, 1.8 s with the H200 idle on the
    389-commit range (studies/results/h200-long-range.txt). A guess: a step the verification drops,
    or whose shapes it changes, leaves its standby unused, and the warmer cancels it."""
    if session.warmer is None or session.offline:
        return
    wants = []
    for commit, change in found:
        if not regression(change):  # an improvement: no revert is tried (`_fixable`)
            continue
        try:
            patch = gitrepo.revert_patch(session.repo, commit)
        except git.GitCommandError:
            continue  # the fixes stage says why
        wants += revert_probe(session, patch, tuple(change)).wants([tip])
    if wants:
        session.warmer.prefetch(wants)


@dataclass(frozen=True)
class OnTheTip:
    """What the fixes stage measured on the tip: each revert's check (and its patch file) and how
    the reverts of steps on shared shapes combine."""

    fixes: tuple[FixResult, ...] = ()
    patches: Mapping[str, Path] = field(default_factory=dict)
    interactions: tuple[Interaction, ...] = ()


def verify_fixes(
    session: Session,
    result: SearchResult,
    commits: Sequence[Commit],
    out: Path,
    taken: Taken,
    noise: Mapping[str, PooledNoise | None] | None = None,
) -> OnTheTip:
    """A FixResult (and the patch file) for every verified regression with one culprit, and an
    Interaction for every group of them on shared shapes. `noise`: the search's trial noise per
    shape (samples.run_noise), which decides with fewer trials than each side's own spread (Welch
    on 2 a side has a t of 4.3); that spread is the floor (compare_pooled).

    One batch of rounds: the tip, each parent, each revert and each group's combinations of two
    or more reverts, one trial of each per round. A group takes the tip and its single reverts
    from the same rounds instead of measuring them again."""
    steps = _fixable(result)
    if not steps:
        return OnTheTip()
    out.mkdir(parents=True, exist_ok=True)
    config, tip = session.config, commits[-1].sha
    n = side_trials(config)
    patches, failed, reverts, parents, texts = _revert_sides(session, steps, out, tip, n, taken)
    plans, combos = _groups(session, result, tip, texts, n, taken)
    measured = [s for s in steps if s.commit in reverts]
    now = _tip_slice(session, measured, plans, tip, n, taken) if measured or any(combos) else None
    cap = max(n, config.protocol.max_trials)
    pools = dict(noise or {})
    results: dict[str, FixResult] = {}
    judged: dict[int, Interaction] = {}  # a group's verdict from its last round
    # a latency shape judged at the step its search tested it at (search/latency_floor.py), not finer
    th = replace(config.thresholds, min_steps={**config.thresholds.min_steps, **raised_min_steps(result)})
    # A revert measured on for its group is judged again on the same trials as the group (its parent
    # measured on beside it): its check and its line in the group's table read the same trials.
    # Judged on fewer, they disagreed in one report (#131: "+3.3%, restored" against "-0.1% alone").
    live, open_groups = measured, [i for i, c in enumerate(combos) if c]
    while (live or open_groups) and now is not None:
        got = _measure(_round_slices(now, parents, reverts, combos, live, open_groups))
        for step in live:
            results[step.commit] = _result(
                th, step, str(patches[step.commit]), now, parents[step.parent], reverts[step.commit], got, pools
            )
        for i in open_groups:
            judged[i] = _interaction(
                plans[i], n, _group_slices(plans[i], now, reverts, combos[i]), failed, got, th, pools
            )
        open_groups = [i for i in open_groups if any(p.verdict == "unclear" for p in judged[i].pairs)]
        grouped = {s.commit for i in open_groups for s in plans[i].steps}
        live = [s for s in live if s.commit in grouped or undecided(results[s.commit], th.min_step_pct, th.min_steps)]
        if not (live or open_groups) or n >= cap:
            break
        more = min(n, cap - n)
        now = _grow(now, parents, reverts, combos, live, open_groups, more, taken)
        n += more
    groups = [
        judged.get(i) or _unjudged(plan, now, reverts, failed, side_trials(config), th, pools)
        for i, plan in enumerate(plans)
    ]
    return OnTheTip(_fix_results(steps, patches, failed, results, result.steps, commits), patches, tuple(groups))


def _groups(
    session: Session, result: SearchResult, tip: str, texts: Mapping[str, str], n: int, taken: Taken
) -> tuple[list[interactions.Plan], list[dict[interactions.Combo, _Slice]]]:
    """Each group of steps on shared shapes set up on the tip, and its combined reverts' first n trials."""
    plans = [
        interactions.set_up(session, g, keys, note, tip, texts) for g, keys, note in interactions.groups(result.steps)
    ]
    return plans, [{c: _Slice(p, tip, taken.take(p, tip, n), n) for c, p in plan.probes.items()} for plan in plans]


def _round_slices(
    now: _Slice,
    parents: Mapping[str, _Slice],
    reverts: Mapping[str, _Slice],
    combos: Sequence[Mapping[interactions.Combo, _Slice]],
    live: Sequence[Step],
    open_groups: Sequence[int],
) -> list[_Slice]:
    """What a round measures: the tip, the parent and revert of each step still undecided, and the
    combinations of each group still unclear."""
    return [
        now,
        *{s.parent: parents[s.parent] for s in live}.values(),
        *(reverts[s.commit] for s in live),
        *(sl for i in open_groups for sl in combos[i].values()),
    ]


def _revert_sides(
    session: Session,
    steps: Sequence[Step],
    out: Path,
    tip: str,
    n: int,
    taken: Taken,
) -> tuple[dict[str, Path], dict[str, str], dict[str, _Slice], dict[str, _Slice], dict[str, str]]:
    """Each step's revert written to its patch file and built on the tip, its first n trials taken,
    and its parent's: (patch files, why a revert failed, reverts, parents, patch texts), by commit."""
    patches: dict[str, Path] = {}
    failed: dict[str, str] = {}
    reverts: dict[str, _Slice] = {}
    parents: dict[str, _Slice] = {}
    texts: dict[str, str] = {}
    for step in steps:
        path = out / f"revert-{step.commit[:7]}.patch"
        patch = texts[step.commit] = gitrepo.revert_patch(session.repo, step.commit)
        path.write_text(patch)
        patches[step.commit] = path
        patched = revert_probe(session, patch, step.shapes)
        build = patched.build(tip)
        if build.status is BuildStatus.FAILED and build.log_tail == NOT_MEASURED:
            failed[step.commit] = NOT_MEASURED  # an offline replay of a run that ended before the reverts
            continue
        if build.status is BuildStatus.FAILED:
            lines = build.log_tail.strip().splitlines()
            failed[step.commit] = lines[-1] if lines else "patch failed"
            continue
        reverts[step.commit] = _Slice(patched, tip, taken.take(patched, tip, n), n)
        if step.parent not in parents:
            base = session.probe(shapes=patched.shapes)
            parents[step.parent] = _Slice(base, step.parent, taken.take(base, step.parent, n), n)
    return patches, failed, reverts, parents, texts


def _tip_slice(
    session: Session, measured: Sequence[Step], plans: Sequence[interactions.Plan], tip: str, n: int, taken: Taken
) -> _Slice:
    """The tip's first n trials, on every shape a measured revert or a group's combination moves."""
    keys = {k for s in measured for k in s.shapes} | {k for plan in plans for k in plan.shapes}
    base = session.probe(shapes=tuple(s for s in session.config.shapes if s.key in {base_shape(k) for k in keys}))
    return _Slice(base, tip, taken.take(base, tip, n), n)


def _grow(
    now: _Slice,
    parents: dict[str, _Slice],
    reverts: dict[str, _Slice],
    combos: list[dict[interactions.Combo, _Slice]],
    live: Sequence[Step],
    open_groups: Sequence[int],
    more: int,
    taken: Taken,
) -> _Slice:
    """The next rounds, sized to the effect as the search and its verification are: while a revert's
    place against the parent is open on a shape, it, its parent and the tip get as many trials
    again, side by side, up to max_trials (on a busy machine one outlier among 4 trials once read
    "26% still missing"); while a group's pair is unclear, its combinations and single reverts do.
    Each revert and each group is judged on the rounds it was measured in: the first n trials of
    the tip and of every other build it is compared with. The tip's slice grown; the others in place."""
    grown = _more(now, more, taken)
    parents.update({sha: _more(parents[sha], more, taken) for sha in {s.parent for s in live}})
    reverts.update({s.commit: _more(reverts[s.commit], more, taken) for s in live})
    for i in open_groups:
        combos[i] = {c: _more(sl, more, taken) for c, sl in combos[i].items()}
    return grown


def _fix_results(
    steps: Sequence[Step],
    patches: Mapping[str, Path],
    failed: Mapping[str, str],
    results: Mapping[str, FixResult],
    found: Sequence[Step],
    commits: Sequence[Commit],
) -> tuple[FixResult, ...]:
    """Each step's FixResult: its revert's check, or why the revert was not measured."""
    fixes = []
    for step in steps:
        path = str(patches[step.commit])
        if failed.get(step.commit) == NOT_MEASURED:
            fixes.append(FixResult(step.commit, path, True, shapes=step.shapes, error=NOT_MEASURED))
        elif step.commit in failed:
            fixes.append(FixResult(step.commit, path, applied=False, conflict=failed[step.commit], shapes=step.shapes))
        else:
            fixes.append(replace(results[step.commit], later=later_steps(step, found, [c.sha for c in commits])))
    return tuple(fixes)


def _group_slices(
    plan: interactions.Plan, now: _Slice, reverts: Mapping[str, _Slice], combos: Mapping[interactions.Combo, _Slice]
) -> dict[interactions.Combo, _Slice]:
    """A group's builds: the tip and its single reverts (the stage's own), and its combinations."""
    singles: dict[interactions.Combo, _Slice] = {
        (s.commit,): reverts[s.commit] for s in plan.steps if s.commit in reverts
    }
    return {(): now, **singles, **combos}


def _interaction(
    plan: interactions.Plan,
    n: int,
    slices: Mapping[interactions.Combo, _Slice],
    failed: Mapping[str, str],
    got: Mapping[tuple[str | None, str], Measurement],
    th: Thresholds,
    pools: Mapping[str, PooledNoise | None],
) -> Interaction:
    """A group judged on the first n trials of each of its builds (from the same rounds)."""
    samples: dict[interactions.Combo, dict[str, tuple[float, ...]]] = {}
    tflops: dict[interactions.Combo, dict[str, float]] = {}
    errors: dict[interactions.Combo, str] = dict(plan.errors)
    errors.update({(s.commit,): failed[s.commit] for s in plan.steps if s.commit in failed})
    for combo, sl in slices.items():
        sl = replace(sl, n=n)
        mine, why = interactions.samples_of(got[(sl.probe.patch_hash, sl.sha)], sl.start, n, plan.shapes)
        if why:
            errors[combo] = why
        else:
            samples[combo], tflops[combo] = mine, sl.tflops()
    return interactions.result(plan, samples, tflops, errors, n, th, pools)


def _unjudged(
    plan: interactions.Plan,
    now: _Slice | None,
    reverts: Mapping[str, _Slice],
    failed: Mapping[str, str],
    n: int,
    th: Thresholds,
    pools: Mapping[str, PooledNoise | None],
) -> Interaction:
    """A group none of whose combinations built: its tip and single reverts as the first round
    measured them (nothing to judge a pair on), or nothing measured at all."""
    if now is None:
        return _interaction(plan, 0, {}, failed, {}, th, pools)
    slices = _group_slices(plan, now, reverts, {})
    return _interaction(plan, n, slices, failed, _measure(list(slices.values())), th, pools)


def _measure(slices: Sequence[_Slice]) -> dict[tuple[str | None, str], Measurement]:
    """Every slice's trials, the missing ones measured side by side; by (patch hash, commit)."""
    return {(sl.probe.patch_hash, sl.sha): m for sl, m in zip(slices, side_by_side([sl.item() for sl in slices]))}


def _more(sl: _Slice, more: int, taken: Taken) -> _Slice:
    """The slice with `more` trials after its n."""
    taken.extend(sl.probe, sl.sha, sl.start, sl.n, more)
    return replace(sl, n=sl.n + more)


def undecided(fix: FixResult, min_step_pct: float, min_steps: Mapping[str, float] | None = None) -> bool:
    """Whether a shape's verdict is still open (FixResult.verdict: its intervals decide nothing yet)."""
    fix = replace(fix, min_step_pct=min_step_pct, min_steps=dict(min_steps or {}))
    return any(fix.verdict(s) == "undecided" for s in fix.vs_parent)


def later_steps(step: Step, steps: Sequence[Step], order: Sequence[str]) -> dict[str, tuple[tuple[str, float], ...]]:
    """Per shape of `step`, the verified regressions after it on that shape: (culprit, change)."""
    index = {sha: i for i, sha in enumerate(order)}
    at = index.get(step.commit, -1)
    return {
        k: tuple(
            (s.commit, s.change_pct[k])
            for s in steps
            if s.is_regression and not s.candidates and k in s.shapes and index.get(s.commit, -1) > at
        )
        for k in step.shapes
    }


def _result(
    th: Thresholds,
    step: Step,
    path: str,
    now: _Slice,
    parent: _Slice,
    revert: _Slice,
    got: Mapping[tuple[str | None, str], Measurement],
    pools: Mapping[str, PooledNoise | None],
) -> FixResult:
    """One revert's check from the same rounds of the tip, the parent and the patched tip."""
    fix_m = got[(revert.probe.patch_hash, revert.sha)]
    if fix_m.status is not ProbeStatus.OK or not fix_m.samples:
        return FixResult(
            step.commit,
            path,
            True,
            shapes=step.shapes,
            error=(fix_m.reason or "the patched tip gave no usable trial")[-200:],
        )
    par = parent.samples(got[(parent.probe.patch_hash, parent.sha)])
    tip, mine = now.samples(got[(now.probe.patch_hash, now.sha)]), revert.samples(fix_m)
    alpha = th.alpha / max(1, len(step.shapes))
    both = [s for s in step.shapes if s in mine and s in par and s in tip]
    tip_tflops = now.tflops()
    return FixResult(
        step.commit,
        path,
        True,
        shapes=step.shapes,
        baseline=parent.tflops(),
        tip={s: v for s, v in tip_tflops.items() if s in step.shapes},
        restored=revert.tflops(),
        vs_parent={s: compare_pooled(par[s], mine[s], th.min_step(s), alpha, s, pools.get(s)) for s in both},
        vs_tip={s: compare_pooled(tip[s], mine[s], th.min_step(s), alpha, s, pools.get(s)) for s in both},
        trials=revert.n,
        correct=not (fix_m.wrong & set(step.shapes)),
        own_pct=dict(step.change_pct),
        min_step_pct=th.min_step_pct,
        min_steps=dict(th.min_steps),
    )

"""Down from the culprit commit to its hunk: patched builds of the parent, measured like any commit.

Each round of the search (bisector/why/hunks.py) asks about several subsets of the culprit's hunks at
once: each is applied to the parent and built (cached by patch hash), and all are measured side
by side with the parent itself, one trial of each per round, on the step's shapes only. The
parent's drift is then measured once per round, not once per subset, and the culprit's side of
the comparison is the step as verification measured it (parent and culprit side by side).

Hunks that must travel together (a changed signature and the hunks that use its new names,
bisector/why/hunk_groups.py) are grouped first, and the search splits groups, never a group. When that
would tie most hunks into one group, the pieces that only thread a new name through are applied as
a base and the search runs over the behaviour-changing statements on top of it
(bisector/why/hunk_plumbing.py), after checking that the base alone does not carry the step.

A subset carries the step when, over the step's shapes, it sits nearer the culprit than the parent:
the median over shapes of log(subset / parent) / log(culprit / parent) is at least one half. The
median keeps one noisy shape of the step (a false one, or the noisiest) from deciding alone. A
subset that does not build, does not run (it fails once: one trial, never again) or gives wrong
results is unresolved: it neither carries the step nor clears it (delta debugging's '?'), and the
report says why. The search stops at `build.max_hunk_builds` patched builds or
`build.max_hunk_trials` trials, whichever comes first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bisector import gitrepo
from bisector.build.builder import patch_hash
from bisector.measure.probe import NOT_MEASURED, At, StoreProbe, Taken, fresh, side_by_side
from bisector.measure.warmer import Want
from bisector.model import Measurement, ProbeStatus, Step, base_shape
from bisector.search.samples import PooledNoise, compare_pooled
from bisector.why import hunk_checks, hunk_groups, hunk_plumbing, hunks, loaded
from bisector.why.hunk_groups import HunkGroup
from bisector.why.session import Session

#: where between the parent (0) and the culprit (1) a subset must sit to carry the step
CARRIED_FRACTION = 0.5
#: rounds of trials a subset may get while its place stays unclear
MAX_ROUNDS = 4


@dataclass(frozen=True)
class HunkTry:
    """The parent with some of the culprit's hunks applied, measured against the parent."""

    hunks: tuple[str, ...]  # labels: path and hunk header
    carries: bool | None  # sat nearer the culprit than the parent (median over the step's shapes); None: unresolved
    change_pct: Mapping[str, float] = field(default_factory=dict)  # per step shape; empty if it did not run
    error: str = ""
    trials: int = 0  # trials of the subset (the parent had as many, side by side)
    settled: bool = True  # False: still unclear after MAX_ROUNDS rounds, placed by its point estimate
    look: int = 1  # 2, 3: the same subset measured again on fresh trials (hunks.search's look_again)


@dataclass(frozen=True)
class HunkFinding:
    """Which of a culprit's hunks carry its step, found by measuring patched builds of its parent."""

    step_commit: str
    n_hunks: int
    hunks: tuple[str, ...]  # labels of the hunks found
    alone: bool  # one hunk carries it; False: `hunks` carry it only together
    tries: tuple[HunkTry, ...]
    patch_path: str | None = None  # the found hunks as a patch on the parent
    diff: str = ""  # the same patch's text
    complete: bool = True  # False: stopped at a budget; the step is within `hunks`
    stopped_at: str = ""  # the budget that stopped it: "builds" (build.max_hunk_builds) or "trials"
    groups: tuple[HunkGroup, ...] = ()  # hunks searched as one, and why (bisector/why/hunk_groups.py)
    unresolved: int = 0  # subsets that did not build, import, run or give right results
    shown_minimal: bool = True  # removing any one of `hunks` was measured and lost the step
    one_group: bool = False  # `hunks` are one group, searched as one (never apart)
    # Through plumbing (bisector/why/hunk_plumbing.py): the pieces that only thread a new name through,
    # applied to the parent as a base; `hunks` are then pieces (statements) of the other hunks.
    plumbing: tuple[str, ...] = ()  # labels of the hunks that are all plumbing
    n_plumbing: int = 0  # hunks that are all plumbing
    n_behaviour: int = 0  # hunks with a behaviour-changing piece
    n_pieces: int = 0  # behaviour-changing pieces searched
    found_hunks: int = 0  # hunks the found pieces lie in
    pieces_in_found: int = 0  # behaviour-changing pieces of those hunks
    base_carries: bool = False  # the plumbing base alone carried the step
    base_patch_path: str | None = None
    # Set aside before the search (bisector/why/loaded.py): files no trial of the culprit or its parent loaded.
    aside: tuple[str, ...] = ()
    n_aside: int = 0  # hunks in them
    unsplit: tuple[str, ...] = ()  # hunks searched whole: their statements do not parse apart
    cannot_split: str = ""  # why the threading could not be applied as a base (nothing was searched)
    base_failed: str = ""  # why the threading base did not run; whole hunks were searched instead

    @property
    def rest(self) -> str:
        """What the rest of the commit is, beside the lines that carry the step: "threading: 11 hunks,
        applied as base; not loaded by any trial: tests/test_x.py (2 hunks)"."""
        parts = (
            [f"threading: {self.n_plumbing} hunk{'s' * (self.n_plumbing != 1)}, applied as base"]
            if self.n_behaviour and not self.cannot_split
            else []
        )
        if self.aside:
            parts.append(
                f"not loaded by any trial: {', '.join(self.aside)} ({self.n_aside} "
                f"hunk{'s' * (self.n_aside != 1)} set aside)"
            )
        parts += [f"cannot split {u}" for u in self.unsplit]
        return "; ".join(parts)

    @property
    def unsettled(self) -> tuple[tuple[str, ...], ...]:
        """The subsets still unclear at the round cap, placed by their point estimate: the finding
        rests on them, so it is a likely answer, not a measured one."""
        return tuple(t.hunks for t in self.tries if not t.settled)

    def _unclear(self) -> str:
        n = len(self.unsettled)
        return (
            (
                f"; {n} subset{'s' * (n != 1)} stayed unclear after {MAX_ROUNDS} rounds and "
                f"{'were' if n != 1 else 'was'} placed by {'their' if n != 1 else 'its'} point estimate"
            )
            if n
            else ""
        )

    def _through_plumbing(self) -> str:
        base = f"on top of {self.n_plumbing} plumbing hunk{'s' * (self.n_plumbing != 1)} applied as a base"
        if self.base_carries:
            return (
                f"the plumbing base alone ({self.n_plumbing} hunks and the plumbing lines of others) carries "
                f"the step: it is in what threads the new name through, not in the {self.n_behaviour} "
                f"behaviour-changing hunks"
            )
        if not self.complete:
            return (
                f"the step is within {len(self.hunks)} of the {self.n_pieces} behaviour-changing statements "
                f"of {self.n_behaviour} hunks, {base} (the search stopped early: {self.stopped_at})"
            )
        # one hunk holds what was found: that hunk carries the step alone, whatever its statements do
        how = "alone" if self.alone or self.found_hunks == 1 else "only together" if self.shown_minimal else "together"
        verb = "carries" if self.found_hunks == 1 else "carry"
        text = f"{self.found_hunks} of {self.n_behaviour} behaviour-changing hunks {verb} the step {how}, {base}"
        if self.pieces_in_found > len(self.hunks) or (self.found_hunks == 1 and len(self.hunks) > 1):
            together = "" if len(self.hunks) < 2 else " only together" if self.shown_minimal else " together"
            text += (
                f"; within {'it' if self.found_hunks == 1 else 'them'}, {len(self.hunks)} of "
                f"{self.pieces_in_found} statements{together}"
            )
        return text

    @property
    def finding(self) -> str:
        """What the search found, as the summary opens: without the unclear subsets, the fallback to
        whole hunks and what was set aside (the report gives each its own line)."""
        return self._summary()

    @property
    def summary(self) -> str:
        aside = f"; not loaded by any trial: {', '.join(self.aside)}" if self.aside else ""
        unsplit = "".join(f"; cannot split {u}" for u in self.unsplit)
        fallback = f"; the threading base {self.base_failed}; searched whole hunks instead" if self.base_failed else ""
        return self._summary() + self._unclear() + fallback + aside + unsplit

    def _summary(self) -> str:
        if self.cannot_split:
            return f"cannot split the {self.n_hunks - self.n_aside} hunks: {self.cannot_split}"
        if self.n_behaviour:
            return self._through_plumbing()
        if not self.complete and self.stopped_at == "offline":
            return (
                f"the step is within {len(self.hunks)} of {self.n_hunks} hunks (the run ended after "
                f"{len(self.tries)} subsets were measured; replayed offline)"
            )
        if not self.complete:
            budget = (
                "trials, `build.max_hunk_trials`"
                if self.stopped_at == "trials"
                else "patched builds, `build.max_hunk_builds`"
            )
            return (
                f"the step is within {len(self.hunks)} of {self.n_hunks} hunks (the search stopped after "
                f"{len(self.tries)} subsets: its budget of {budget}, was spent)"
            )
        how = (
            "alone"
            if self.alone
            else "together, as one group of hunks that must travel together"
            if self.one_group
            else "only together (without any one of them it is gone)"
            if self.shown_minimal
            else "together (a smaller set was unresolved: it did not build, run or give right results)"
        )
        return f"{len(self.hunks)} of {self.n_hunks} hunks carry the step {how}"


def _searched(steps: Sequence[Step]) -> list[Step]:
    return [s for s in steps if s.verified and not s.candidates]


def expected_trials(session: Session, steps: Sequence[Step]) -> int:
    """Trial processes the hunk searches take at first, for the progress display: per culprit, the
    levels `find_hunks` measures, each two subsets and the parent n times: ceil(log2 g) over its g
    groups of hunks (one group: nothing to search), or through plumbing the base alone against the
    parent first, then ceil(log2 p) over its p pieces; within the trial budget. A subset still
    unclear gets more rounds (MAX_ROUNDS), which the progress line's forecast adds
    (bisector/estimate/later_stages.py)."""
    n, budget = max(1, session.config.protocol.trials), session.config.build.max_hunk_trials

    def levels(count: int) -> int:
        return math.ceil(math.log2(count)) if count >= 2 else 0

    total = 0
    for step in _searched(steps):
        planned = _planned(session, step, trace=False)  # an estimate: unloaded files counted in
        if planned is None:
            continue
        groups, plumbed = planned.groups, planned.plumbed
        first = 2 * n + 3 * n * levels(len(plumbed.pieces)) if plumbed else 3 * n * levels(len(groups))
        total += min(budget, first)
    return total


@dataclass(frozen=True)
class Planned:
    """A culprit's hunks to search (those of files its trials loaded), their groups, its plumbing
    plan, the parent's and the culprit's files, and what was set aside."""

    parts: tuple[hunks.Hunk, ...]
    groups: tuple[HunkGroup, ...]
    plumbed: hunk_plumbing.Plan | None
    old: hunk_plumbing.Source
    new: hunk_plumbing.Source
    aside: loaded.Aside
    n_hunks: int  # the commit's hunks, those set aside included


def _planned(session: Session, step: Step, trace: bool = True) -> Planned | None:
    """What the search of one culprit works on (None: fewer than two hunks: nothing to search);
    `trace`: set aside the files no trial loaded."""
    every = hunks.split(gitrepo.commit_diff(session.repo, step.commit))
    if len(every) < 2:
        return None
    files = None
    if trace:
        probe = session.probe()
        files = loaded.loaded_files(probe.stored(step.parent), probe.stored(step.commit))
    aside = loaded.set_aside(every, files)
    parts = tuple(every[i] for i in aside.kept)
    old = lambda p: gitrepo.file_at(session.repo, step.parent, p)  # noqa: E731
    new = lambda p: gitrepo.file_at(session.repo, step.commit, p)  # noqa: E731
    groups = hunk_groups.group(parts, old, new)
    plumbed = hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)
    return Planned(parts, groups, plumbed, old, new, aside, len(every))


def find_hunks(
    session: Session,
    steps: Sequence[Step],
    taken: Taken,
    out: Path,
    noise: Mapping[str, PooledNoise | None] | None = None,
) -> tuple[HunkFinding, ...]:
    """A finding for every verified step whose commit has two hunks or more. `noise`: the search's
    pooled trial noise per shape (samples.run_noise), which places a subset on fewer trials than
    its own spread does."""
    searched = [(step, planned) for step in _searched(steps) if (planned := _planned(session, step)) is not None]
    ahead = [] if session.warmer is None or session.offline else [_first_wants(session, taken, *s) for s in searched]
    findings = []
    for i, (step, planned) in enumerate(searched):
        # This culprit's first subsets and the next one's, set up on the parent ahead (built, compiled
        # cold, first trial held by the warmer, bisector/measure/warmer.py): each search began with cold
        # setups of new patched builds while the device waited (on an H200 demo, a third of the hunk
        # stage's time: studies/results/h200-demo-device-time.txt). One request
        # names both, since the warmer drops what a request no longer names.
        if wants := [w for later in ahead[i : i + 2] for w in later]:
            assert session.warmer is not None  # `ahead` is empty without one
            session.warmer.prefetch(wants)
        finding: HunkFinding | None
        if planned.plumbed is not None:
            finding = _plumbed(session, step, planned, taken, out, noise)
        else:
            finding = _one(
                session, step, planned.parts, planned.groups, taken, out, noise, confirm=bool(planned.aside.hunks)
            )
        if finding is None:  # what the trials loaded does not carry the step alone: every hunk searched
            planned = _planned(session, step, trace=False)
            assert planned is not None
            finding = (
                _plumbed(session, step, planned, taken, out, noise)
                if planned.plumbed
                else _one(session, step, planned.parts, planned.groups, taken, out, noise)
            )
            assert finding is not None
        findings.append(
            replace(finding, n_hunks=planned.n_hunks, aside=planned.aside.files, n_aside=planned.aside.hunks)
        )
    return tuple(findings)


def _first_wants(session: Session, taken: Taken, step: Step, planned: Planned) -> list[Want]:
    """The warmer's requests for the subsets a culprit's search measures first, on its parent: the
    plumbing base alone and the first halves of the pieces, or the first halves of the groups."""
    parts, groups, plumbed, old = planned.parts, planned.groups, planned.plumbed, planned.old
    if plumbed is not None:
        rounds = _Rounds(session, step, plumbed.parts, taken, plan=plumbed, old=old, new=planned.new)
        first = [
            s for s in [(), *hunks.chunks(range(len(plumbed.pieces)))] if not plumbed.compile_error(s, old, planned.new)
        ]
    else:
        rounds = _Rounds(session, step, parts, taken, [g.members for g in groups])
        first = hunks.chunks(range(len(groups)))
    return [w for subset in first for w in rounds.probe_of(subset).wants([step.parent])]


class _Rounds:
    """Measures rounds of subsets of groups (each a tuple of hunk indices) against the parent,
    within the trial budget."""

    def __init__(
        self,
        session: Session,
        step: Step,
        parts: Sequence[hunks.Hunk],
        taken: Taken,
        groups: Sequence[tuple[int, ...]] | None = None,
        plan: hunk_plumbing.Plan | None = None,
        old: hunk_plumbing.Source | None = None,
        noise: Mapping[str, PooledNoise | None] | None = None,
        new: hunk_plumbing.Source | None = None,
    ) -> None:
        config = session.config
        self.noise = dict(noise or {})
        self.session, self.step, self.parts, self.taken = session, step, parts, taken
        self.groups = tuple(groups) if groups is not None else tuple((i,) for i in range(len(parts)))
        self.plan, self.old, self.new = plan, old, new  # with a plan, subsets are of its pieces, on top of its base
        self.shapes = tuple(s for s in config.shapes if s.key in {base_shape(k) for k in step.shapes})
        self.base = session.probe(shapes=self.shapes)
        self.n = max(1, config.protocol.trials)
        self.trials_left = config.build.max_hunk_trials
        self.tries: list[HunkTry] = []
        self.stopped = ""  # which budget ended the search: "builds" or "trials"

    def hunks_of(self, subset: tuple[int, ...]) -> tuple[int, ...]:
        """The hunk indices of a subset of groups, in commit order (what patch_of needs)."""
        return tuple(sorted(i for g in subset for i in self.groups[g]))

    def refused(self, subset: tuple[int, ...]) -> str:
        """Why the subset is never built ("" when it may be): with a plan, its Python files would not
        compile, a call would not bind or a name read is bound nowhere (hunk_plumbing.Plan.compile_error)."""
        return self.plan.compile_error(subset, self.old, self.new) if self.plan is not None and self.old else ""

    def patch(self, subset: tuple[int, ...]) -> str:
        if self.plan is not None:
            return self.plan.patch(subset)
        return hunks.patch_of([self.parts[i] for i in self.hunks_of(subset)])

    def labels(self, subset: tuple[int, ...]) -> tuple[str, ...]:
        if self.plan is not None:
            return ("plumbing base",) * bool(self.plan.base) + tuple(self.plan.pieces[i].label for i in subset)
        return tuple(self.parts[i].label for i in self.hunks_of(subset))

    def probe_of(self, subset: tuple[int, ...]) -> StoreProbe:
        """The probe the subset is measured through: its patch on the parent, on the step's shapes."""
        patch = self.patch(subset)
        return self.session.probe(patch=patch, patch_hash=patch_hash(patch), shapes=self.shapes, max_crashes=1)

    def __call__(self, subsets: Sequence[tuple[int, ...]]) -> list[bool | None]:
        """Rounds of n trials of the parent and of every subset still unclear, side by side, until
        each subset's place between parent and culprit is clear (a subset that sits near either end
        is decided at once; one near the middle buys more trials, as an unclear pair does in the
        search), or MAX_ROUNDS or the trial budget runs out (then its point estimate decides). A
        subset that does not build, run or give right results is unresolved (None) at once."""
        probes = {}
        verdicts: dict[tuple[int, ...], bool | str | None] = {s: None for s in subsets}  # str: unresolved
        for subset in subsets:
            error = self.refused(subset)
            if error:  # skipped before it is built: unresolved, no trial spent
                verdicts[subset] = error
                continue
            probes[subset] = self.probe_of(subset)
        parent: dict[str, list[float]] = {}
        if not probes:
            return [self._skipped(s, str(verdicts[s])) for s in subsets]
        got: dict[tuple[int, ...], Measurement] = {}
        first: dict[tuple[int, ...], At] = {}  # where this look's trials of each subset begin
        for k in range(MAX_ROUNDS):
            open_ = [s for s in subsets if verdicts[s] is None]
            cost = self.n * (len(open_) + 1)
            if cost > self.trials_left:
                if k == 0:
                    self.stopped = "trials"
                    raise hunks.OutOfBudget
                break
            self.trials_left -= cost
            start = self.taken.take(self.base, self.step.parent, self.n)
            for s in open_:
                if s in first:
                    self.taken.extend(probes[s], self.step.parent, first[s], k * self.n, self.n)
                else:
                    first[s] = self.taken.take(probes[s], self.step.parent, self.n)
            measured = side_by_side(
                [(self.base, self.step.parent, start + self.n)]
                + [(probes[s], self.step.parent, first[s] + (k + 1) * self.n) for s in open_]
            )
            for shape, values in fresh(measured[0], start, self.n).items():
                parent.setdefault(shape, []).extend(values)
            if self.base.offline and any(m.reason == NOT_MEASURED for m in measured):
                self.stopped = "offline"  # the run ended before this round: say so, conclude nothing
                raise hunks.OutOfBudget
            for subset, m in zip(open_, measured[1:]):
                got[subset] = replace(m, samples=fresh(m, first[subset], (k + 1) * self.n))
                verdicts[subset] = self._place(parent, got[subset])
            if all(v is not None for v in verdicts.values()):
                break
        return [
            self._judge(s, parent, got[s], verdicts[s]) if s in got else self._skipped(s, str(verdicts[s]))
            for s in subsets
        ]

    def _skipped(self, subset: tuple[int, ...], why: str) -> bool | None:
        """None (unresolved): the try recorded with why it was not measured."""
        self.tries.append(HunkTry(self.labels(subset), None, {}, why, look=self._look(subset)))
        return None

    def _look(self, subset: tuple[int, ...]) -> int:
        """Which look at this subset the next try is: 1, or 2 and 3 when it is measured again."""
        labels = self.labels(subset)
        return 1 + sum(t.hunks == labels for t in self.tries)

    def _positions(self, parent: Mapping[str, Sequence[float]], got: Measurement) -> dict[str, tuple[float, ...]]:
        """Per shape: where the subset sits between parent (0) and culprit (1), with its 95% bounds."""
        out: dict[str, tuple[float, ...]] = {}
        for shape in self.step.shapes:
            before, after, step = parent.get(shape, ()), got.samples.get(shape, ()), self.step.change_pct.get(shape)
            if not before or not after or not step:
                continue
            c = compare_pooled(before, after, 1.0, 0.05, shape, self.noise.get(shape))
            scale = math.log1p(step / 100)
            ends = [math.log1p(x / 100) / scale if x > -100 else math.inf for x in c.ci95]
            out[shape] = (math.log1p(c.change_pct / 100) / scale, min(ends), max(ends))
        return out

    def _broken(self, parent: Mapping[str, Sequence[float]], got: Measurement) -> str:
        """Why the subset says nothing about the step ("" when it ran right on every step shape)."""
        if got.status is not ProbeStatus.OK:
            return (got.reason or "did not run").strip()[:300]  # one line (runner/error_line.py): its head
        wrong = sorted(s for s in self.step.shapes if s in got.wrong)
        if wrong:
            return f"wrong result in {', '.join(wrong)}"
        pos = self._positions(parent, got)
        missing = [s for s in self.step.shapes if s not in pos and s in parent]
        if missing:
            return "; ".join(filter(None, [f"{', '.join(missing)} did not run", got.reason]))[:300]
        return "" if pos else "no shape of the step measured on both sides"

    def _place(self, parent: Mapping[str, Sequence[float]], got: Measurement) -> bool | str | None:
        """Carries (True), does not (False), not clear yet (None), or unresolved (why, a string):
        medians over the step's shapes."""
        broken = self._broken(parent, got)
        if broken:
            return broken
        pos = self._positions(parent, got)
        low, high = (statistics.median(p[i] for p in pos.values()) for i in (1, 2))
        return True if low >= CARRIED_FRACTION else False if high < CARRIED_FRACTION else None

    def _judge(
        self,
        subset: tuple[int, ...],
        parent: Mapping[str, Sequence[float]],
        got: Measurement,
        verdict: bool | str | None,
    ) -> bool | None:
        labels = self.labels(subset)
        if isinstance(verdict, str):  # unresolved: neither carries nor clears the step
            changes = _changes(self.step, parent, got) if got.status is ProbeStatus.OK else {}
            self.tries.append(HunkTry(labels, None, changes, verdict, trials=got.count(), look=self._look(subset)))
            return None
        changes = _changes(self.step, parent, got)
        pos = self._positions(parent, got)
        settled = verdict is not None
        if verdict is None:  # still unclear at the cap: the point estimate decides, and the report says so
            verdict = statistics.median(p[0] for p in pos.values()) >= CARRIED_FRACTION
        self.tries.append(
            HunkTry(labels, verdict, changes, got.reason, trials=got.count(), settled=settled, look=self._look(subset))
        )
        return verdict


def _one(
    session: Session,
    step: Step,
    parts: Sequence[hunks.Hunk],
    groups: Sequence[HunkGroup],
    taken: Taken,
    out: Path,
    noise: Mapping[str, PooledNoise | None] | None,
    confirm: bool = False,
) -> HunkFinding | None:
    """The search over groups of hunks. `confirm`: hunks were set aside, and one group is left: it is
    measured alone, and None when it does not carry the step (the trace missed a file: search all)."""
    rounds = _Rounds(session, step, parts, taken, [g.members for g in groups], noise=noise)
    if len(groups) == 1 and confirm:  # what is left once unloaded files are set aside: measured, not assumed
        try:
            (ok,) = rounds([(0,)])
        except hunks.OutOfBudget:
            ok = None
        if ok is False:
            return None
        found = hunks.HunkSearch((0,), ok is True, (((0,), ok),), complete=ok is not None)
    else:
        found = hunks.search(len(groups), rounds, budget=session.config.build.max_hunk_builds, look_again=rounds)
    chosen = rounds.hunks_of(found.found)
    text = hunks.patch_of([parts[i] for i in chosen])
    path = out / f"hunk-{step.commit[:7]}.patch"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    stopped = "" if found.complete else (rounds.stopped or "builds")
    alone = found.alone and len(chosen) == 1
    return HunkFinding(
        step.commit,
        len(parts),
        tuple(parts[i].label for i in chosen),
        alone,
        tuple(rounds.tries),
        str(path),
        text,
        complete=found.complete,
        stopped_at=stopped,
        groups=tuple(g for g in groups if len(g.members) > 1),
        unresolved=len(found.unresolved),
        shown_minimal=found.shown_minimal,
        one_group=len(found.found) == 1 and len(chosen) > 1,
    )


def _changes(step: Step, parent: Mapping[str, Sequence[float]], got: Measurement) -> dict[str, float]:
    """Percent change of the subset's median over the parent's, per shape of the step that both ran."""
    out = {}
    for shape in step.shapes:
        before, after = parent.get(shape, ()), got.samples.get(shape, ())
        if before and after:  # not a wrong result, and a shape that runs with this subset
            out[shape] = 100.0 * (statistics.median(after) / statistics.median(before) - 1.0)
    return out


def _plumbed(
    session: Session,
    step: Step,
    planned: Planned,
    taken: Taken,
    out: Path,
    noise: Mapping[str, PooledNoise | None] | None,
) -> HunkFinding:
    """The search over the behaviour-changing pieces, each subset on top of the plumbing base. When
    the base alone cannot be built or measured the finding says so: grouping would close over the
    whole commit (threading and behaviour as one group), which answers nothing."""
    plan, old = planned.plumbed, planned.old
    assert plan is not None
    rounds = _Rounds(session, step, plan.parts, taken, plan=plan, old=old, noise=noise, new=planned.new)
    budget = session.config.build.max_hunk_builds
    plumbing = tuple(plan.parts[i].label for i in plan.plumbing_hunks)
    counts: dict[str, Any] = dict(
        n_plumbing=len(plan.plumbing_hunks),
        n_behaviour=len(plan.behaviour_hunks),
        n_pieces=len(plan.pieces),
        plumbing=plumbing,
        unsplit=plan.unsplit,
    )
    labels = tuple(h.label for h in plan.parts)

    def cannot(why: str) -> HunkFinding:
        return HunkFinding(
            step.commit,
            len(plan.parts),
            labels,
            False,
            tuple(rounds.tries),
            complete=False,
            stopped_at="base",
            cannot_split=why,
            **counts,
        )

    if plan.base_error:  # never built: the base would not compile or run
        return _whole(session, step, plan, rounds, taken, out, noise, plan.base_error)
    try:
        (base_alone,) = rounds([()])
    except hunks.OutOfBudget:
        return cannot("the trial budget was spent before the threading base alone was measured")
    if base_alone is None:
        error = next((t.error for t in rounds.tries if t.carries is None), "") or "did not run"
        return _whole(session, step, plan, rounds, taken, out, noise, f"did not build or run ({error})")
    out.mkdir(parents=True, exist_ok=True)
    base_path = out / f"hunk-{step.commit[:7]}-plumbing.patch"
    base_path.write_text(plan.patch(()))
    if base_alone:  # the step is in what threads the name through (or a new definition it calls)
        return _in_base(step, plan, rounds, base_path, counts)
    return _pieces_search(step, plan, rounds, max(1, budget - 1), out, base_path, counts)


def _in_base(
    step: Step, plan: hunk_plumbing.Plan, rounds: _Rounds, base_path: Path, counts: Mapping[str, Any]
) -> HunkFinding:
    """The finding where the plumbing base alone carries the step: its pieces are the answer."""
    labels = tuple(p.label for p in plan.base)
    return HunkFinding(
        step.commit,
        len(plan.parts),
        labels,
        len(labels) == 1,
        tuple(rounds.tries),
        str(base_path),
        base_path.read_text(),
        base_carries=True,
        base_patch_path=str(base_path),
        **counts,
    )


def _pieces_search(
    step: Step,
    plan: hunk_plumbing.Plan,
    rounds: _Rounds,
    budget: int,
    out: Path,
    base_path: Path,
    counts: Mapping[str, Any],
) -> HunkFinding:
    """The behaviour-changing pieces searched on top of the plumbing base (which alone did not
    carry the step), and the smallest set found written as its patch."""
    found = hunks.search(
        len(plan.pieces), rounds, budget=budget, look_again=rounds, free=lambda subset: bool(rounds.refused(subset))
    )
    chosen = [plan.pieces[i] for i in found.found]
    text = hunks.patch_of(hunk_plumbing.Plan(plan.parts, (), tuple(chosen)).hunks_of(range(len(chosen))))
    path = out / f"hunk-{step.commit[:7]}.patch"
    path.write_text(text)
    return HunkFinding(
        step.commit,
        len(plan.parts),
        tuple(p.label for p in chosen),
        found.alone,
        tuple(rounds.tries),
        str(path),
        text,
        complete=found.complete,
        stopped_at="" if found.complete else (rounds.stopped or "builds"),
        unresolved=len(found.unresolved),
        shown_minimal=found.shown_minimal,
        base_patch_path=str(base_path),
        found_hunks=len({p.hunk for p in chosen}),
        pieces_in_found=sum(p.hunk in {c.hunk for c in chosen} for p in plan.pieces),
        **counts,
    )


def _whole(
    session: Session,
    step: Step,
    plan: hunk_plumbing.Plan,
    spent: _Rounds,
    taken: Taken,
    out: Path,
    noise: Mapping[str, PooledNoise | None] | None,
    why: str,
) -> HunkFinding:
    """The threading base did not compile or run: delta debugging over the whole hunks instead, each
    its own unit, with the trial budget and the tries the base took. Coarser than statements, but
    an answer: a subset that misses a hunk it needs is unresolved, never a verdict, and one whose
    Python would not compile, bind or find its names is never built (on a real culprit most
    subsets of a rewritten kernel's hunks are)."""
    whole = hunk_plumbing.Plan(
        plan.parts, (), tuple(hunk_plumbing.Piece(i, None, h.label) for i, h in enumerate(plan.parts))
    )
    rounds = _Rounds(session, step, plan.parts, taken, plan=whole, old=spent.old, new=spent.new, noise=noise)
    rounds.trials_left, rounds.tries = spent.trials_left, list(spent.tries)
    budget = max(1, session.config.build.max_hunk_builds - len(spent.tries))
    found = hunks.search(
        len(plan.parts), rounds, budget=budget, look_again=rounds, free=lambda subset: bool(rounds.refused(subset))
    )
    chosen = rounds.hunks_of(found.found)
    text = hunks.patch_of([plan.parts[i] for i in chosen])
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"hunk-{step.commit[:7]}.patch"
    path.write_text(text)
    return HunkFinding(
        step.commit,
        len(plan.parts),
        tuple(plan.parts[i].label for i in chosen),
        found.alone and len(chosen) == 1,
        tuple(rounds.tries),
        str(path),
        text,
        complete=found.complete,
        stopped_at="" if found.complete else (rounds.stopped or "builds"),
        unresolved=len(found.unresolved),
        shown_minimal=found.shown_minimal,
        base_failed=" ".join(why.split())[:240],
    )

"""Down from the culprit commit to its hunk: patched builds of the parent, measured like any commit.

Each round of the search (bisector/hunks.py) asks about several subsets of the culprit's hunks at
once: each is applied to the parent and built (cached by patch hash), and all are measured side
by side with the parent itself, one trial of each per round, on the step's shapes only. The
parent's drift is then measured once per round, not once per subset, and the culprit's side of
the comparison is the step as verification measured it (parent and culprit side by side).

A subset carries the step when, over the step's shapes, it sits nearer the culprit than the parent:
the median over shapes of log(subset / parent) / log(culprit / parent) is at least one half. The
median keeps one noisy shape of the step (a false one, or the noisiest) from deciding alone. A
subset that does not build, does not run (it fails once: one trial, never again) or gives wrong
results does not carry the step, and the report says why. The search stops at
`build.max_hunk_builds` patched builds or `build.max_hunk_trials` trials, whichever comes first.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from bisector import gitrepo, hunks
from bisector.build.builder import patch_hash
from bisector.model import Measurement, ProbeStatus, Step
from bisector.probe import Taken, fresh, side_by_side
from bisector.report.data import HunkFinding, HunkTry

if TYPE_CHECKING:
    from bisector.pipeline import Session

#: where between the parent (0) and the culprit (1) a subset must sit to carry the step
CARRIED_FRACTION = 0.5


def find_hunks(session: Session, steps: Sequence[Step], taken: Taken, out: Path) -> tuple[HunkFinding, ...]:
    """A finding for every verified step whose commit has two hunks or more."""
    findings = []
    for step in steps:
        if step.candidates or not step.verified:
            continue
        parts = hunks.split(gitrepo.commit_diff(session.repo, step.commit))
        if len(parts) < 2:
            continue
        findings.append(_one(session, step, parts, taken, out))
    return tuple(findings)


class _Rounds:
    """Measures rounds of subsets against the parent, within the trial budget."""

    def __init__(self, session: Session, step: Step, parts: Sequence[hunks.Hunk], taken: Taken) -> None:
        config = session.config
        self.session, self.step, self.parts, self.taken = session, step, parts, taken
        self.shapes = tuple(s for s in config.shapes if s.key in step.shapes)
        self.base = session.probe(shapes=self.shapes)
        self.n = max(1, config.protocol.trials)
        self.trials_left = config.build.max_hunk_trials
        self.tries: list[HunkTry] = []
        self.stopped = ""  # which budget ended the search: "builds" or "trials"

    def __call__(self, subsets: Sequence[tuple[int, ...]]) -> list[bool]:
        cost = self.n * (len(subsets) + 1)
        if cost > self.trials_left:
            self.stopped = "trials"
            raise hunks.OutOfBudget
        self.trials_left -= cost
        probes = []
        for subset in subsets:
            patch = hunks.patch_of([self.parts[i] for i in subset])
            probes.append(self.session.probe(patch=patch, patch_hash=patch_hash(patch), shapes=self.shapes,
                                             max_crashes=1))
        start = self.taken.take(self.base, self.step.parent, self.n)
        got = side_by_side([(self.base, self.step.parent, start + self.n)]
                           + [(p, self.step.parent, self.n) for p in probes])
        parent = fresh(got[0], start, self.n)
        return [self._judge(subset, parent, m) for subset, m in zip(subsets, got[1:])]

    def _judge(self, subset: tuple[int, ...], parent: Mapping[str, Sequence[float]], got: Measurement) -> bool:
        labels = tuple(self.parts[i].label for i in subset)
        wrong = sorted(s for s in self.step.shapes if s in got.wrong)
        if got.status is not ProbeStatus.OK:
            self.tries.append(HunkTry(labels, False, error=(got.reason or "did not run").strip()[-200:]))
            return False
        changes = _changes(self.step, parent, got)
        position = [math.log1p(changes[s] / 100) / math.log1p(self.step.change_pct[s] / 100)
                    for s in changes if self.step.change_pct.get(s)]
        ok = (not wrong and len(changes) == len(self.step.shapes) and bool(position)
              and statistics.median(position) >= CARRIED_FRACTION)
        error = "; ".join(filter(None, [f"wrong result in {', '.join(wrong)}" if wrong else "", got.reason]))
        self.tries.append(HunkTry(labels, ok, changes, error))
        return ok


def _one(session: Session, step: Step, parts: Sequence[hunks.Hunk], taken: Taken, out: Path) -> HunkFinding:
    rounds = _Rounds(session, step, parts, taken)
    found = hunks.search(len(parts), rounds, budget=session.config.build.max_hunk_builds)
    text = hunks.patch_of([parts[i] for i in found.found])
    path = out / f"hunk-{step.commit[:7]}.patch"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    stopped = "" if found.complete else (rounds.stopped or "builds")
    return HunkFinding(step.commit, len(parts), tuple(parts[i].label for i in found.found), found.alone,
                       tuple(rounds.tries), str(path), text, complete=found.complete, stopped_at=stopped)


def _changes(step: Step, parent: Mapping[str, Sequence[float]], got: Measurement) -> dict[str, float]:
    """Percent change of the subset's median over the parent's, per shape of the step that both ran."""
    out = {}
    for shape in step.shapes:
        before, after = parent.get(shape, ()), got.samples.get(shape, ())
        if before and after:  # not a wrong result, and a shape that runs with this subset
            out[shape] = 100.0 * (statistics.median(after) / statistics.median(before) - 1.0)
    return out

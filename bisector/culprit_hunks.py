"""Down from the culprit commit to its hunk: patched builds of the parent, measured like any commit.

Each subset of the culprit's hunks is applied to its parent, built (cached by patch hash) and given
the protocol's trials, which go to the store like every other trial, so a resumed run measures
nothing twice. A subset carries the step when every shape of the step moves, against the parent's
own trials, significantly and at least half as far as the whole commit moved it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from bisector import gitrepo, hunks
from bisector.build.builder import patch_hash
from bisector.model import ProbeStatus, Step
from bisector.report.data import HunkFinding, HunkTry
from bisector.stats import compare, holds

if TYPE_CHECKING:
    from bisector.pipeline import Session

#: how much of the commit's own change a subset must reproduce to carry the step
CARRIED_FRACTION = 0.5


def find_hunks(session: Session, steps: Sequence[Step], out: Path, alpha: float) -> tuple[HunkFinding, ...]:
    """A finding for every verified step whose commit has two hunks or more."""
    findings = []
    for step in steps:
        if step.candidates or not step.verified:
            continue
        parts = hunks.split(gitrepo.commit_diff(session.repo, step.commit))
        if len(parts) < 2:
            continue
        findings.append(_one(session, step, parts, out, alpha))
    return tuple(findings)


def _one(session: Session, step: Step, parts: Sequence[hunks.Hunk], out: Path, alpha: float) -> HunkFinding:
    config = session.config
    trials = config.protocol.trials
    parent = session.probe()(step.parent, trials)
    tries: list[HunkTry] = []

    def carries(subset: tuple[int, ...]) -> bool:
        labels = tuple(parts[i].label for i in subset)
        patch = hunks.patch_of([parts[i] for i in subset])
        got = session.probe(patch=patch, patch_hash=patch_hash(patch))(step.parent, trials)
        if got.status is not ProbeStatus.OK or parent.status is not ProbeStatus.OK:
            tries.append(HunkTry(labels, False, error=(got.reason or parent.reason).strip()[-200:]))
            return False
        changes, ok = {}, True
        for shape in step.shapes:
            before, after = parent.samples.get(shape, ()), got.samples.get(shape, ())
            if not before or not after:  # a wrong result, or a shape that does not run with this subset
                ok = False
                continue
            c = compare(before, after, config.thresholds.min_step_pct, alpha, shape)
            changes[shape] = c.change_pct
            whole = step.change_pct.get(shape, 0.0)
            ok = ok and bool(whole) and c.change_pct / whole >= CARRIED_FRACTION \
                and holds(c, math.copysign(1.0, whole), config.thresholds.min_step_pct, alpha)
        wrong = sorted(s for s in step.shapes if s in got.wrong)
        error = "; ".join(filter(None, [f"wrong result in {', '.join(wrong)}" if wrong else "", got.reason]))
        tries.append(HunkTry(labels, ok, changes, error))
        return ok

    found = hunks.search(len(parts), carries, budget=config.build.max_hunk_builds)
    text = hunks.patch_of([parts[i] for i in found.found])
    path = out / f"hunk-{step.commit[:7]}.patch"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return HunkFinding(step.commit, len(parts), tuple(parts[i].label for i in found.found), found.alone,
                       tuple(tries), str(path), text, complete=found.complete)

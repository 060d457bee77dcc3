"""Down from the culprit commit to its hunk: patched builds of the parent, measured like any commit.

Each subset of the culprit's hunks is applied to its parent, built (cached by patch hash) and given
the protocol's trials, alternating with as many fresh trials of the unpatched parent: the two then
share the machine's state of the moment (on two CPU cores, groups of trials minutes apart differ by
up to ~10% with nothing changed). All trials go to the store, and which of the parent's trials
belong to which subset follows from the order of the search, so a resumed run measures nothing twice.

A subset carries the step when, over the step's shapes, it sits nearer the culprit than the parent:
the median over shapes of log(subset / parent) / log(culprit / parent) is at least one half. The
median keeps one noisy shape of the step (a false one, or the noisiest) from deciding alone.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from bisector import gitrepo, hunks
from bisector.build.builder import patch_hash
from bisector.model import Measurement, ProbeStatus, Step
from bisector.report.data import HunkFinding, HunkTry

if TYPE_CHECKING:
    from bisector.pipeline import Session

#: where between the parent (0) and the culprit (1) a subset must sit to carry the step
CARRIED_FRACTION = 0.5


def find_hunks(session: Session, steps: Sequence[Step], parent_trials: Mapping[str, int],
               out: Path) -> tuple[HunkFinding, ...]:
    """A finding for every verified step whose commit has two hunks or more. `parent_trials`: how
    many trials each parent had when the search ended (the fresh ones taken here come after)."""
    findings = []
    for step in steps:
        if step.candidates or not step.verified:
            continue
        parts = hunks.split(gitrepo.commit_diff(session.repo, step.commit))
        if len(parts) < 2:
            continue
        findings.append(_one(session, step, parts, parent_trials.get(step.parent, 0), out))
    return tuple(findings)


def _one(session: Session, step: Step, parts: Sequence[hunks.Hunk], parent_had: int, out: Path) -> HunkFinding:
    config = session.config
    n, together = config.protocol.trials, max(1, len(config.devices))
    base = session.probe()
    tries: list[HunkTry] = []

    def carries(subset: tuple[int, ...]) -> bool:
        labels = tuple(parts[i].label for i in subset)
        patch = hunks.patch_of([parts[i] for i in subset])
        patched = session.probe(patch=patch, patch_hash=patch_hash(patch))
        first = parent_had + len(tries) * n  # this subset's share of the parent's fresh trials
        parent, got = _alternate(lambda k: base(step.parent, first + k), lambda k: patched(step.parent, k),
                                 n, together)
        if got.status is not ProbeStatus.OK or parent.status is not ProbeStatus.OK:
            tries.append(HunkTry(labels, False, error=(got.reason or parent.reason).strip()[-200:]))
            return False
        changes = _changes(step, _tail(parent, first), got)
        position = [math.log1p(changes[s] / 100) / math.log1p(step.change_pct[s] / 100)
                    for s in changes if step.change_pct.get(s)]
        ok = len(changes) == len(step.shapes) and bool(position) and statistics.median(position) >= CARRIED_FRACTION
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


def _alternate(parent: Callable[[int], Measurement], subset: Callable[[int], Measurement], n: int,
               together: int) -> tuple[Measurement, Measurement]:
    """n trials of each, in rounds of one device-full, the order alternating from round to round."""
    for r, k in enumerate(range(together, n + together, together)):
        k = min(n, k)
        if r % 2:
            got = subset(k)
            base = parent(k)
        else:
            base = parent(k)
            got = subset(k)
    return base, got


def _tail(m: Measurement, start: int) -> dict[str, tuple[float, ...]]:
    return {s: v[start:] for s, v in m.samples.items()}


def _changes(step: Step, parent: Mapping[str, Sequence[float]], got: Measurement) -> dict[str, float]:
    """Percent change of the subset's median over the parent's, per shape of the step that both ran."""
    out = {}
    for shape in step.shapes:
        before, after = parent.get(shape, ()), got.samples.get(shape, ())
        if before and after:  # not a wrong result, and a shape that runs with this subset
            out[shape] = 100.0 * (statistics.median(after) / statistics.median(before) - 1.0)
    return out

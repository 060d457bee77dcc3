"""Candidate fixes: each regression's revert carried to the tip, built, and measured there side by
side with the tip as it is and the culprit's parent.

Side by side (one trial of each per round, bisector/probe.py `side_by_side`), because the three
are compared with each other: measured minutes apart, a busy machine once read "45.6% still
missing" for a revert that restores fully. Only a step's own shapes are measured, on the metric
the search decided on; the verdict per shape is restored, partly restored, not restored, or
slower than the tip (FixResult.verdict).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from bisector import gitrepo
from bisector.build.builder import patch_hash
from bisector.model import BuildStatus, Commit, ProbeStatus, SearchResult, Step
from bisector.probe import Taken, fresh, fresh_tflops, side_by_side
from bisector.report.data import FixResult
from bisector.stats import compare

if TYPE_CHECKING:
    from bisector.pipeline import Session


def verify_fixes(session: Session, result: SearchResult, commits: Sequence[Commit], out: Path,
                 taken: Taken) -> tuple[tuple[FixResult, ...], dict[str, Path]]:
    """A FixResult (and the patch file) for every verified regression with one culprit."""
    out.mkdir(parents=True, exist_ok=True)
    fixes, patches = [], {}
    for step in result.steps:
        if not step.is_regression or step.candidates:
            continue
        path = out / f"revert-{step.commit[:7]}.patch"
        patch = gitrepo.revert_patch(session.repo, step.commit)
        path.write_text(patch)
        patches[step.commit] = path
        fixes.append(_one(session, step, commits[-1].sha, patch, str(path), taken))
    return tuple(fixes), patches


def _one(session: Session, step: Step, tip: str, patch: str, path: str, taken: Taken) -> FixResult:
    config = session.config
    shapes = tuple(s for s in config.shapes if s.key in step.shapes)
    base = session.probe(shapes=shapes)
    patched = session.probe(patch=patch, patch_hash=patch_hash(patch), shapes=shapes, max_crashes=1)
    build = patched.build(tip)
    if build.status is BuildStatus.FAILED:
        lines = build.log_tail.strip().splitlines()
        return FixResult(step.commit, path, applied=False, conflict=lines[-1] if lines else "patch failed",
                         shapes=step.shapes)
    n = max(2, config.protocol.trials)  # two a side at least: a spread to compare against
    starts = [taken.take(base, step.parent, n), taken.take(base, tip, n), taken.take(patched, tip, n)]
    items = [(base, step.parent, starts[0] + n), (base, tip, starts[1] + n), (patched, tip, starts[2] + n)]
    parent_m, tip_m, fix_m = side_by_side(items)
    if fix_m.status is not ProbeStatus.OK or not fix_m.samples:
        return FixResult(step.commit, path, True, shapes=step.shapes,
                         error=(fix_m.reason or "the patched tip gave no usable trial")[-200:])
    par, now, got = (fresh(m, k, n) for m, k in zip((parent_m, tip_m, fix_m), starts))
    alpha = config.thresholds.alpha / max(1, len(step.shapes))
    cmp = lambda a, b, s: compare(a[s], b[s], config.thresholds.min_step_pct, alpha, s)  # noqa: E731
    both = [s for s in step.shapes if s in got and s in par and s in now]
    return FixResult(step.commit, path, True, shapes=step.shapes,
                     baseline=fresh_tflops(base, step.parent, starts[0], n),
                     tip=fresh_tflops(base, tip, starts[1], n),
                     restored=fresh_tflops(patched, tip, starts[2], n),
                     vs_parent={s: cmp(par, got, s) for s in both}, vs_tip={s: cmp(now, got, s) for s in both},
                     trials=n, correct=not (fix_m.wrong & set(step.shapes)))

"""Compile a commit's kernels again for the report, when neither its JIT dir nor the report holds them.

A run resumed from the store (or a report re-made after `<work>/jit` was cleaned) has the trials of
a step's parent and culprit but not what they compiled: the JIT dir of a commit lives only until
its next run empties it, and the report keeps a copy only from the run that saw it. Rather than
saying "no compiled artifacts", the report asks for one trial-like compile: the commit's build
(from the build cache where it is kept) and one trial process of it on the configured device, cold
(`first=True` empties the commit's JIT dir, so the process compiles everything it launches into
it), one shape per suite. Its measurements are dropped, never stored: the search has its figures.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

from bisector.config import Config
from bisector.model import BuildResult, BuildStatus, Shape
from bisector.runner.env import jit_dir
from bisector.runner.executor import TrialJob, TrialOutcome
from bisector.why.kernel_diff import artifacts


class _Builds(Protocol):
    def build(self, sha: str, patch: str | None = None) -> BuildResult: ...


class _Executor(Protocol):
    def submit(self, job: TrialJob) -> Future[TrialOutcome]: ...


class Session(Protocol):
    """What a recompile needs of a run (pipeline.Session is one): named here so that this stage
    never imports the pipeline that calls it."""

    config: Config
    work: Path

    @property
    def prefetcher(self) -> _Builds: ...

    @property
    def executor(self) -> _Executor: ...


__all__ = ["compile_commit", "one_per_suite", "SLOT"]

SLOT = 999_999  # the trial's slot: names its log dir apart from the search's trials (0, 1, ...)


def one_per_suite(shapes: tuple[Shape, ...]) -> tuple[Shape, ...]:
    """The first shape of every suite: each suite's kernels compile once (other shapes of the same
    suite may add variants; the first one's are the ones compared)."""
    seen: dict[str, Shape] = {}
    for s in shapes:
        seen.setdefault(s.suite, s)
    return tuple(seen.values())


def compile_commit(session: Session, sha: str) -> str:
    """Fill `<work>/jit/<sha>` with what one cold trial of the commit compiles. Returns "" when it
    holds kernels afterwards, else why not (said in the report)."""
    config = session.config
    if not config.protocol.jit_cache_env:
        return "the config keeps no JIT cache (`protocol.jit_cache_env` is empty)"
    build = session.prefetcher.build(sha)
    if build.status is not BuildStatus.OK:
        return f"the commit did not build again ({build.status.value})"
    job = TrialJob(build, one_per_suite(config.shapes), config.protocol.seed, slot=SLOT, first=True)
    try:
        outcome = session.executor.submit(job).result()
    except Exception as exc:  # noqa: BLE001 - the report says it; the run's results stand
        return f"the trial that recompiles it failed: {exc}"
    if artifacts.find_kernels(jit_dir(session.work, sha)):
        return ""
    status = ", ".join(sorted({r.status.value for r in outcome.records})) or "no result"
    return f"a trial of it ran again ({status}) and compiled no kernel in the JIT caches"

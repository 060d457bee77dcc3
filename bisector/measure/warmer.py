"""Commits the search may need next, built and compiled cold on the host's spare cores.

A new commit's first trial builds it, sets up a worker and compiles cold (Triton: seconds) before
it can take the device, and the search asks for new commits one round after another: over a
27-commit search on one H200 that was most of the time the device stood idle. The warmer does it
ahead. Given the commits the next round may need (`StoreProbe.prefetch`, which the search calls
before it measures a round), it builds each (the session's builder: thread-safe, its cache's file
locks keep two builders of one commit apart) and runs a precompile-only trial of it (benches/trial.py
`"precompile_only": true`: setup, inputs, the first calls compiled, the JIT dir emptied first so
the compile is cold; it never asks for the device), at most `parallel` at once. A new request
cancels the queued ones it no longer names. The commit's first real trial then `claim`s it: its
JIT dir is warm and not emptied again, and its records say the cold compile was the prefetch's,
with its time (`protocol.cold_compile`): the commit's first, cold compile is its own measurement.

With `standby` (the run's own executor: GPU hosts) the warmer goes one step further: instead of a
precompile-only trial it submits the commit's first real trial, held (`TrialJob.hold`): its process
forks, opens the device context, imports the commit and compiles it cold, stages its inputs, and
then waits at the gate without a place in the device's queue. When the search asks for that commit
(`take`), the trial is unheld and takes the device as soon as it is free: on one H200 that setup
was ~2 s on the path of every round (studies/results/h200-long-range.txt). One no longer named is
cancelled, its process killed: nothing of it is stored.

A spare (`spare`, with standby) is the same for a commit already measured: its next trial, held,
set up while the round that asked for its last one is measured. When the search asks for more of
that commit (a close pair doubles, a verification looks again) the spare takes the device at once;
on one H200 the device otherwise stood idle ~2.4 s at each such round, about a fifth of the
demo's measuring time. At most 2 x `parallel` spares live (as many as standbys), the oldest
dropped first: with `parallel` the spares of GOOD and BAD were gone by the time the grid's first
pairs doubled, and those doublings set up afresh (~2 s with the device idle, h200-long-range.txt).
A standby's companion is a spare made as soon as the standby is set up: the commit's second trial,
which takes the device only after the first has ended (`TrialJob.after`); made only where a spare
has room, and killed with its standby.

The warmer touches no store (the probe filters out commits already measured before asking).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from bisector.config import Config
from bisector.model import BuildResult, BuildStatus, Shape, TrialRecord
from bisector.runner.executor import Executor, Prepared, TrialFuture, TrialJob
from bisector.runner.launch import TrialFiles, default_preload, memory_limit, worker_env
from bisector.runner.workers import WorkerSource, make_source

__all__ = ["PrecompileTrials", "Want", "Warmed", "Warmer", "precompile_executor"]


class Builds(Protocol):
    def build(self, sha: str, patch: str | None = None) -> BuildResult: ...


@dataclass(frozen=True)
class Want:
    """A commit the search may measure next, as its probe would measure it."""

    sha: str
    shapes: tuple[Shape, ...]
    seed: int
    patch: str | None = None
    patch_hash: str | None = None

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.sha, self.patch_hash)


@dataclass(frozen=True)
class Warmed:
    """A commit compiled cold by a precompile-only trial: per shape what the trial said."""

    sha: str
    patch_hash: str | None
    shapes: Mapping[str, Mapping[str, Any]]  # key -> {"status", "precompile", "precompile_s", "compile_s"}
    log_path: str
    seconds: float  # the prefetch trial's wall time, build not included

    def cold_compile(self) -> dict[str, dict[str, Any]]:
        """Per precompiled shape, what the first real trial's records keep of the cold compile."""
        return {
            key: {
                "by": "prefetch",
                **{k: v for k, v in r.items() if k != "shape"},
                "log_path": self.log_path,
                "trial_wall_s": round(self.seconds, 3),
            }
            for key, r in self.shapes.items()
            if r.get("status") == "precompiled"
        }


class PrecompileTrials(Executor):
    """An executor of precompile-only trials: what each wrote is kept for `output`, and no trial
    ever gets a device section. A precompile-only trial never asks for one; one that did would wait
    for it until its time limit, never running beside a timed section."""

    def __init__(
        self,
        source: WorkerSource,
        lanes: int,
        kind: str,
        prepare: Callable[[TrialJob, int], Prepared],
        *,
        timeout_s: float,
        memory_bytes: int,
    ) -> None:
        self._outputs: dict[int, tuple[Mapping[str, Any], str]] = {}
        super().__init__(
            source,
            tuple(range(max(1, lanes))),
            kind,
            prepare,
            self._keep,
            ahead=0,
            timeout_s=timeout_s,
            memory_bytes=memory_bytes,
            lock_devices=False,
        )

    def _keep(
        self, job: TrialJob, prepared: Prepared, out: Mapping[str, Any], info: Mapping[str, Any]
    ) -> tuple[TrialRecord, ...]:
        self._outputs[id(job)] = (out, str(prepared.log_path))
        return ()

    def output(self, job: TrialJob) -> tuple[Mapping[str, Any], str]:
        """What the ended trial of `job` wrote, and its log's path (once)."""
        return self._outputs.pop(id(job), ({}, ""))

    def _grant(self, device: int) -> None:
        """Brief loans only: a precompile-only trial draws its inputs in one on a GPU, as every
        setup does (benches/trial.py `briefly`), and a lane that never lent them left each prefetch
        waiting for its loan until its time limit, compiling nothing (the GPU test of this module
        checks it). The loan is this executor's lane, not
        the run's device: it keeps prefetches' draws apart from each other, not from the run's
        timed sections (a prefetch draws beside them, as every setup did before brief loans).
        Never a device section."""
        self._grant_brief(device)


def precompile_executor(
    config: Config,
    work: str | Path,
    parallel: int,
    *,
    source: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> PrecompileTrials:
    """`parallel` precompile-only trials at once, in the config's trial environment (sandbox,
    fence, memory limit, the commit's JIT dir), each pinned to the device its real trials use
    (inputs are staged there; no kernel runs), none ever holding a device or the host's lock."""
    work = Path(work).resolve()
    base = worker_env(config, os.environ if environ is None else environ, work)
    files = TrialFiles(config, work, base)
    writable = [work / "trials", work / "jit", work / "scratch"]
    for path in writable:
        path.mkdir(parents=True, exist_ok=True)

    def prepare(job: TrialJob, lane: int) -> Prepared:
        return files.prepare(job, config.devices[lane % len(config.devices)], precompile_only=True)

    source_kind = source or config.protocol.workers
    return PrecompileTrials(
        make_source(
            source_kind,
            base,
            default_preload(config),
            work / "workers" / "prefetch",
            writable,
            gpu=config.device != "cpu",
        ),
        parallel,
        config.device,
        prepare,
        timeout_s=config.protocol.timeout_s,
        memory_bytes=memory_limit(config),
    )


def _what_runs(job: TrialJob) -> tuple[Any, ...]:
    """What a trial measures, its shapes aside: its build's code (not the build's own timing) and its inputs."""
    b = job.build
    return (b.sha, b.patch_hash, b.source_dir, b.prefix, job.seed, job.slot, job.first)


def _stands_for(held: TrialJob, job: TrialJob) -> bool:
    """Whether `held`'s shapes serve `job`: the same ones, or some of them, which alone it then times.
    A later trial: a pair doubled on the shapes it left unclear while the spare was set up for all
    (most of the trials an H200 demo submitted afresh once the last had ended, each a device
    wait). A first trial: a split point timed on its part's open
    shapes (`split_on_moved`) while its standby was set up for every shape (else a quarter of the
    standbys are used and each new commit's device idles 2-4 s). Its correctness checks are those
    of the shapes it times, as for a first trial submitted with them alone."""
    if held.shapes == job.shapes:
        return True
    have = {s.key for s in held.shapes}
    return bool(job.shapes) and all(s.key in have for s in job.shapes)


def _same_wait(held: TrialJob, job: TrialJob) -> bool:
    """A held trial may stand for `job` only if it waits for what `job` waits for: the same first
    trial, or nothing (a companion whose first trial has ended waits for nothing any more)."""
    return held.after is job.after or (job.after is None and held.after is not None and held.after.done())


class Holds(Protocol):
    """The run's executor, as a standby needs it (bisector/runner/executor.py)."""

    def submit(self, job: TrialJob) -> TrialFuture: ...

    def unhold(self, future: TrialFuture, shapes: tuple[Shape, ...] | None = None) -> TrialFuture | None: ...

    def cancel(self, future: TrialFuture) -> None: ...


class Warmer:
    """Builds and precompiles commits ahead of the search, `parallel` at once, cancellable.

    `make_executor()` (`precompile_executor`) is called on first need: a run that never
    prefetches starts nothing. With `standby`, commits get held first trials instead (see above)."""

    def __init__(
        self,
        builds: Builds,
        make_executor: Callable[[], PrecompileTrials],
        parallel: int,
        standby: Callable[[], Holds] | None = None,
    ) -> None:
        self.builds, self.make_executor, self.parallel = builds, make_executor, max(1, parallel)
        self.held_cap = 2 * self.parallel  # standbys alive at most, and spares alike
        self.standby = standby
        self._held: dict[tuple[str, str | None], tuple[TrialJob, TrialFuture]] = {}
        self._spares: dict[tuple[str, str | None], tuple[TrialJob, TrialFuture]] = {}  # oldest first
        self._named_before: set[tuple[str, str | None]] = set()
        self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="warm")
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, str | None], Future[Warmed | None]] = {}
        self._claimed: set[tuple[str, str | None]] = set()
        self._executor: PrecompileTrials | None = None
        self._closed = False
        self.asked: list[tuple[str, ...]] = []  # every request, in order: the commits it named
        self.started: list[str] = []  # commits whose precompile trial was submitted
        self.cancelled: list[str] = []  # commits dropped before they started
        self.spares: list[tuple[str, int]] = []  # (commit, slot) of every spare set up
        self.spares_taken: list[tuple[str, int]] = []  # those a round then took

    def prefetch(self, wants: Sequence[Want]) -> None:
        """Warm these commits (most likely first); queued ones no longer named are cancelled, and a
        commit already claimed by its first trial is left alone."""
        with self._lock:
            if self._closed:
                return
            self.asked.append(tuple(w.sha for w in wants))
            named = {w.key for w in wants}
            for key, future in list(self._tasks.items()):
                if key not in named and future.cancel():
                    del self._tasks[key]
                    self.cancelled.append(key[0])
            # The search names the next round's commits just before it measures this round's, which
            # the request before named: a standby lives one request longer than a queued prefetch.
            for key in [k for k in self._held if k not in named and k not in self._named_before]:
                self._drop_held(key)
            self._named_before = named
            new = [w for w in wants if w.key not in self._tasks and w.key not in self._claimed]
            if self.standby is not None:  # each holds a process and its inputs on the device: at most
                # 2 x `parallel`, as one lives a request longer than the request that named it
                busy = len(self._held) + sum(1 for f in self._tasks.values() if not f.done())
                new = new[: max(0, self.held_cap - busy + self._make_room(wants, new, busy))]  # the most likely first
            for want in new:
                self._tasks[want.key] = self._pool.submit(self._warm, want)

    def _make_room(self, wants: Sequence[Want], new: Sequence[Want], busy: int) -> int:
        """Drop the standbys this request names after new commits that find no room (the search
        names the part it refines next before those it will come back to); how many went. Under the lock."""
        rank = {w.key: q for q, w in enumerate(wants)}
        dropped = 0
        for want in new[max(0, self.held_cap - busy) :]:
            lower = [k for k in self._held if rank.get(k, -1) > rank[want.key]]
            if not lower:
                break
            self._drop_held(max(lower, key=rank.__getitem__))
            dropped += 1
        return dropped

    def claim(self, sha: str, patch_hash: str | None = None) -> Warmed | None:
        """The commit's first real trial is about to run: its prefetch if one was made (waiting for
        one under way: its compile is further along than a new one's would be), else None (a queued
        one is cancelled) and the trial compiles cold as before. With standbys, a standby being built
        and submitted is waited for first (a moment: the trial's own build is done by now), so that
        `take` finds it: claimed before, it was never submitted and the trial set up cold beside it
        (a CPU run's hunk subset, named just before its round, lost that race under a busy CI)."""
        key = (sha, patch_hash)
        with self._lock:
            task = self._tasks.get(key)
        if task is not None and self.standby is not None and task.running():
            wait([task])
        with self._lock:
            self._claimed.add(key)
            future = self._tasks.get(key)
            if future is not None and future.cancel():
                del self._tasks[key]
                self.cancelled.append(sha)
                return None
        if future is None:
            return None
        try:
            return future.result()
        except (CancelledError, Exception):  # noqa: BLE001 - a failed prefetch is a cold first trial
            return None

    def take(self, job: TrialJob) -> TrialFuture | None:
        """The commit's standby or spare, unheld, if it is this very trial (same build, shapes, seed,
        slot, in a lineage it may run in); None otherwise (one that differs is cancelled) and the
        caller submits the job."""
        key = (job.build.sha, job.build.patch_hash)
        with self._lock:
            self._claimed.add(key)
            held = self._held.pop(key, None) or self._spares.pop(key, None)
        if held is None or self.standby is None:
            return None
        standby, future = held
        if (
            not _stands_for(standby, job)
            or _what_runs(standby) != _what_runs(job)
            or not _same_wait(standby, job)
            or standby.lineage < job.lineage
        ):
            self.standby().cancel(future)
            return None
        if not standby.first:
            self.spares_taken.append((job.build.sha, job.slot))
        return self.standby().unhold(future, shapes=None if standby.shapes == job.shapes else job.shapes)

    def spare(self, job: TrialJob) -> None:
        """Set up `job`, a later trial of a measured commit, held until a round asks for it (`take`).
        Nothing without standby, or while the commit has a standby or spare already."""
        if self.standby is None or job.first:
            return
        key = (job.build.sha, job.build.patch_hash)
        with self._lock:
            if self._closed or key in self._held or key in self._spares:
                return
            while len(self._spares) >= self.held_cap:
                self.standby().cancel(self._spares.pop(next(iter(self._spares)))[1])
            self._hold_spare(key, job)

    def _hold_spare(self, key: tuple[str, str | None], job: TrialJob) -> None:
        """Submit `job` held, as the spare of `key`. Under the lock."""
        assert self.standby is not None  # spares exist only with a standby
        self._spares[key] = (job, self.standby().submit(replace(job, hold=True)))
        self.spares.append((job.build.sha, job.slot))

    def _companion(self, key: tuple[str, str | None], job: TrialJob) -> None:
        """The standby of `key` is set up (its cold compile done): its commit's second trial, held as
        a spare that takes the device only after the standby. A new commit gets two trials or more
        whenever the run's noise is not yet known or is not small, and that second one, set up only
        when the search asked, kept the device idle 1-1.5 s at each new commit of a 389-commit range
        on one H200 (its setup ~2.3 s against the first trial's ~1 s on the device)."""
        with self._lock:  # only where a spare has room: the standbys made last are the next round's
            # (no room made for it: companions that displaced spares, or were kept past the cap,
            # read about twice as noisy as fresh second trials, and the search took more trials;
            # studies/results/h200-demo-device-time.txt)
            if self._closed or key not in self._held or key in self._spares or len(self._spares) >= self.held_cap:
                return
            self._hold_spare(key, job)

    def _drop_held(self, key: tuple[str, str | None]) -> None:
        """Cancel a standby no longer wanted, and its companion (their processes are killed; nothing
        was stored). Under the lock."""
        _, future = self._held.pop(key)
        self._tasks.pop(key, None)  # named again later, it gets a new standby
        self.cancelled.append(key[0])
        drop = [future]
        if key in self._spares and self._spares[key][0].after is future:
            drop.append(self._spares.pop(key)[1])
        if self.standby is not None:
            for one in drop:
                self.standby().cancel(one)

    def _warm(self, want: Want) -> Warmed | None:
        build = self.builds.build(want.sha, want.patch)
        job = TrialJob(build, want.shapes, want.seed, slot=0, first=True, patch=want.patch)
        with self._lock:
            if build.status is BuildStatus.FAILED or self._closed or want.key in self._claimed:
                return None  # the search got there first: its first trial compiles, as before
            if self.standby is not None:
                self.started.append(want.sha)
                future = self.standby().submit(replace(job, hold=True))
                self._held[want.key] = (job, future)
                on_ready = getattr(self.standby(), "on_ready", None)
                if on_ready is not None:
                    second = replace(job, seed=want.seed + 1, slot=1, first=False, after=future)
                    on_ready(future, lambda: self._companion(want.key, second))
                return None
            if self._executor is None:
                self._executor = self.make_executor()
            executor = self._executor
            self.started.append(want.sha)
        start = time.time()
        outcome = executor.submit(job).result()
        out, log = executor.output(job)
        results = {str(r["shape"]): r for r in out.get("results", ()) if isinstance(r, dict) and "shape" in r}
        if not any(r.get("status") == "precompiled" for r in results.values()):
            return None
        return Warmed(want.sha, want.patch_hash, results, log, (outcome.timeline.ended or time.time()) - start)

    def wait(self, timeout: float | None = None) -> None:
        """Until every prefetch asked for so far has ended or was cancelled (for studies and tests)."""
        with self._lock:
            futures = list(self._tasks.values())
        wait(futures, timeout)

    def close(self) -> None:
        """Drop what is queued, end the prefetch trials under way, wait for builds under way."""
        with self._lock:
            self._closed = True
            for task in self._tasks.values():
                task.cancel()
            for key in list(self._held):
                self._drop_held(key)
            for _, future in self._spares.values():
                if self.standby is not None:
                    self.standby().cancel(future)
            self._spares.clear()
        if self._executor is not None:
            self._executor.close()
        self._pool.shutdown(wait=True)

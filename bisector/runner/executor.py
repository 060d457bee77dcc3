"""The trial executor: trial processes prepared ahead, one device section per device at a time.

A trial process spends most of its life off the device: interpreter start, `import torch` and
triton, the commit's modules, the device context, and at the end telemetry and teardown. On one
H200 that was 11.7 s of a trial's wall against ~0.1 s of timed kernels, one trial after another
under a lock held from process start to exit: the GPU did timed work 0.84% of a run. Here:

- Workers (bisector/runner/workers.py) are started before their trials are known, so their
  imports overlap other trials' device time; `ahead` ready workers are kept per device.
- A trial holds its device only from `go` to `release`: compile, correctness check, warm-up and
  timed repetitions, and once, briefly, in its setup (`brief`): its inputs drawn, kernels that
  must not run beside another trial's timed section. Every other phase runs alongside one.
- Per device, trials get the device in the order they were submitted (side-by-side rounds keep
  their ABBA order), never two at once; a trial that must wait for another (the first, cold-JIT
  trial of its commit) lets later ones pass. The device's file lock (bisector/runner/lock.py) is
  taken for each device section, so two bots on one host interleave trial by trial.
- Each process is fenced (dies with the bot), its memory watched (bisector/isolation/memwatch.py),
  its time limited; each trial's result is handed back the moment it ends.

Every transition is timestamped (`Timeline`): where a run's time went, and the proof that no two
device sections overlapped, come from these.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from bisector.isolation.memwatch import WATCH, Breach
from bisector.isolation.safe_fs import SafeDir
from bisector.model import BuildResult, Shape, TrialRecord
from bisector.runner import lock as locks
from bisector.runner.workers import AHEAD_OF_RENEWAL, Worker, WorkerSource

TICK_S = 0.2


@dataclass(frozen=True)
class TrialJob:
    """One trial process: a build, the shapes it measures, its seed, and what it waits for."""

    build: BuildResult
    shapes: tuple[Shape, ...]
    seed: int
    slot: int = 0  # which trial of this (commit, patch) it is: names its dir and log
    first: bool = False  # empty the commit's JIT cache dirs first: this trial compiles cold
    after: TrialFuture | None = None  # do not take a device before this trial has ended and been stored
    lane: int | None = None  # run on devices[lane % n] (side-by-side rounds spread each commit evenly)
    patch: str | None = None  # the patch text of a patched build: a remote worker builds it again
    # the commit's cold compile, made by a prefetch (bisector/measure/warmer.py), per shape: this trial,
    # its first, finds the JIT dir warm; its records keep what the prefetch measured
    cold_compile: Mapping[str, Mapping[str, Any]] | None = field(default=None, compare=False)
    # a standby (bisector/measure/warmer.py): set up now, the device only after `Executor.unhold`
    hold: bool = field(default=False, compare=False)
    # the oldest worker lineage it may run in (`Executor.renew_lineage`): a verification's fresh
    # trials share no process history with the trials that found the step
    lineage: int = 0


@dataclass(frozen=True)
class Timeline:
    """Epoch timestamps of one trial process, as the bot saw them (None: never reached)."""

    sha: str
    patch_hash: str | None
    device: int
    submitted: float
    started: float | None = None  # process (or fork) started
    ready: float | None = None  # imports done, waiting for a trial
    assigned: float | None = None  # given its trial
    want: float | None = None  # set up, asking for the device
    go: float | None = None  # device granted
    release: float | None = None  # device given back
    ended: float | None = None  # process gone, result read
    source: str = "spawn"
    unheld: float | None = None  # a standby: when the search asked for it (its wait before is not queueing)
    phases: Mapping[str, float] = field(default_factory=dict)  # seconds per phase the trial reported
    briefs: tuple[tuple[float, float], ...] = ()  # (go, release) of its brief loans in its setup (inputs drawn)
    slot: int | None = None  # which trial of its commit (or patched build) it was: 0 the first

    @property
    def device_s(self) -> float:
        """Seconds it held its device: the device section and its brief loans."""
        return self.span("go", "release") + sum(max(0.0, b - a) for a, b in self.briefs)

    @property
    def queued(self) -> float | None:
        """When it began to wait for the device: asking for it, or a standby's unhold if later."""
        return max(self.want, self.unheld) if self.want is not None and self.unheld is not None else self.want

    @property
    def asked(self) -> float:
        """When the run asked for this trial: its submission, or a standby's unhold."""
        return self.unheld if self.unheld is not None else self.submitted

    def span(self, a: str, b: str) -> float:
        x, y = getattr(self, a), getattr(self, b)
        return max(0.0, y - x) if x is not None and y is not None else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("sha", "patch_hash", "phases")}


@dataclass(frozen=True)
class TrialOutcome:
    """What one trial process left: its records (one per shape) and its timeline."""

    records: tuple[TrialRecord, ...]
    timeline: Timeline


TrialFuture = Future[TrialOutcome]  # what submitting a TrialJob gives


@dataclass(frozen=True)
class Prepared:
    """Everything the executor needs to hand a job to a worker (made by the caller: paths, env)."""

    spec_path: Path
    out_path: Path
    log_path: Path
    cwd: Path
    env: Mapping[str, str]  # the trial's own: device pin, JIT cache dirs
    unset: tuple[str, ...] = ()
    cpu: int | None = None
    # The spec itself, sent with the job (the worker never reads it from a path a trial could swap),
    # and the trial's fresh dir as the bot opened it (its log is read from there, never by path).
    spec: Mapping[str, Any] | None = field(default=None, compare=False)
    dir: SafeDir | None = field(default=None, compare=False, repr=False)
    # Where the trial's temp files go: "" the environment's TMPDIR (made by the bot), or a private
    # tmpfs (the sandbox's /dev/shm) in which the worker makes a dir of its own for this one trial.
    scratch_in: str = ""
    ended: Callable[[], None] | None = field(default=None, compare=False, repr=False)  # after the trial, once

    def end(self) -> None:
        """The trial is over: its scratch removed, the bot's fd of its dir closed."""
        if self.ended is not None:
            self.ended()
        if self.dir is not None:
            self.dir.close()


@dataclass(frozen=True)
class Prelude:
    """What an idle worker opens its device with before its trial is known: the device's kind and
    the environment every trial on it sets (pinned device, the config's variables; no JIT dirs).
    Creating a CUDA context took ~1 s of a trial's setup on a busy H200 host (0.25 s alone), on the
    device's critical path whenever a round asked for more trials than were set up
    (studies/results/h200-long-range.txt); an idle worker has that second to spare."""

    kind: str
    env: Mapping[str, str]
    unset: tuple[str, ...] = ()


@dataclass
class _Run:
    job: TrialJob
    seq: int
    future: TrialFuture
    prepared: Prepared | None = None
    device: int = 0
    worker: Worker | None = None
    state: str = "pending"  # pending | assigned | wants | on-device | released | done
    held: bool = False  # a standby: sets up, never takes the device, no time limit, until unheld
    deadline: float = 0.0
    breach: list[Breach] = field(default_factory=list)
    t: dict[str, float] = field(default_factory=dict)
    on_ready: list[Callable[[], None]] = field(default_factory=list)  # called once it is set up (`Executor.on_ready`)
    brief: float | None = None  # asking for a brief loan since (its setup's inputs), not yet lent
    only: tuple[str, ...] | None = None  # a standby unheld for some of its shapes: the grant names them
    briefs: list[list[float]] = field(default_factory=list)  # [go, release] of its brief loans
    out: dict[str, Any] = field(default_factory=dict)  # the trial's output, as last sent on its socket


Prepare = Callable[[TrialJob, int], Prepared]
Finish = Callable[[TrialJob, Prepared, Mapping[str, Any], Mapping[str, Any]], tuple[TrialRecord, ...]]
Preludes = Callable[[int], Prelude]


TEARDOWN_GRACE_S = 1.0  # how long a GPU trial that released its device may take to exit before it is lent on
BRIEF_LIMIT_S = 60.0  # a setup's brief loan (its inputs drawn, ~0.05 s) held longer: the trial is ended


def _unmatched(wants: Sequence[int], have: Sequence[int]) -> int:
    """How many of the lineages `wants` find no worker of their own in `have` (one whose lineage is
    the same or newer), each worker taken once."""
    left = sorted(have, reverse=True)
    short = 0
    for want in sorted(wants, reverse=True):
        if left and left[0] >= want:
            left.pop(0)
        else:
            short += 1
    return short


class Executor:
    """Runs TrialJobs on `devices` with workers from `source`; `submit` returns a Future[TrialOutcome].

    `prepare(job, device)` writes the job's spec and returns its paths and environment;
    `finish(job, prepared, out_json, info)` turns what the process left into records."""

    def __init__(
        self,
        source: WorkerSource,
        devices: Sequence[int],
        device_kind: str,
        prepare: Prepare,
        finish: Finish,
        *,
        ahead: int = 0,
        timeout_s: float = 600.0,
        memory_bytes: int = 0,
        lock_devices: bool = True,
        prelude: Preludes | None = None,
        learn_imports: bool = True,
    ) -> None:
        self.source, self.devices, self.kind = source, tuple(devices), device_kind
        # With one device every worker's trial runs there: an idle worker opens it while it waits.
        self.prelude = prelude(self.devices[0]) if prelude and len(self.devices) == 1 and device_kind != "cpu" else None
        self.prepare, self.finish = prepare, finish
        self.ahead, self.timeout_s, self.memory_bytes = ahead, timeout_s, memory_bytes
        self.lock_devices = lock_devices
        # On the CPU the device is a core: the next trial must not start its timed section while the
        # last one still exits on that core (freeing torch takes a few hundred ms of CPU), and it
        # counts against the core until then. On a GPU the device is lent on when the last holder's
        # process has ended too, or TEARDOWN_GRACE_S after its release, whichever comes first: its
        # teardown (its memory unmapped, its context destroyed) slows another process's kernels
        # (studies/results/h200-setup-parts.txt), and a trial whose timed section it fell in read
        # 3-8% slow three times as often (h200-long-range.txt). It costs the release-to-exit time
        # (0.03 s a trial, median).
        self.hold_until_exit = device_kind == "cpu"
        # On a GPU the modules a trial imported from the environment go to its zygote, imported once
        # for every later fork (benches/env_preload.py): setups, not the device, kept the real
        # ranges' device idle. Not on the CPU, whose trials time on the cores their setups would share.
        self.learn_imports = learn_imports and device_kind != "cpu"
        self.timelines: list[Timeline] = []  # every trial this executor ran, in order of ending
        self._runs: list[_Run] = []
        self._idle: list[Worker] = []
        self._starting: list[Worker] = []
        self._holder: dict[int, _Run | None] = {d: None for d in self.devices}
        self._file_locks: dict[int, FileLock] = {}
        self._seq = 0
        self._granted = False  # a device section was lent once (`_fork_ahead_of_renewal` only before)
        self._unopened: list[Worker] = []  # forked ahead, ready, their device not yet opened (`_open_ahead`)
        self._opening: Worker | None = None  # the one forked ahead opening it now
        self._lineage = source.lineage  # the lineage asked for (`renew_lineage`); the loop renews the source
        self._cancel: list[TrialFuture] = []
        self._reaping: list[Worker] = []  # gone from our view, their process not yet collected
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._watch_source()
        self._closing = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="executor", daemon=True)
        self._thread.start()

    # -- public --------------------------------------------------------------------------------

    def submit(self, job: TrialJob) -> TrialFuture:
        future: TrialFuture = Future()
        with self._lock:
            if self._error is not None:
                raise RuntimeError(f"the trial executor failed: {self._error}") from self._error
            self._seq += 1
            self._runs.append(_Run(job, self._seq, future, held=job.hold, t={"submitted": time.time()}))
        self._wake()
        return future

    def unhold(self, future: TrialFuture, shapes: tuple[Shape, ...] | None = None) -> TrialFuture | None:
        """A standby trial is wanted now: it joins its device's queue as if submitted this moment,
        its setup (process, context, the commit's compile) already done or under way. None when it
        is gone (cancelled, or it ended: a crash in its setup), and the caller submits anew.
        `shapes`: some of the job's, the only ones it times (its grant names them) and records."""
        with self._lock:
            run = next((r for r in self._runs if r.future is future and r.held), None)
            if run is None or run.state not in ("pending", "assigned", "wants"):
                return None
            if shapes is not None:
                keys = {s.key for s in run.job.shapes}
                if not shapes or any(s.key not in keys for s in shapes):
                    raise ValueError(f"unhold: {[s.key for s in shapes]} are not shapes of the held trial")
                run.job, run.only = replace(run.job, shapes=tuple(shapes)), tuple(s.key for s in shapes)
            self._seq += 1
            run.held, run.seq = False, self._seq
            run.t["unheld"] = time.time()
            if run.state != "pending":
                run.deadline = time.time() + self.timeout_s
        self._wake()
        return future

    def renew_lineage(self) -> int:
        """A new worker lineage (`WorkerSource.renew`, once a job that names it fits): jobs that name
        it run in processes that share no history with any trial before (a new zygote's forks).
        Older workers still serve the rest."""
        with self._lock:
            self._lineage += 1
            lineage = self._lineage
        self._wake()
        return lineage

    def on_ready(self, future: TrialFuture, fn: Callable[[], None]) -> None:
        """Call `fn` (on a thread of its own) once the trial of `future` is set up and asks for its
        device: at once if it has already, never if it ends before. A standby's companion is set up
        then (bisector/measure/warmer.py): after the commit's cold compile, before the search asks."""
        with self._lock:
            run = next((r for r in self._runs if r.future is future), None)
            if run is None or run.state == "done":
                return
            if run.state not in ("wants", "on-device", "released"):
                run.on_ready.append(fn)
                return
        threading.Thread(target=fn, name="on-ready", daemon=True).start()

    def cancel(self, future: TrialFuture) -> None:
        """Drop a trial that has not taken its device yet (its process, if any, is killed); one
        already on its device finishes."""
        with self._lock:
            self._cancel.append(future)
        self._wake()

    def run(self, jobs: Sequence[TrialJob]) -> list[TrialOutcome]:
        """Submit all, wait for all (in submission order)."""
        futures = [self.submit(j) for j in jobs]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Kill what is still running, stop idle workers, end the loop."""
        self._closing = True
        self._wake()
        self._thread.join(timeout=30)
        self.source.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop ------------------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        try:
            while not self._closing:
                self._step()
                for key, _ in self._selector.select(TICK_S):
                    if key.data is None:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
                    elif key.data == "source":
                        self.source.on_readable(key.fileobj, self._workers())  # type: ignore[arg-type]
                        self._watch_source()  # a replaced zygote that ended is heard no more
                    else:
                        self._on_message(key.data)
        except BaseException as exc:  # noqa: BLE001 - a bug here must not leave callers waiting for ever
            with self._lock:
                self._error = exc
                runs = [r for r in self._runs if not r.future.done()]
            for r in runs:
                r.future.set_exception(exc)
        finally:
            self._shutdown()

    def _watch_source(self) -> None:
        """Listen to the worker source's own sockets, again when it has new ones (a zygote started
        anew after it died: workers.ForkSource)."""
        have = [k for k in self._selector.get_map().values() if k.data == "source"]
        socks = self.source.sockets()
        if [k.fileobj for k in have] == socks:
            return
        for key in have:
            self._selector.unregister(key.fd)
        for sock in socks:
            self._selector.register(sock, selectors.EVENT_READ, "source")

    def _workers(self) -> list[Worker]:
        return [*self._idle, *self._starting, *(r.worker for r in self._runs if r.worker is not None)]

    def _step(self) -> None:
        now = time.time()
        with self._lock:
            cancel, self._cancel = self._cancel, []
        self._reaping = [w for w in self._reaping if not w.reap()]
        for future in cancel:
            run = next((r for r in self._runs if r.future is future), None)
            if run is not None and run.state in ("pending", "assigned", "wants"):
                self._drop(run)
        with self._lock:
            runs = list(self._runs)
        pending = [r for r in runs if r.state == "pending"]
        # Each device takes up to 1 + `ahead` trials at a time (one on it, the rest setting up, in
        # the order they were submitted); a trial's lane, when it has one, names its device.
        load = {
            d: sum(1 for r in runs if r.device == d and r.state in self._busy_states and not r.held)
            for d in self.devices
        }
        fits: list[tuple[_Run, int]] = []
        for run in pending:
            device = self._device_for(run, load)
            if run.held:  # a standby takes a worker, not a place in its device's queue
                fits.append((run, device if device is not None else min(load, key=load.__getitem__)))
            elif device is not None:
                load[device] += 1
                fits.append((run, device))
        self._renew_source(max((r.job.lineage for r, _ in fits), default=0))
        # Workers: one for every trial that fits, and `ahead` per device ready in reserve for the
        # trials the search asks for next (their imports are then done before they are known);
        # more where the trials that fit ask for a newer lineage than the workers at hand.
        want_workers = len(fits) + self.ahead * len(self.devices)
        have = [w for w in [*self._idle, *self._starting] if w.lineage != AHEAD_OF_RENEWAL]
        short = _unmatched([r.job.lineage for r, _ in fits], [w.lineage for w in have])
        for _ in range(max(short, want_workers - len(have))):
            self._started(self.source.start())
        if not self._granted:
            self._fork_ahead_of_renewal()
        for worker in [w for w in self._starting if now - w.started > self.timeout_s]:
            self._discard(worker)  # a worker that never got ready (a hung import)
        for run, device in fits:
            # the oldest lineage that may run it: newer workers are kept for the trials that need them
            idle = min((w for w in self._idle if w.lineage >= run.job.lineage), key=lambda w: w.lineage, default=None)
            if idle is not None:
                self._idle.remove(idle)
                self._assign(run, device, idle, now)
        for run in runs:
            if run.state in ("assigned", "wants", "on-device", "released") and now > run.deadline and not run.held:
                self._end(run, timed_out=True)
            elif (
                self._holder.get(run.device) is run
                and run.briefs
                and not run.briefs[-1][1]
                and now - run.briefs[-1][0] > BRIEF_LIMIT_S
            ):
                self._end(run, timed_out=True)  # a standby (no deadline) hung in its loan: the device goes on
            elif run.state == "released" and not self.hold_until_exit and now - run.t["release"] > TEARDOWN_GRACE_S:
                self._free(run)  # slow to exit: the device goes on
        for device in self.devices:
            self._grant(device)

    def _renew_source(self, newest: int) -> None:
        """The source is renewed when a trial that fits asks for a newer lineage than it makes, not
        when one is asked for: a resumed run whose fresh trials are all stored starts no zygote."""
        if self.source.lineage >= newest:
            return
        self.source.renew(newest)
        self._watch_source()
        for worker in [w for w in [*self._idle, *self._starting] if w.lineage == AHEAD_OF_RENEWAL]:
            self._discard(worker)  # forked ahead by a zygote that died before it became current
        for worker in self._unopened:  # wanted now: each opens the device at once
            if worker in self._idle:
                self._open(worker)
        self._unopened, self._opening = [], None

    def _started(self, worker: Worker) -> None:
        self._starting.append(worker)
        self._selector.register(worker.sock, selectors.EVENT_READ, worker)
        self._watch_source()

    def _discard(self, worker: Worker, kill: bool = True) -> None:
        """A worker without a trial leaves the pools (idle or starting) and is forgotten."""
        for pool in (self._idle, self._starting):
            if worker in pool:
                pool.remove(worker)
        self._forget(worker, kill=kill)

    def _open(self, worker: Worker) -> None:
        """Have an idle worker open the one device while it waits (`Prelude`)."""
        if self.prelude is not None:
            worker.send(
                device={"kind": self.prelude.kind, "env": dict(self.prelude.env), "unset": list(self.prelude.unset)}
            )

    def _open_ahead(self) -> None:
        """The workers forked ahead of a renewal open the device one at a time: opened at once, 7
        contexts took 1.5-4.6 s each on the H200 (0.3 s alone) and the range's first trial waited
        7-9 s from its worker's readiness to its device section, against 5.4 s without them.
        The cold start's other workers open theirs at once, as soon as they are ready. Queued one at
        a time as well, their opening ran into the range's first timed sections (~13 workers at
        ~0.4 s each): GOOD's and BAD's first trials read 4% slow and a close pair took 8 trials a
        side (studies/results/h200-long-range.txt)."""
        if self._opening is not None and self._opening in self._idle:
            return
        self._opening = None
        while self._unopened and self._opening is None:
            worker = self._unopened.pop(0)
            if worker in self._idle:
                self._open(worker)
                self._opening = worker

    def _fork_ahead_of_renewal(self) -> None:
        """Keep workers of the next lineage forked and idle (`WorkerSource.start_next`), their device
        opened: as many as the devices' queues take at once, as a verification round asks for that
        many trials of a new lineage at once. Forked only before a device was first lent, in the
        cold start, where no timed section runs yet: a context made in another process slowed
        attention kernels' timed rounds 9.7% (studies/results/h200-setup-parts.txt), and forked at
        the first grant they opened theirs in the range's first timed section. They open the device
        one at a time (`_open_ahead`). Forked for the first renewal only: a later one (a second
        look) forks when it is asked, as before."""
        if not self.ahead:
            return
        have = sum(w.lineage == AHEAD_OF_RENEWAL for w in [*self._idle, *self._starting])
        for _ in range((1 + self.ahead) * len(self.devices) - have):
            worker = self.source.start_next()
            if worker is None:
                return
            self._started(worker)

    def _assign(self, run: _Run, device: int, worker: Worker, now: float) -> None:
        run.device = device
        run.worker = worker
        try:
            run.prepared = self.prepare(run.job, run.device)
        except BaseException as exc:  # noqa: BLE001 - a job we cannot even write fails alone
            run.state, run.worker = "done", None
            self._idle.insert(0, worker)
            run.future.set_exception(exc)
            return
        p = run.prepared
        job = {
            "spec": str(p.spec_path),
            "out": str(p.out_path),
            "log": str(p.log_path),
            "cwd": str(p.cwd),
            "env": dict(p.env),
            "unset": list(p.unset),
            "cpu": p.cpu,
            **({"spec_data": dict(p.spec)} if p.spec is not None else {}),
            **({"scratch_in": p.scratch_in} if p.scratch_in else {}),
        }
        run.t.update(started=worker.started, ready=float(worker.ready.get("t", worker.started)), assigned=now)
        run.state, run.deadline = "assigned", now + self.timeout_s
        if worker.pid is not None:
            run.breach = WATCH.watch(worker.pid, self.memory_bytes, kill=worker.kill)
        if not worker.send(job=job):
            self._end(run)

    @property
    def _busy_states(self) -> tuple[str, ...]:
        """States in which a trial counts against its device (and the live-worker cap)."""
        return (
            ("assigned", "wants", "on-device", "released")
            if self.hold_until_exit
            else ("assigned", "wants", "on-device")
        )

    def _device_for(self, run: _Run, load: Mapping[int, int]) -> int | None:
        """The trial's device if it has room now: its lane's, else the least loaded; None: wait."""
        room = 1 + self.ahead
        if run.job.lane is not None:
            device = self.devices[run.job.lane % len(self.devices)]
            return device if load[device] < room else None
        device = min(self.devices, key=lambda d: (load[d], self.devices.index(d)))
        return device if load[device] < room else None

    def _grant_brief(self, device: int) -> bool:
        """Lend the free device for a setup's brief loan, if one is asked for; True when one was."""
        if self._holder[device] is not None:
            return False
        with self._lock:
            briefs = sorted(
                (r for r in self._runs if r.device == device and r.brief is not None and r.state == "assigned"),
                key=lambda r: r.brief or 0.0,
            )
        if not briefs:
            return False
        if self._take_file_lock(device):
            run = briefs[0]
            self._holder[device], run.brief = run, None
            run.briefs.append([time.time(), 0.0])
            if not run.worker or not run.worker.send(go=run.briefs[-1][0]):
                self._end(run)
        return True

    def _grant(self, device: int) -> None:
        # A setup's brief loan first, standbys' too: tens of ms, and the trial behind it would
        # otherwise wait for a whole device section of another trial to draw its inputs.
        if self._holder[device] is not None or self._grant_brief(device):
            return
        with self._lock:
            queue = sorted(
                (r for r in self._runs if r.device == device and r.state in ("assigned", "wants") and not r.held),
                key=lambda r: r.seq,
            )
        for run in queue:
            after = run.job.after
            if after is not None and not after.done():
                # waits for its commit's cold first trial to be stored (its check noted: the later
                # ones skip theirs); trials of other commits may pass
                continue
            if run.state != "wants":
                return  # the next in line is still setting up: keep the order
            if not self._take_file_lock(device):
                return
            self._holder[device] = run
            self._granted = True
            run.state = "on-device"
            run.t["go"] = time.time()
            only = {"shapes": list(run.only)} if run.only else {}
            if not run.worker or not run.worker.send(go=run.t["go"], **only):
                self._end(run)
            return

    def _take_file_lock(self, device: int) -> bool:
        """This host's lock of the device: another bot's trial may hold it; try again next tick."""
        if not self.lock_devices:
            return True
        lock = self._file_locks.get(device)
        if lock is None:
            lock = self._file_locks[device] = locks.device_lock(self.kind, device)
        try:
            lock.acquire(timeout=0)
            return True
        except Timeout:
            return False

    def _free(self, run: _Run) -> None:
        if self._holder.get(run.device) is run:
            self._holder[run.device] = None
            if self.lock_devices and run.device in self._file_locks:
                self._file_locks[run.device].release()
            if run.briefs and not run.briefs[-1][1]:
                run.briefs[-1][1] = time.time()  # ended (or gave back) during a brief loan
            elif "go" in run.t and "release" not in run.t:
                run.t["release"] = time.time()

    def _on_message(self, worker: Worker) -> None:
        messages = worker.lines.read()
        run = next((r for r in self._runs if r.worker is worker and r.state != "done"), None)
        for msg in messages:
            kind = msg.get("msg")
            if kind == "ready":
                if worker not in self._starting:
                    continue  # accepted once, before the worker has a trial: a later one is its trial's
                worker.ready = {**msg, "t": time.time()}
                if isinstance(msg.get("pid"), int):
                    worker.found(msg["pid"])  # a forked one's is known from its zygote already
                if worker in self._starting:
                    self._starting.remove(worker)
                    self._idle.append(worker)
                    if worker.lineage == AHEAD_OF_RENEWAL and self.prelude is not None:
                        self._unopened.append(worker)
                        self._open_ahead()
                    else:
                        self._open(worker)
            elif kind == "opened":
                worker.ready["opened_s"] = msg.get("s")
                if worker is self._opening:
                    self._opening = None
                    self._open_ahead()
            elif run is not None and kind == "want" and msg.get("brief"):
                run.brief = time.time()
            elif run is not None and kind == "release" and msg.get("brief"):
                self._free(run)  # the process goes on setting up: the device is lent on at once
            elif run is not None and kind == "want":
                with self._lock:
                    run.state, run.t["want"] = "wants", time.time()
                    ready, run.on_ready = run.on_ready, []
                for fn in ready:
                    threading.Thread(target=fn, name="on-ready", daemon=True).start()
            elif run is not None and kind == "release":
                run.t["release"] = time.time()
                run.state = "released"  # the device is freed when it ends (`_end`) or after the grace
            elif run is not None and kind == "done":
                run.t["done"] = time.time()
            elif run is not None and kind == "out" and isinstance(msg.get("out"), dict):
                run.out = msg["out"]  # its results so far, from its own socket: the only place they are read
        if worker.lines.closed:
            if run is not None:
                self._end(run, lend_on=True)
            else:
                self._discard(worker, kill=False)

    def _end(self, run: _Run, timed_out: bool = False, lend_on: bool = False) -> None:
        """The trial is over (exited, killed or timed out): free its device, read its output.
        `lend_on`: its process exited, and a GPU goes to the next trial before the output is read."""
        worker = run.worker
        if worker is not None:
            for msg in worker.lines.drain():  # what it sent before it ended or was killed: its last results
                if msg.get("msg") == "out" and isinstance(msg.get("out"), dict):
                    run.out = msg["out"]
            self._forget(worker, kill=timed_out or not worker.lines.closed, wait_s=0.0 if "done" in run.t else 5.0)
        self._free(run)
        run.state = "done"
        run.t["ended"] = time.time()
        if lend_on and not self.hold_until_exit:
            # A GPU is lent on before this trial's output is read and stored: on the H200 demo the
            # next trial, set up and asked for, waited 0.1-1.2 s after the last one's exit in 43 of
            # ~200 hand-offs (12.7 s), while the loop stored records beside the search's own threads.
            # Not a CPU core: the bot's storing would run beside the next trial's timed calls there.
            self._grant(run.device)
        out = run.out
        names = (out.get("protocol") or {}).get("env_imports") if isinstance(out.get("protocol"), dict) else None
        if self.learn_imports and isinstance(names, list):
            self.source.learn([n for n in names if isinstance(n, str)])
        timeline, info = self._ended_info(run, timed_out)
        with self._lock:
            self._runs.remove(run)
            self.timelines.append(timeline)
        try:
            records = self.finish(run.job, run.prepared, out, info) if run.prepared else ()
        except BaseException as exc:  # noqa: BLE001
            run.future.set_exception(exc)
            return
        finally:
            if run.prepared is not None:
                run.prepared.end()
        run.future.set_result(TrialOutcome(tuple(records), timeline))

    def _ended_info(self, run: _Run, timed_out: bool) -> tuple[Timeline, dict[str, Any]]:
        """The ended trial's timeline and what the bot saw of its end (`finish` reads it)."""
        out, worker = run.out, run.worker
        timeline = Timeline(
            run.job.build.sha,
            run.job.build.patch_hash,
            run.device,
            run.t["submitted"],
            run.t.get("started"),
            run.t.get("ready"),
            run.t.get("assigned"),
            run.t.get("want"),
            run.t.get("go"),
            run.t.get("release"),
            run.t["ended"],
            source=self.source.kind,
            unheld=run.t.get("unheld"),
            phases=phase_seconds(out.get("phases") or (), run.t.get("go"), run.t.get("release")),
            briefs=tuple((a, b) for a, b in run.briefs),
            slot=run.job.slot,
        )
        info = {
            "timed_out": timed_out,
            "timeout_s": self.timeout_s,
            "exit_code": worker.exit_code if worker else None,
            "clean": "done" in run.t,
            "breach": run.breach[0].describe() if run.breach else "",
            "timeline": timeline.as_dict(),
            "worker": {
                "source": self.source.kind,
                "lineage": worker.lineage if worker else None,
                "cuda_initialized_before_trial": bool(worker and worker.ready.get("cuda_initialized")),
                "device_opened_s": worker.ready.get("opened_s") if worker else None,
            },
        }
        return timeline, info

    def _forget(self, worker: Worker, kill: bool = True, wait_s: float = 0.0) -> None:
        if kill:
            worker.kill()
        try:
            self._selector.unregister(worker.sock)
        except (KeyError, ValueError):
            pass
        worker.close(wait_s)
        if not worker.reap():
            self._reaping.append(worker)
        if worker.pid is not None:
            WATCH.forget(worker.pid)

    def _drop(self, run: _Run) -> None:
        """A cancelled trial: no result, no device time; its worker (if it had one) is killed, and a
        brief loan it held in its setup ends with it."""
        if run.worker is not None:
            self._forget(run.worker)
        self._free(run)
        if run.prepared is not None:
            run.prepared.end()
        run.state = "done"
        with self._lock:
            self._runs.remove(run)
        run.future.cancel()
        run.future.set_running_or_notify_cancel()  # wakes `wait()`ers: a plain cancel does not

    def _shutdown(self) -> None:
        for run in list(self._runs):
            if run.state != "pending":
                self._end(run)
            elif not run.future.done():
                run.future.cancel()
                run.future.set_running_or_notify_cancel()
        for worker in [*self._idle, *self._starting]:
            self._forget(worker)
        self._idle, self._starting = [], []
        for lock in self._file_locks.values():
            while lock.is_locked:
                lock.release()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


ON_DEVICE = "on_device:"  # a phase's seconds inside the device section (go to release), beside its total
SPAN_SLACK_S = 0.01  # the trial's clock reads go a little after the bot wrote it: same host, same epoch clock


def phase_seconds(
    spans: Sequence[Sequence[Any]], go: float | None = None, release: float | None = None
) -> dict[str, float]:
    """Seconds per phase name, summed over shapes, from a trial's [name, shape, start, end] spans.
    With the bot's `go` and `release`, each phase's part inside the device section is also given as
    ON_DEVICE + name: a trial names "inputs" or "compile" both in its setup (staged ahead) and under
    the lock (staged there), and only the second costs device time."""
    out: dict[str, float] = {}
    for span in spans:
        try:
            name, _, start, end = span
            seconds = float(end) - float(start)
            out[str(name)] = out.get(str(name), 0.0) + seconds
            if (
                go is not None
                and release is not None
                and str(name) != "device"
                and float(start) >= go - SPAN_SLACK_S
                and float(end) <= release + SPAN_SLACK_S
            ):
                out[ON_DEVICE + str(name)] = out.get(ON_DEVICE + str(name), 0.0) + seconds
        except (TypeError, ValueError):
            continue
    return out


__all__ = ["Executor", "Prepared", "TrialJob", "TrialOutcome", "Timeline", "phase_seconds"]

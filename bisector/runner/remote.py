"""What a dask worker runs for the bot: build a commit, or run one trial of it, on this host.

A dask worker is a long-lived process on a GPU host, started with `BISECTOR_DEVICE=<index>` (the
device it owns, as this host numbers it) and a `GPU` resource. For each config it keeps one
`Host`: the upstream opened, a Builder over the build cache (keyed as on the bot, so a shared
`build.cache_dir` is pulled from rather than rebuilt), and the local trial executor of
bisector/runner/launch.py on its one device. So a remote trial is exactly a local one: a fresh
fenced process per trial (the fence's bot is this worker: if the worker dies, its trial dies with
it), the commit's cold JIT cache for its first trial, the device's lock around the timed section,
and the environment scrubbed of secrets (`worker_env`). Nothing here writes the store: records go
back to the bot, its one writer.

Imported by dask workers, so it must stay importable with only bisector's own dependencies.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bisector import gitrepo
from bisector.build import Builder
from bisector.config import Config
from bisector.model import BuildResult, BuildStatus, Shape, TrialRecord, TrialStatus
from bisector.runner.executor import Executor, Timeline, TrialJob, TrialOutcome

DEVICE_ENV = "BISECTOR_DEVICE"  # the device a worker owns (default 0)
WORK_ENV = "BISECTOR_WORKER_DIR"  # a worker's own work dir (default: the bot's, for a cluster on its host)


@dataclass(frozen=True)
class RemoteBuild:
    """Build `sha` (+ `patch`) of `config`'s upstream on the worker."""

    config: Config
    work: str
    sha: str
    patch: str | None = None


@dataclass(frozen=True)
class RemoteTrial:
    """One trial process, as the bot's TrialJob without what only the bot has (its futures, its paths)."""

    config: Config
    work: str
    sha: str
    patch: str | None
    shapes: tuple[Shape, ...]
    seed: int
    slot: int
    first: bool
    # A dask Event's name: the trial sets up now and takes the device only once the bot sets it (a
    # standby, a spare, a commit's later trial waiting for its first); "" runs it straight away.
    gate: str = ""


def drop_name(gate: str) -> str:
    """The Event the bot sets, before the gate itself, when the held trial is not wanted after all."""
    return f"{gate}-drop"


def worker_device() -> int:
    return int(os.environ.get(DEVICE_ENV, "0") or 0)


def worker_work(bot_work: str) -> Path:
    return Path(os.environ.get(WORK_ENV) or bot_work).resolve()


class Host:
    """One config's builder and trial executor in this worker process."""

    def __init__(self, config: Config, work: Path) -> None:
        from bisector.isolation import sandbox
        from bisector.runner.launch import make_executor

        sandbox.prepare(config)  # a worker that cannot sandbox a config that requires it runs nothing of it
        self.device = worker_device()
        self.config = replace(config, devices=(self.device,))
        self.work = work
        cache = Path(config.build.cache_dir) if config.build.cache_dir else work / "builds"
        self.builder = Builder(gitrepo.open_repo(config.upstream.repo), config.upstream, config.build, cache)
        self.executor: Executor = make_executor(self.config, work, pin_cpu=True)


_HOSTS: dict[tuple[str, str, str], Host] = {}
_LOCK = threading.Lock()


def host(config: Config, bot_work: str) -> Host:
    work = worker_work(bot_work)
    key = (config.path, config.name, str(work))
    with _LOCK:
        if key not in _HOSTS:
            _HOSTS[key] = Host(config, work)
        return _HOSTS[key]


def where() -> dict[str, object]:
    """This worker, as a record names it."""
    try:
        from distributed import get_worker

        address = get_worker().address
    except (ImportError, ValueError):
        address = ""
    return {"host": socket.gethostname(), "dask_worker": address, "device": worker_device(), "pid": os.getpid()}


def build(task: RemoteBuild) -> BuildResult:
    """The commit built here (or found in the cache): whether it builds is the bot's SKIP."""
    return host(task.config, task.work).builder.build(task.sha, task.patch)


def trial(task: RemoteTrial) -> TrialOutcome:
    """One trial on this worker's device, its build made or pulled first."""
    h = host(task.config, task.work)
    made = h.builder.build(task.sha, task.patch)
    if made.status is BuildStatus.FAILED:
        return failed(task, f"build failed on {socket.gethostname()}: {made.log_tail.strip()[-300:]}")
    job = TrialJob(
        made, task.shapes, task.seed, slot=task.slot, first=task.first, patch=task.patch, hold=bool(task.gate)
    )
    future = h.executor.submit(job)
    if task.gate:
        if not _gate_opens(task.gate):
            h.executor.cancel(future)
            return TrialOutcome((), Timeline(task.sha, None, worker_device(), time.time()))
        future = h.executor.unhold(future) or future  # None: it ended in its setup; its outcome says how
    outcome = future.result()
    at = where()
    records = tuple(replace(r, protocol={**r.protocol, "where": at}) for r in outcome.records)
    return TrialOutcome(records, outcome.timeline)


def _gate_opens(gate: str) -> bool:
    """Wait in this task's thread (set up meanwhile, off the device) until the bot opens the gate;
    False when it dropped the trial instead."""
    from distributed import Event

    Event(gate).wait()
    return not Event(drop_name(gate)).is_set()


def failed(task: RemoteTrial, error: str) -> TrialOutcome:
    """A trial that could not run here: one CRASH record per shape, as a local crash gives."""
    from bisector.build.builder import patch_hash

    phash = patch_hash(task.patch) if task.patch else None
    records = tuple(
        TrialRecord(
            sha=task.sha,
            shape=s.key,
            status=TrialStatus.CRASH,
            error=error,
            patch_hash=phash,
            slot=task.slot,
            protocol={"where": where()},
        )
        for s in task.shapes
    )
    return TrialOutcome(records, Timeline(task.sha, phash, worker_device(), time.time()))


__all__ = ["RemoteBuild", "RemoteTrial", "build", "trial", "failed", "drop_name", "DEVICE_ENV", "WORK_ENV"]

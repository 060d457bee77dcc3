"""One lock per (runner, GPU): two triggers on one machine queue, never interleave on one GPU.

The lock is a filelock on `$BISECTOR_LOCK_DIR` (default /tmp/bisector-locks)/<runner>-<kind><index>.lock,
so it also holds between processes started by different workflows on the same runner. Within one
process the lock is re-entrant: a nightly job that holds its GPUs can launch trials that take the
same lock again without waiting on itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from filelock import FileLock, Timeout

from bisector.errors import BisectorError

DEFAULT_DIR = "/tmp/bisector-locks"
_locks: dict[str, FileLock] = {}
_guard = threading.Lock()


class LockTimeout(BisectorError):
    """Waited longer than asked for another job to free a GPU."""


def lock_dir() -> Path:
    return Path(os.environ.get("BISECTOR_LOCK_DIR") or DEFAULT_DIR)


def runner_name() -> str:
    """GitHub Actions names its runner in RUNNER_NAME; elsewhere the host name serves."""
    return os.environ.get("RUNNER_NAME") or socket.gethostname() or "local"


def lock_path(device: str, index: int, runner: str | None = None) -> Path:
    name = re.sub(r"[^\w.-]+", "_", runner or runner_name())
    return lock_dir() / f"{name}-{device}{index}.lock"


def _lock(path: Path) -> FileLock:
    """One FileLock object per path per process: re-entrant across threads of the same job."""
    with _guard:
        if str(path) not in _locks:
            path.parent.mkdir(parents=True, exist_ok=True)
            _locks[str(path)] = FileLock(str(path), thread_local=False)
        return _locks[str(path)]


@contextlib.contextmanager
def gpu_lock(device: str, indices: Sequence[int], runner: str | None = None, timeout_s: float = -1,
             on_wait: Callable[[Path], None] = lambda p: None) -> Iterator[tuple[Path, ...]]:
    """Hold the locks of these devices (sorted, so two jobs never deadlock on each other).

    `on_wait` is called once per lock that is busy, before waiting on it; timeout_s < 0 waits forever.
    """
    paths = tuple(lock_path(device, i, runner) for i in sorted(set(indices)))
    with contextlib.ExitStack() as stack:
        deadline = None if timeout_s < 0 else time.monotonic() + timeout_s
        for path in paths:
            lock = _lock(path)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                on_wait(path)
                left = -1 if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    lock.acquire(timeout=left)
                except Timeout:
                    raise LockTimeout(f"{path}: still held by another job after {timeout_s:g} s") from None
            stack.callback(lock.release)
        yield paths


def config_lock(config: object, **kwargs: object) -> contextlib.AbstractContextManager[tuple[Path, ...]]:
    """The locks of every device a config measures on (`config.device`, `config.devices`)."""
    return gpu_lock(getattr(config, "device"), getattr(config, "devices"), **kwargs)  # type: ignore[arg-type]

"""One lock per GPU of a host: jobs on one machine queue, and never time two trials on one GPU at once.

The lock is a filelock on `$BISECTOR_LOCK_DIR` (default /tmp/bisector-locks)/<kind>-<physical>.lock,
named by the device alone: two runners on one host (each with its own RUNNER_NAME) share GPU 0, so
they share its lock. The index is mapped through this process's own CUDA_VISIBLE_DEVICES /
HIP_VISIBLE_DEVICES, so a bot that sees physical GPUs 2,3 as 0,1 locks 2 and 3. Within one process
the lock is re-entrant: a nightly job that holds its GPUs can run trials that take the same lock
for each device section without waiting on itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

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


def physical_device(device: str, index: int) -> str:
    """The id of a visible device on the host: this process's visibility list maps indices."""
    var = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}.get(device)
    visible = [v.strip() for v in os.environ.get(var, "").split(",") if v.strip()] if var else []
    return visible[index] if index < len(visible) else str(index)


def lock_path(device: str, index: int) -> Path:
    name = re.sub(r"[^\w.-]+", "_", f"{device}-{physical_device(device, index)}")
    return lock_dir() / f"{name}.lock"


def _lock(path: Path) -> FileLock:
    """One FileLock object per path per process: re-entrant across threads of the same job."""
    with _guard:
        if str(path) not in _locks:
            path.parent.mkdir(parents=True, exist_ok=True)
            _locks[str(path)] = FileLock(str(path), thread_local=False)
        return _locks[str(path)]


def device_lock(device: str, index: int) -> FileLock:
    """The (re-entrant, process-wide) lock object of one device, for one device section at a time."""
    return _lock(lock_path(device, index))


@contextlib.contextmanager
def gpu_lock(
    device: str, indices: Sequence[int], timeout_s: float = -1, on_wait: Callable[[Path], None] = lambda p: None
) -> Iterator[tuple[Path, ...]]:
    """Hold the locks of these devices (sorted, so two jobs never deadlock on each other).

    `on_wait` is called once per lock that is busy, before waiting on it; timeout_s < 0 waits forever.
    """
    paths = tuple(lock_path(device, i) for i in sorted(set(indices)))
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
    # config: object keeps this module free of bisector.config
    return gpu_lock(getattr(config, "device"), getattr(config, "devices"), **kwargs)  # type: ignore[arg-type]  # noqa: B009

"""A memory limit on each process tree that runs upstream code, watched from the bot.

A trial that allocated without bound set off the host's OOM killer, which then chose its victims
among other jobs. Address-space limits (RLIMIT_AS) do not work with GPU runtimes, which reserve
huge virtual ranges, and cgroups need privileges a CI runner may lack; so one thread of the bot reads
the resident memory of every watched tree (the root and its descendants, from /proc) a few times a
second and kills a tree's process group as soon as it is over its limit. Where the tree runs in
cgroups of the bot's (bisector/isolation/cgroups.py), their anonymous and tmpfs memory counts too, and
the kernel holds each to a hard limit a margin above this one. A tree that allocates
faster than the poll can overshoot by a fraction of a second's worth, never without bound.

Where /proc is missing (not Linux) nothing is watched.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bisector.isolation.cgroups import held_memory

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
POLL_S = 0.2


def total_memory() -> int:
    """Bytes of RAM on this machine (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


def tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def rss(pid: int) -> int:
    """Resident bytes of one process (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss(pid: int) -> int:
    """Resident bytes of the tree, or, where it runs in the bot's cgroups, the anonymous and tmpfs
    bytes of those (a trial's /dev/shm, an escapee's memory) when that is more."""
    pids = tree(pid)
    return max(sum(rss(p) for p in pids), held_memory(pids))


@dataclass(frozen=True)
class Breach:
    """Why a watched tree was killed."""

    limit: int
    seen: int

    def describe(self) -> str:
        return (
            f"killed: over the memory limit of {self.limit / 2**30:.1f} GiB "
            f"(held {self.seen / 2**30:.1f} GiB, resident or in tmpfs; `protocol.memory_gb` or `build.memory_gb` "
            f"sets it)"
        )


class MemoryWatch:
    """Watches registered trees; `watch(pid, limit)` returns a handle whose `breach` says if it was killed."""

    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self._trees: dict[int, tuple[int, Callable[[], None], list[Breach]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(
        self, pid: int, limit: int, group: int | None = None, kill: Callable[[], None] | None = None
    ) -> list[Breach]:
        """Start watching the tree of `pid`; over `limit` bytes, call `kill`, or SIGKILL process
        group `group` (default: pid's own). The returned list gets the Breach when that happens."""
        box: list[Breach] = []
        if limit <= 0 or not os.path.isdir("/proc"):
            return box
        with self._lock:
            self._trees[pid] = (limit, kill or _killer(group if group is not None else pid, pid), box)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memwatch", daemon=True)
                self._thread.start()
        return box

    def forget(self, pid: int) -> None:
        with self._lock:
            self._trees.pop(pid, None)

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                items = list(self._trees.items())
            for pid, (limit, kill, box) in items:
                used = tree_rss(pid)
                if used > limit and not box:
                    box.append(Breach(limit, used))
                    kill()
            self._wake.wait(self.poll_s)


def _killer(group: int, pid: int) -> Callable[[], None]:
    def kill() -> None:
        for how, target in ((os.killpg, group), (os.kill, pid)):
            try:
                how(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    return kill


def limit_bytes(gb: float, share: int = 1) -> int:
    """`gb` GiB, or when 0, half of this machine's memory over `share` (at least 2 GiB)."""
    if gb:
        return int(gb * 2**30)
    total = total_memory()
    return max(2 * 2**30, total // (2 * share)) if total else 0


WATCH = MemoryWatch()

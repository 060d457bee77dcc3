"""A content-addressed, crash-safe, size-bounded store of build outputs.

Layout under the cache root:

    entries/<key>/            one build: its worktree (`tree/`), pip target (`site/`)
    shared/<key>/             output of a step keyed by pin files (e.g. an LLVM build)
    marks/<kind>-<key>.json   the entry's metadata, written last by atomic rename: without it the
                              entry is garbage; for a shared dir also the manifest it was sealed with
    used/<kind>-<key>         touched on every use: eviction is least-recently-used by its mtime
    logs/<key>/               build logs, kept apart so a wiped or failed entry keeps its logs
    locks/<key>.lock          one file lock per key: two processes never build the same key

Builds happen in place (the final path), not in a temporary dir renamed at the end, because
editable installs and CMake trees record absolute paths. The mark is what makes an entry count,
so a build killed half-way is found incomplete and rebuilt, never used.

An entry is written by code under test (its build steps), so nothing the bot itself writes or
trusts lives in it: a step that planted a link at `.complete.tmp` or `.last_used` in its entry
dir made the bot write a file of the step's choosing. The marks and stamps live in `marks/` and
`used/`, which no step may write, and are written through the bot's own fds of them
(bisector/isolation/safe_fs.py). A shared dir, written by one build, is sealed when that build ends:
its files made read-only and their manifest (`manifest`) kept in its mark; a later build uses it
only while the manifest still holds, and builds it again otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from bisector.isolation.safe_fs import SafeDir

MARKS, USED = "marks", "used"


def digest(*parts: Any) -> str:
    """Stable hash of JSON-able parts (the cache key)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def manifest(path: Path) -> str:
    """A digest of every file, dir and link under `path` as the file system has it: names, kinds,
    sizes, modes, inode numbers and change times (a ctime cannot be set back by a process: any write,
    chmod, rename or replacement moves it). Cheap (stat only), and any change after sealing shows."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            h.update(
                f"{os.path.relpath(full, path)}\0{st.st_mode}\0{st.st_size}\0{st.st_ino}\0"
                f"{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode()
            )
    return h.hexdigest()


def seal(path: Path) -> str:
    """Make every regular file under `path` read-only (links are not followed) and return the
    manifest that holds from now on."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
                if stat.S_ISREG(st.st_mode):
                    os.chmod(full, stat.S_IMODE(st.st_mode) & ~0o222)
            except OSError:
                pass
    return manifest(path)


@dataclass(frozen=True)
class Slot:
    """One cache key's paths. `kind` is "entries" or "shared"."""

    root: Path
    kind: str
    key: str

    @property
    def path(self) -> Path:
        return self.root / self.kind / self.key

    @property
    def log_dir(self) -> Path:
        return self.root / "logs" / self.key

    @property
    def lock(self) -> FileLock:
        return FileLock(str(self.root / "locks" / f"{self.key}.lock"))

    @property
    def _name(self) -> str:
        return f"{self.kind}-{self.key}"

    def _bot_dir(self, name: str) -> SafeDir:
        return SafeDir.open(self.root, name, create=True)

    def is_complete(self) -> bool:
        return bool(self.meta()) and self.path.is_dir()

    def meta(self) -> dict[str, Any]:
        try:
            with self._bot_dir(MARKS) as marks:
                meta: dict[str, Any] = json.loads(marks.read(self._name + ".json"))
                return meta
        except (OSError, ValueError):
            return {}

    def unmark(self) -> None:
        """Stop counting the entry (before it is wiped)."""
        with self._bot_dir(MARKS) as marks:
            marks.remove(self._name + ".json")

    def touch(self) -> None:
        with self._bot_dir(USED) as used:
            used.replace(self._name, b"")

    def last_used(self) -> float:
        try:
            with self._bot_dir(USED) as used:
                return used.mtime(self._name) or 0.0
        except OSError:
            return 0.0

    def finalize(self, meta: dict[str, Any]) -> None:
        """Record size and metadata, then make the entry count: the rename is the commit point."""
        meta = dict(meta, size_bytes=dir_size(self.path), finished_at=time.time())
        with self._bot_dir(MARKS) as marks:
            marks.replace(self._name + ".json", json.dumps(meta, indent=1, sort_keys=True).encode())
        self.touch()


class Cache:
    """Slots under one root plus the size bound. `on_remove` cleans what a plain rmtree cannot
    (a worktree registered in the user's repository)."""

    def __init__(self, root: Path, max_bytes: int, on_remove: Callable[[Path], None] | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.on_remove = on_remove
        for sub in ("entries", "shared", "logs", "locks", MARKS, USED):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def slot(self, kind: str, key: str) -> Slot:
        return Slot(self.root, kind, key)

    def wipe(self, slot: Slot) -> None:
        """Remove an entry's files (the caller holds its lock)."""
        if self.on_remove is not None:
            self.on_remove(slot.path)
        shutil.rmtree(slot.path, ignore_errors=True)  # a sealed dir's read-only files go too: its dirs stay writable

    def complete_slots(self) -> list[tuple[Slot, int, float]]:
        """(slot, size, last-used time) for every complete entry and shared dir."""
        out = []
        for kind in ("entries", "shared"):
            for path in (self.root / kind).iterdir():
                slot = self.slot(kind, path.name)
                if not slot.is_complete():
                    continue
                size = int(slot.meta().get("size_bytes", 0))
                out.append((slot, size, slot.last_used()))
        return out

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.complete_slots())

    def evict(self, keep: frozenset[str] = frozenset()) -> list[str]:
        """Drop least-recently-used entries until under the bound. Entries being built or named
        in `keep` are skipped. Returns the evicted keys."""
        slots = sorted(self.complete_slots(), key=lambda s: s[2])
        total = sum(size for _, size, _ in slots)
        evicted = []
        for slot, size, _ in slots:
            if total <= self.max_bytes:
                break
            if slot.key in keep:
                continue
            lock = slot.lock
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                slot.unmark()  # stop counting it first
                self.wipe(slot)
            finally:
                lock.release()
            total -= size
            evicted.append(slot.key)
        return evicted

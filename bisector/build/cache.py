"""A content-addressed, crash-safe, size-bounded store of build outputs.

Layout under the cache root:

    entries/<key>/            one build: its worktree (`tree/`), pip target (`site/`), meta
    entries/<key>/.complete   written last, by atomic rename; without it the entry is garbage
    shared/<key>/             output of a step keyed by pin files (e.g. an LLVM build)
    logs/<key>/               build logs, kept apart so a wiped or failed entry keeps its logs
    locks/<key>.lock          one file lock per key: two processes never build the same key

Builds happen in place (the final path), not in a temporary dir renamed at the end, because
editable installs and CMake trees record absolute paths. The `.complete` marker is what makes
an entry count, so a build killed half-way is found incomplete and rebuilt, never used.
Eviction is least-recently-used by `.last_used` mtime, bounded by the recorded sizes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout

MARKER = ".complete"
LAST_USED = ".last_used"


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

    def is_complete(self) -> bool:
        return (self.path / MARKER).is_file()

    def meta(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / MARKER).read_text())
        except (OSError, ValueError):
            return {}

    def touch(self) -> None:
        (self.path / LAST_USED).touch()

    def finalize(self, meta: dict[str, Any]) -> None:
        """Record size and metadata, then make the entry count: the rename is the commit point."""
        meta = dict(meta, size_bytes=dir_size(self.path), finished_at=time.time())
        tmp = self.path / (MARKER + ".tmp")
        tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.path / MARKER)
        self.touch()


class Cache:
    """Slots under one root plus the size bound. `on_remove` cleans what a plain rmtree cannot
    (a worktree registered in the user's repository)."""

    def __init__(self, root: Path, max_bytes: int, on_remove: Callable[[Path], None] | None = None) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.on_remove = on_remove
        for sub in ("entries", "shared", "logs", "locks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def slot(self, kind: str, key: str) -> Slot:
        return Slot(self.root, kind, key)

    def wipe(self, slot: Slot) -> None:
        """Remove an entry's files (the caller holds its lock)."""
        if self.on_remove is not None:
            self.on_remove(slot.path)
        shutil.rmtree(slot.path, ignore_errors=True)

    def complete_slots(self) -> list[tuple[Slot, int, float]]:
        """(slot, size, last-used time) for every complete entry and shared dir."""
        out = []
        for kind in ("entries", "shared"):
            for path in (self.root / kind).iterdir():
                slot = self.slot(kind, path.name)
                if not slot.is_complete():
                    continue
                size = int(slot.meta().get("size_bytes", 0))
                try:
                    used = (path / LAST_USED).stat().st_mtime
                except OSError:
                    used = 0.0
                out.append((slot, size, used))
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
                (slot.path / MARKER).unlink(missing_ok=True)  # stop counting it first
                self.wipe(slot)
            finally:
                lock.release()
            total -= size
            evicted.append(slot.key)
        return evicted

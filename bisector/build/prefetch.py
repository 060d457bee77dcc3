"""Background builds: while the GPU measures one commit, the CPU builds the likely next ones.

Threads are enough: a build is subprocesses (git, pip, bash), so the GIL is not in the way, and
the cache's file locks already keep two builders of one key from colliding.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from bisector.model import BuildResult


class SupportsBuild(Protocol):
    def build(self, sha: str, patch: str | None = None) -> BuildResult: ...


class Prefetcher:
    """Wraps a builder: `prefetch` queues builds, `build` returns a finished one or builds now."""

    def __init__(self, builder: SupportsBuild, parallel: int = 1) -> None:
        self.builder = builder
        self._pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="prefetch")
        self._futures: dict[tuple[str, str | None], Future[BuildResult]] = {}

    def prefetch(self, shas: Sequence[str], patch: str | None = None) -> None:
        """Queue builds for `shas`, in order of likelihood; already-queued ones are left alone."""
        for sha in shas:
            key = (sha, patch)
            if key not in self._futures:
                self._futures[key] = self._pool.submit(self.builder.build, sha, patch)

    def build(self, sha: str, patch: str | None = None) -> BuildResult:
        """The build of `sha`: waits for a running prefetch, or runs it now if it was still queued."""
        future = self._futures.pop((sha, patch), None)
        if future is not None and not future.cancel():
            return future.result()
        return self.builder.build(sha, patch)

    def cancel_pending(self) -> None:
        """Drop queued builds the search no longer needs; running ones finish into the cache."""
        for key, future in list(self._futures.items()):
            if future.cancel():
                del self._futures[key]

    def close(self) -> None:
        self.cancel_pending()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bisection_candidates(commits: Sequence[str], lo: int, hi: int, depth: int = 2) -> list[str]:
    """The commits a bisection of `commits[lo..hi]` (both measured) may ask for next, most likely
    first: the midpoint, then the midpoints of both halves, and so on for `depth` levels."""
    out: list[str] = []
    level = [(lo, hi)]
    for _ in range(depth):
        nxt = []
        for a, b in level:
            if b - a < 2:
                continue
            mid = (a + b) // 2
            if commits[mid] not in out:
                out.append(commits[mid])
            nxt += [(a, mid), (mid, b)]
        level = nxt
    return out

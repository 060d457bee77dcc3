"""What keys a build step's shared output: the content of its key files, read the same way from a
worktree (when building) and from a commit's objects (when planning, without a checkout).

A key-file entry is a path relative to the checkout whose last part may hold wildcards
(`thirdparty/llvm-*`). Every entry must match at least one regular file, so a key can follow a pin
that moves from one file to another (FlyDSL's `llvm-hash.txt` became `llvm-build-info.json`)
and still notice when the pin is gone: an entry that matches nothing makes the key missing.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import git

WILDCARDS = frozenset("*?[")
_REGULAR_MODES = (0o100644, 0o100755)


@dataclass(frozen=True)
class StepKey:
    """The (path, sha256) of every file the entries matched, and the entries that matched nothing."""

    files: tuple[tuple[str, str], ...]
    unmatched: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.unmatched


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a key-file entry, or None. Checked when the config is read."""
    if not pattern or pattern != pattern.strip():
        return "must be a non-empty path without surrounding spaces"
    path = PurePosixPath(pattern)
    if path.is_absolute() or "\\" in pattern or any(part in ("..", ".") for part in pattern.split("/")):
        return "must be a relative path inside the checkout (no '..', '.', or backslash)"
    if pattern.endswith("/") or "//" in pattern:
        return "must name files, not a directory"
    if any(c in WILDCARDS for c in str(path.parent)):
        return "wildcards are allowed only in the file name, not in its directories"
    return None


def _split(pattern: str) -> tuple[str, str]:
    path = PurePosixPath(pattern)
    parent = str(path.parent)
    return ("" if parent == "." else parent), path.name


def _key(patterns: Sequence[str], listing: Callable[[str], Mapping[str, Callable[[], bytes]]]) -> StepKey:
    found: dict[str, str] = {}
    unmatched = []
    for pattern in patterns:
        directory, name = _split(pattern)
        entries = listing(directory)
        names = sorted(n for n in entries if fnmatch.fnmatchcase(n, name))
        if not names:
            unmatched.append(pattern)
        for n in names:
            rel = f"{directory}/{n}" if directory else n
            if rel not in found:
                found[rel] = hashlib.sha256(entries[n]()).hexdigest()
    return StepKey(files=tuple(found.items()), unmatched=tuple(unmatched))


def key_from_dir(root: Path, patterns: Sequence[str]) -> StepKey:
    """The key as the files in a worktree (a patch applied, if any) give it."""

    def listing(directory: str) -> dict[str, Callable[[], bytes]]:
        folder = root / directory if directory else root
        if not folder.is_dir():
            return {}
        return {p.name: p.read_bytes for p in folder.iterdir() if p.is_file() and not p.is_symlink()}

    return _key(patterns, listing)


def _blob_bytes(blob: git.Blob) -> bytes:
    data: bytes = blob.data_stream.read()
    return data


def key_from_commit(repo: git.Repo, sha: str, patterns: Sequence[str]) -> StepKey:
    """The key as the commit's objects give it: no checkout, no build."""
    root = repo.commit(sha).tree

    def listing(directory: str) -> dict[str, Callable[[], bytes]]:
        try:
            folder = root / directory if directory else root
        except KeyError:
            return {}
        if not isinstance(folder, git.Tree):
            return {}
        return {b.name: functools.partial(_blob_bytes, b) for b in folder.blobs if b.mode in _REGULAR_MODES}

    return _key(patterns, listing)

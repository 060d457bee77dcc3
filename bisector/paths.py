"""Paths the user gave, made absolute once at the boundary (CLI options, config values).

Why: git runs with cwd=<repo>/.git and builds run inside worktrees, so a relative path that
reaches them resolves somewhere else. A relative --work-dir put every worktree inside the
upstream's .git, every commit was skipped and the run reported "no step".
"""

from __future__ import annotations

import os


def absolute(path: str | os.PathLike[str]) -> str:
    """`~` expanded, made absolute against the current directory and normalized; symlinks are kept
    as the user named them."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def absolute_or_none(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None or os.fspath(path) == "" else absolute(path)

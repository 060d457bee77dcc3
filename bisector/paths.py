"""Paths the user gave, made absolute once at the boundary (CLI options, config values).

Why: git runs with cwd=<repo>/.git and builds run inside worktrees, so a relative path that
reaches them resolves somewhere else. A relative --work-dir put every worktree inside the
upstream's .git, every commit was skipped and the run reported "no step".
"""

from __future__ import annotations

import os
from pathlib import Path


def absolute(path: str | os.PathLike[str]) -> str:
    """`~` expanded, made absolute against the current directory and normalized; symlinks are kept
    as the user named them."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def absolute_or_none(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None or os.fspath(path) == "" else absolute(path)


def shown(path: str | os.PathLike[str], base: str | os.PathLike[str], max_up: int = 1) -> str:
    """`path` as a report under `base` shows it: relative to `base` when that climbs at most `max_up`
    directories (`../upstream` beside a demo's report), else only its last part. A report is read
    on other machines: an absolute path names a directory of the machine it was made on."""
    target, start = absolute(path), absolute(base)
    try:
        rel = os.path.relpath(target, start)
    except ValueError:  # another drive (Windows)
        return os.path.basename(target)
    ups = 0
    for part in rel.split(os.sep):
        if part != os.pardir:
            break
        ups += 1
    return rel if ups <= max_up else os.path.basename(target.rstrip(os.sep)) or target


def work_dir_for(config_name: str, given: str | os.PathLike[str] | None) -> Path:
    """A run's work dir, absolute: the one given, else `<user cache>/bisector/work/<config name>`.
    Absolute because git runs with cwd=<repo>/.git and builds inside worktrees (a relative --work-dir
    put every worktree inside the upstream's .git and skipped every commit)."""
    if given:
        return Path(given).absolute()
    import platformdirs

    return Path(platformdirs.user_cache_dir("bisector")) / "work" / config_name

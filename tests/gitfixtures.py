"""Real git repositories for tests: squash-style and merge-style histories with PR numbers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "Ada Kernel", "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Kernel", "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, **ENV}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def commit_file(repo: Path, name: str, text: str, subject: str, day: int) -> str:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", subject, date=f"2026-08-{day:02d}T12:00:00+00:00")
    return git(repo, "rev-parse", "HEAD")


def squash_history(repo: Path, n: int = 6) -> list[str]:
    """n commits on main, subjects "change k (#900+k)", except the first (no PR)."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "lib.py", "value = 0\n", "initial import", 1)]
    for k in range(1, n):
        shas.append(commit_file(repo, "lib.py", f"value = {k}\n", f"change {k} (#{900 + k})", 1 + k))
    return shas


def merge_history(repo: Path) -> dict[str, str]:
    """main: base -> merge of a feature branch (Merge pull request #950) -> squash (#951)."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    base = commit_file(repo, "a.py", "a = 1\n", "base", 1)
    git(repo, "checkout", "-q", "-b", "feature")
    side = commit_file(repo, "b.py", "b = 1\n", "side work", 2)
    git(repo, "checkout", "-q", "main")
    main2 = commit_file(repo, "a.py", "a = 2\n", "main moves on (#949)", 3)
    git(repo, "merge", "-q", "--no-ff", "feature", "-m", "Merge pull request #950 from ada/feature",
        date="2026-08-04T12:00:00+00:00")
    merge = git(repo, "rev-parse", "HEAD")
    last = commit_file(repo, "a.py", "a = 3\n", "tidy up (#951)", 5)
    return {"base": base, "side": side, "main2": main2, "merge": merge, "last": last}

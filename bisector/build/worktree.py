"""Per-commit git worktrees, made beside the user's checkout and never inside it.

`git worktree add --detach` writes only under `.git/worktrees/` of the user's repository: its
HEAD, index and working files are left alone. Adds and removes are serialized (a thread lock and
a file lock in the cache) because git picks worktree admin names by looking, which races.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import git
from filelock import FileLock

from bisector import gitrepo
from bisector.errors import GitError

_THREAD_LOCK = threading.Lock()


def resolve_commit(repo: git.Repo, ref: str) -> str:
    """Full SHA of `ref`, or RefError. `git rev-parse` in a subprocess: safe from prefetch threads."""
    return gitrepo.resolve(repo, ref).strip()


def tree_hash(repo: git.Repo, sha: str) -> str:
    """The commit's tree: two commits with the same content share one build."""
    return repo.git.rev_parse(f"{sha}^{{tree}}").strip()


class Worktrees:
    """Creates, reuses and removes detached worktrees of `repo` under paths the caller picks."""

    def __init__(self, repo: git.Repo, lock_path: Path) -> None:
        self.repo = repo
        lock_path = Path(lock_path).absolute()
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        self._file_lock = FileLock(str(lock_path))

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        cmd = ["git", *args]
        proc = subprocess.run(cmd, cwd=cwd or self.repo.git_dir, capture_output=True, text=True)
        if proc.returncode != 0:
            raise GitError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        return proc.stdout

    def is_clean_at(self, path: Path, sha: str) -> bool:
        """True when `path` is a worktree checked out at `sha` with nothing changed or built in it."""
        if not (path / ".git").is_file():
            return False
        try:
            head = self._git("rev-parse", "HEAD", cwd=path).strip()
            status = self._git("status", "--porcelain", "--ignored", "--untracked-files=all", cwd=path)
        except GitError:
            return False
        return head == sha and status.strip() == ""

    def ensure(self, path: Path, sha: str) -> bool:
        """Check `sha` out at `path`; reuse a clean one already there. Returns True when reused.

        `path` is made absolute first: git runs in the repository's git dir, where a relative
        path would put the worktree inside `.git`."""
        path = Path(path).absolute()
        if self.is_clean_at(path, sha):
            return True
        self.remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _THREAD_LOCK, self._file_lock:
            self._git("worktree", "add", "--detach", "--force", str(path), sha)
        return False

    def remove(self, path: Path) -> None:
        """Unregister and delete a worktree; tolerant of half-made or already-deleted ones."""
        path = Path(path).absolute()
        with _THREAD_LOCK, self._file_lock:
            if (path / ".git").is_file():
                try:
                    self._git("worktree", "remove", "--force", "--force", str(path))
                except GitError:
                    pass
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
            self._git("worktree", "prune")

    def registered(self) -> list[Path]:
        """Paths of every worktree of the repository (the main checkout included)."""
        out = self._git("worktree", "list", "--porcelain")
        return [Path(line[len("worktree "):]) for line in out.splitlines() if line.startswith("worktree ")]

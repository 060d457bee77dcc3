"""Per-commit git worktrees, made beside the user's checkout and never inside it.

`git worktree add --detach` writes only under `.git/worktrees/` of the user's repository: its
HEAD, index and working files are left alone. Adds and removes are serialized (a thread lock and
a file lock in the cache) because git picks worktree admin names by looking, which races.

A worktree is where build steps (code under test) run and write: its `.git` file may point at a
git dir of theirs whose config runs commands (`core.fsmonitor`, hooks, filters). So git never runs
*in* a worktree: every call runs in the repository's own git dir, with no hook, no fsmonitor and no
system or global config (`git_env`); one that needs a worktree's index (`git apply`) names the
admin dir the bot made and the tree explicitly (`tree_env`), never the tree's `.git`. A tree that a
step may have touched (a killed build's) is never reused: it is deleted and checked out anew.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
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
    return str(repo.git.rev_parse(f"{sha}^{{tree}}")).strip()


# What a git run by the bot must not take from the environment: another repository or tree.
_REPO_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_EXEC_PATH",
)


def git_env(base: Mapping[str, str], safe_dirs: tuple[str, ...] = ()) -> dict[str, str]:
    """`base` for a git the bot runs near code under test: no system or global config file, no
    hook, no fsmonitor (`gitrepo.NO_COMMANDS`), no repository named by the environment. `safe_dirs`:
    the repository's own dirs (their owner may differ from the bot's, as a global safe.directory
    would have allowed)."""
    env = {k: v for k, v in base.items() if k not in _REPO_VARS and not k.startswith("GIT_CONFIG_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    extra = {"safe.directory": safe_dirs[0]} if len(safe_dirs) == 1 else {}
    env.update(gitrepo.quiet_env(extra))
    if len(safe_dirs) > 1:  # several values of one key: GIT_CONFIG_KEY_n repeated
        n = int(env["GIT_CONFIG_COUNT"])
        for i, path in enumerate(safe_dirs):
            env[f"GIT_CONFIG_KEY_{n + i}"], env[f"GIT_CONFIG_VALUE_{n + i}"] = "safe.directory", path
        env["GIT_CONFIG_COUNT"] = str(n + len(safe_dirs))
    return env


class Worktrees:
    """Creates and removes detached worktrees of `repo` under paths the caller picks."""

    def __init__(self, repo: git.Repo, lock_path: Path) -> None:
        self.repo = repo
        self.common_dir = Path(repo.common_dir if hasattr(repo, "common_dir") else repo.git_dir).absolute()
        lock_path = Path(lock_path).absolute()
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        self._file_lock = FileLock(str(lock_path))

    def _safe_dirs(self) -> tuple[str, ...]:
        dirs = [str(self.common_dir)]
        if self.repo.working_tree_dir:
            dirs.append(str(Path(self.repo.working_tree_dir).absolute()))
        return tuple(dirs)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        return git_env(os.environ if base is None else base, self._safe_dirs())

    def _git(self, *args: str) -> str:
        """git in the repository's own git dir (never in a worktree), with `git_env`."""
        cmd = ["git", *args]
        proc = subprocess.run(
            cmd, cwd=self.common_dir, capture_output=True, text=True, env=self.env(), stdin=subprocess.DEVNULL
        )
        if proc.returncode != 0:
            raise GitError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        return proc.stdout

    def ensure(self, path: Path, sha: str) -> bool:
        """Check `sha` out at `path`, afresh: whatever is there (a killed build's tree, which its
        steps may have changed, its `.git` file included) is deleted first, never trusted. Returns
        False (the tree was made now), as every caller's log says.

        `path` is made absolute first: git runs in the repository's git dir, where a relative
        path would put the worktree inside `.git`."""
        path = Path(path).absolute()
        self.remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _THREAD_LOCK, self._file_lock:
            self._git("worktree", "add", "--detach", "--force", str(path), sha)
        return False

    def admin_dir(self, path: Path) -> Path:
        """The git dir the bot made for the worktree at `path` (`.git/worktrees/<name>`), found from
        the repository's side (each admin dir's `gitdir` names its tree), never from the tree's `.git`."""
        target = os.path.realpath(path)  # the tree's dir (never its `.git`, which may be a link)
        root = self.common_dir / "worktrees"
        for admin in sorted(root.iterdir()) if root.is_dir() else ():
            try:
                named = Path((admin / "gitdir").read_text().strip())
            except OSError:
                continue
            if named.name == ".git" and os.path.realpath(named.parent) == target:
                return admin
        raise GitError(f"{path}: not a worktree of {self.common_dir}")

    def tree_env(self, path: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`env` for a git that works on the worktree at `path` (its index, its files): GIT_DIR the
        bot's admin dir, GIT_WORK_TREE the tree, so the tree's own `.git` is not read."""
        return {**self.env(base), "GIT_DIR": str(self.admin_dir(path)), "GIT_WORK_TREE": str(Path(path).absolute())}

    def remove(self, path: Path) -> None:
        """Delete a worktree and unregister it, running no git in it: the tree is deleted as files
        (a symlink put in its place is removed, not followed), then `git worktree prune` drops
        the admin dir whose tree is gone. Tolerant of half-made or already-deleted ones."""
        path = Path(path).absolute()
        with _THREAD_LOCK, self._file_lock:
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path, ignore_errors=True)
            self._git("worktree", "prune")

    def registered(self) -> list[Path]:
        """Paths of every worktree of the repository (the main checkout included)."""
        out = self._git("worktree", "list", "--porcelain")
        return [Path(line[len("worktree ") :]) for line in out.splitlines() if line.startswith("worktree ")]

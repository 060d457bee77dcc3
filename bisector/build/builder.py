"""Build one commit (optionally with a patch on top) into the cache, or find it there.

Where the trial's source lives: each cache entry holds its own git worktree (`<entry>/tree`),
created for that entry and removed only when the entry is evicted or its build fails. So a
`BuildResult.source_dir` stays valid as long as the entry does, editable installs keep pointing
at a path that does not move, and build scripts still see a git checkout (`git describe`, pins).

Recipes:
- `none`: the entry is just the worktree; no toolchain in the key, so a hit costs one rev-parse.
- `pip`: `pip install --target <entry>/site <tree>/<source_dir> <pip_args>`; the trial imports
  from `site/` (source_dir = prefix = site), with the host's torch still on its path. The
  worktree is deleted after the install.
- `command`: each step runs as `bash -c RUN` in the worktree with its env, timeout and log. A step
  with `key_files` writes into a shared dir keyed by the content of the files they match (env var
  `shared_dir`, default BISECTOR_SHARED_DIR, seen by the later steps too) and is skipped when that
  dir is complete: one LLVM build per pin. An entry may end in a wildcard (`thirdparty/llvm-*`),
  so the key follows a pin that moves to another file; an entry that matches nothing fails the
  build (`bisector/config/keyfiles.py`; `bisector plan --config` lists such commits without building).
  Steps also see BISECTOR_SHA, BISECTOR_SOURCE (worktree) and BISECTOR_PREFIX (`<entry>/site`,
  first on PYTHONPATH).

A failed build never raises: its entry is wiped (logs are kept under `logs/<key>/`), and the
failure is remembered for the life of this Builder so a search does not pay for it twice.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict

import git

from bisector.build.cache import Cache, Slot, digest, manifest, seal
from bisector.build.steps import StepOutcome, import_argv, python_path_env, run_step, tail
from bisector.build.worktree import Worktrees, resolve_commit, tree_hash
from bisector.config import DEFAULT_SHARED_ENV, Build, BuildStep, Upstream
from bisector.config.keyfiles import key_from_dir
from bisector.errors import BisectorError, GitError
from bisector.isolation import sandbox
from bisector.isolation.memwatch import limit_bytes
from bisector.isolation.sandbox import sandbox_env
from bisector.model import BuildResult, BuildStatus
from bisector.trust.filter import scrub


@lru_cache(maxsize=1)
def toolchain_fingerprint() -> dict[str, str]:
    """What a compiled build depends on besides the source: compiler, Python, torch."""
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    cc = os.environ.get("CC", "cc")
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        compiler = out.splitlines()[0] if out else cc
    except (OSError, subprocess.TimeoutExpired):
        compiler = "none"
    return {"python": sys.version.split()[0], "executable": sys.executable, "torch": torch, "compiler": compiler}


def patch_hash(patch: str) -> str:
    return hashlib.sha256(patch.encode()).hexdigest()[:16]


def _step_key(step: BuildStep) -> dict[str, Any]:
    # The timeout does not change what a step produces, so it is not part of the key.
    return {
        "run": step.run,
        "env": sorted(step.env.items()),
        "key_files": list(step.key_files),
        "shared_dir": step.shared_dir,
    }


class StepLimits(TypedDict):
    """What each build step's process tree is held to (`run_step`'s keywords)."""

    memory_bytes: int
    max_tasks: int
    network: bool


class Builder:
    """Builds commits of one upstream with one recipe into a cache under `cache_root`."""

    def __init__(self, repo: git.Repo, upstream: Upstream, build: Build, cache_root: Path) -> None:
        self.repo, self.upstream, self.build_cfg = repo, upstream, build
        self.worktrees = Worktrees(repo, Path(cache_root) / "locks" / "worktrees.lock")
        self.cache = Cache(Path(cache_root), int(build.cache_max_gb * 1e9), on_remove=self._remove_tree)
        self.memory_bytes = limit_bytes(build.memory_gb)  # a step's process tree is killed above it
        # each step's cgroup; its network: loopback only unless `[build] network`
        self.limits = StepLimits(memory_bytes=self.memory_bytes, max_tasks=build.max_tasks, network=build.network)
        sandbox.guard_repo(Path(repo.working_tree_dir or repo.git_dir))  # its steps never read a persisted token
        self._failed: dict[str, BuildResult] = {}
        self._memo_lock = threading.Lock()

    # ----- keys

    def recipe_key(self) -> dict[str, Any]:
        b = self.build_cfg
        key: dict[str, Any] = {"recipe": b.recipe, "import_check": b.import_check}
        if b.recipe == "pip":
            key.update(pip_args=list(b.pip_args), source_dir=self.upstream.source_dir)
        if b.recipe == "command":
            key["steps"] = [_step_key(s) for s in b.steps]
        if b.recipe != "none":
            key["toolchain"] = toolchain_fingerprint()
        return key

    def entry_key(self, sha: str, patch: str | None = None) -> str:
        full = resolve_commit(self.repo, sha)
        return digest("entry", tree_hash(self.repo, full), patch_hash(patch) if patch else None, self.recipe_key())

    # ----- public

    def build(self, sha: str, patch: str | None = None) -> BuildResult:
        """The build of `sha` (+ `patch`): from the cache, or built now. RefError for an unknown sha."""
        start = time.monotonic()
        full = resolve_commit(self.repo, sha)
        phash = patch_hash(patch) if patch else None
        key = digest("entry", tree_hash(self.repo, full), phash, self.recipe_key())
        with self._memo_lock:
            if key in self._failed:
                return self._failed[key]
        slot = self.cache.slot("entries", key)
        if slot.is_complete():
            return self._hit(slot, full, phash, start)
        with slot.lock:
            if slot.is_complete():  # another process or thread finished it while we waited
                return self._hit(slot, full, phash, start)
            try:
                result = self._build_locked(slot, full, patch, phash, start)
            finally:
                shutil.rmtree(self._scratch(slot), ignore_errors=True)
            if result.status is BuildStatus.FAILED:
                self.cache.wipe(slot)
                with self._memo_lock:
                    self._failed[key] = result
        self.cache.evict(keep=frozenset({key}))
        return result

    # ----- internals

    def _hit(self, slot: Slot, sha: str, phash: str | None, start: float) -> BuildResult:
        slot.touch()
        meta = slot.meta()
        prefix = meta.get("prefix")
        return BuildResult(
            sha=sha,
            status=BuildStatus.OK,
            source_dir=str(slot.path / meta["source_dir"]),
            prefix=str(slot.path / prefix) if prefix else None,
            log_path=str(slot.log_dir / "build.log"),
            seconds=time.monotonic() - start,
            cache_hit=True,
            patch_hash=phash,
        )

    def _remove_tree(self, entry: Path) -> None:
        if (entry / "tree").exists():
            self.worktrees.remove(entry / "tree")

    def _build_locked(self, slot: Slot, sha: str, patch: str | None, phash: str | None, start: float) -> BuildResult:
        shutil.rmtree(slot.log_dir, ignore_errors=True)
        slot.log_dir.mkdir(parents=True)
        log = slot.log_dir / "build.log"
        log.write_text(f"# build of {sha} patch={phash} recipe={self.build_cfg.recipe}\n")
        tree, site = slot.path / "tree", slot.path / "site"

        def failed(reason: str) -> BuildResult:
            # The reason goes last: reports and progress show the tail's last line, which was
            # otherwise the log's (`# worktree ... (created)`) rather than why the build failed.
            return BuildResult(
                sha=sha,
                status=BuildStatus.FAILED,
                source_dir="",
                log_path=str(log),
                seconds=time.monotonic() - start,
                patch_hash=phash,
                log_tail=f"{tail(log)}\n{reason}".strip(),
            )

        refused = self._fresh_tree(slot, tree, sha, log)
        if refused:
            return failed(refused)
        site.mkdir(parents=True, exist_ok=True)

        if patch is not None:
            outcome = self._apply_patch(slot, tree, patch, log)
            if not outcome.ok:
                return failed(f"patch does not apply: {outcome.reason}")

        source = tree / self.upstream.source_dir
        if not source.is_dir():
            return failed(f"source_dir {self.upstream.source_dir!r} missing in commit {sha[:12]}")
        env = sandbox_env(python_path_env(scrub(os.environ), [str(site)]), self._scratch(slot))  # never a secret
        env.update(
            BISECTOR_SHA=sha, BISECTOR_SOURCE=str(tree), BISECTOR_PREFIX=str(site), PIP_DISABLE_PIP_VERSION_CHECK="1"
        )
        refused = self._run_recipe(slot, tree, source, site, env, log)
        if refused:
            return failed(refused)

        return self._finished(slot, tree, source, site, sha, phash, log, time.monotonic() - start)

    def _finished(
        self, slot: Slot, tree: Path, source: Path, site: Path, sha: str, phash: str | None, log: Path, seconds: float
    ) -> BuildResult:
        """The built slot made final (its manifest written) and what it holds."""
        prefix_rel: str | None
        if self.build_cfg.recipe == "pip":
            self.worktrees.remove(tree)  # the trial imports the installed copy
            source_rel, prefix_rel = "site", "site"
        else:
            source_rel = str(source.relative_to(slot.path))
            prefix_rel = "site" if any(site.iterdir()) else None
        slot.finalize(
            {
                "sha": sha,
                "patch_hash": phash,
                "recipe": self.recipe_key(),
                "source_dir": source_rel,
                "prefix": prefix_rel,
                "build_seconds": seconds,
            }
        )
        return BuildResult(
            sha=sha,
            status=BuildStatus.OK,
            source_dir=str(slot.path / source_rel),
            prefix=str(slot.path / prefix_rel) if prefix_rel else None,
            log_path=str(log),
            seconds=seconds,
            cache_hit=False,
            patch_hash=phash,
        )

    def _fresh_tree(self, slot: Slot, tree: Path, sha: str, log: Path) -> str | None:
        """Why `sha` could not be checked out at `tree`; None once it is. A stale entry (killed build):
        nothing of it is kept; its tree, which its steps may have changed (its `.git` too), is deleted
        and checked out anew by `ensure`."""
        if slot.path.exists():
            for child in slot.path.iterdir():
                if child.name != "tree":
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        try:
            reused = self.worktrees.ensure(tree, sha)
        except GitError as exc:
            return f"checkout failed: {exc}"
        with open(log, "a") as fh:
            fh.write(f"# worktree {tree} ({'reused' if reused else 'created'})\n")
        return None

    def _run_recipe(
        self, slot: Slot, tree: Path, source: Path, site: Path, env: dict[str, str], log: Path
    ) -> str | None:
        """Why the recipe's steps or its import check failed; None when they passed."""
        rw = [slot.path, self._scratch(slot)]  # all that its sandboxed steps may write
        recipe = self.build_cfg.recipe
        if recipe == "pip":
            argv = [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--target",
                str(site),
                *self.build_cfg.pip_args,
                str(source),
            ]
            outcome = run_step(
                "pip", argv, tree, env, 3600.0, slot.log_dir / "01-pip.log", log, **self.limits, writable=rw
            )
            if not outcome.ok:
                return f"pip install failed: {outcome.reason}"
        elif recipe == "command":
            for i, step in enumerate(self.build_cfg.steps, start=1):
                reason = self._run_command_step(slot, i, step, tree, env, log, rw)
                if reason:
                    return reason

        paths = [str(site)] if recipe == "pip" else [str(source), str(site)]
        if self.build_cfg.import_check:
            outcome = run_step(
                "import",
                import_argv(self.build_cfg.import_check),
                slot.path,
                sandbox_env(python_path_env(scrub(os.environ), paths), self._scratch(slot)),
                600.0,
                slot.log_dir / "99-import.log",
                log,
                **self.limits,
                writable=rw,
            )
            if not outcome.ok:
                return f"import failed: {self.build_cfg.import_check}: {outcome.reason}"
        return None

    def _scratch(self, slot: Slot) -> Path:
        """The build's temp dir (TMPDIR): with the entry, all its sandboxed steps may write."""
        return self.cache.root / "scratch" / slot.path.name

    def _apply_patch(self, slot: Slot, tree: Path, patch: str, log: Path) -> StepOutcome:
        patch_file = slot.log_dir / "patch.diff"
        patch_file.write_bytes((patch if patch.endswith("\n") else patch + "\n").encode())
        try:  # git on the tree through the admin dir the bot made, never the tree's own `.git`
            env = self.worktrees.tree_env(tree, scrub(os.environ))
        except GitError as exc:
            return StepOutcome("patch", False, 0.0, str(slot.log_dir / "00-patch.log"), str(exc))
        outcome = run_step(
            "patch",
            ["git", "apply", "--3way", "--whitespace=nowarn", str(patch_file)],
            tree,
            env,
            600.0,
            slot.log_dir / "00-patch.log",
            log,
            **self.limits,
        )
        if outcome.ok:
            return outcome
        text = Path(outcome.log_path).read_text(errors="replace")
        files = re.findall(r"patch failed: (\S+?):\d+", text) + re.findall(r"^U (\S+)$", text, re.M)
        files += re.findall(r"Applied patch to '([^']+)' with conflicts", text)
        files += re.findall(r"error: (\S+): (?:does not exist in index|No such file)", text)
        named = ", ".join(dict.fromkeys(files)) or "see log"
        return StepOutcome(outcome.name, False, outcome.seconds, outcome.log_path, f"conflicts in {named}")

    def _run_command_step(
        self, slot: Slot, i: int, step: BuildStep, tree: Path, env: dict[str, str], log: Path, rw: list[Path]
    ) -> str:
        """Run one step (or reuse its shared output); returns a failure reason or ''."""
        name = f"step {i}: {step.run}"
        step_log = slot.log_dir / f"{i:02d}-step.log"
        argv = ["bash", "-c", step.run]
        if not step.key_files:
            out = run_step(
                name, argv, tree, {**env, **step.env}, step.timeout_s, step_log, log, **self.limits, writable=rw
            )
            return "" if out.ok else f"{name} failed: {out.reason}"
        key = key_from_dir(tree, step.key_files)
        if not key.ok:
            return f"{name}: key files {', '.join(map(repr, key.unmatched))} match nothing in commit"
        contents = [list(pair) for pair in key.files]
        scope = self.shared_scope(slot, env["BISECTOR_SHA"])
        shared = self.cache.slot(
            "shared", digest("shared", _step_key(step), contents, toolchain_fingerprint(), *([scope] if scope else []))
        )
        env[step.shared_dir or DEFAULT_SHARED_ENV] = str(shared.path)  # later steps see it too
        if self._intact(shared):
            shared.touch()
            with open(log, "a") as fh:
                fh.write(f"===== {name}: reused shared output {shared.path} =====\n")
            return ""
        with shared.lock:
            if self._intact(shared):
                shared.touch()
                return ""
            shared.unmark()
            self.cache.wipe(shared)
            shared.path.mkdir(parents=True)
            out = run_step(
                name,
                argv,
                tree,
                {**env, **step.env},
                step.timeout_s,
                step_log,
                log,
                **self.limits,
                writable=[*rw, shared.path],
            )
            if not out.ok:
                self.cache.wipe(shared)
                return f"{name} failed: {out.reason}"
            shared.finalize({"step": _step_key(step), "key_files": contents, "manifest": seal(shared.path)})
        return ""

    def _intact(self, shared: Slot) -> bool:
        """A complete shared dir still as its build sealed it (`cache.seal`): else it is built again."""
        return shared.is_complete() and shared.meta().get("manifest") == manifest(shared.path)

    def shared_scope(self, slot: Slot, sha: str) -> str | None:
        """Who may share a keyed step's output with this build: None for the commits of the
        upstream's branch (merged, reviewed: one LLVM build per pin for a whole range); for any other
        commit (a pull request's head, a fork's) or a patched build of one, its own entry only. A
        step's output is built from the whole tree, not just its key files: shared with the branch,
        a pull request's build of it would be what the branch's commits link against."""
        try:
            tip = resolve_commit(self.repo, self.upstream.branch)  # the branch, or origin/<branch>
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", sha, tip],
                cwd=self.repo.git_dir,
                check=True,
                capture_output=True,
                timeout=120,
            )
        except (BisectorError, OSError, subprocess.SubprocessError):
            return f"own:{slot.key}"
        return None

"""Write the demo upstream: a real git repository of ~40 squash-merged PRs with planted steps.

The whole history goes through one `git fast-import` with fixed authors and dates, so the SHAs
are the same on every machine and every run; the work tree is then checked out at the last
commit (BAD). `DemoManifest` says which commit plays which role, so tests and `bisector demo`
can check what a bisection finds against what was planted.
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from bisector.demo.history import AUTHORS, COMMITS, EXPECTATIONS, SHAPES, START_EPOCH, STEP_S, states
from bisector.demo.templating import render
from bisector.errors import BadInput, GitError

BRANCH = "main"
_TEMPLATES = (
    "README.md",
    "pyproject.toml",
    "docs/kernels.md",
    "tests/test_kernels.py",
    "demolib/__init__.py",
    "demolib/cpu_fa.py",
    "demolib/cpu_gemm.py",
    "demolib/triton_fa.py",
    "demolib/triton_gemm.py",
    "demolib/utils.py",
    "demolib/dispatch.py",
)


class DemoDirError(BadInput):
    """The directory asked for the demo repository is not usable (exists and is not empty)."""


@dataclass(frozen=True)
class Plant:
    role: str
    sha: str
    pr: int
    subject: str
    kind: str  # regression | improvement | wrong | fix | broken | broken_fix
    moves: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)  # device -> shape -> %
    timing: str | None = None  # "kernel" | "latency": the one timing the step shows on; None: both

    def shapes(self, device: str) -> tuple[str, ...]:
        return tuple(self.moves.get(device, {}))


@dataclass(frozen=True)
class DemoManifest:
    """Where the demo repository is and which commits hold the planted changes."""

    path: str
    branch: str
    commits: tuple[str, ...]  # first-parent, oldest first: GOOD .. BAD
    prs: tuple[int, ...]
    subjects: tuple[str, ...]
    plants: Mapping[str, Plant]
    shape_keys: Mapping[str, tuple[str, ...]]  # device -> every shape key of its demo config

    @property
    def good(self) -> str:
        return self.commits[0]

    @property
    def bad(self) -> str:
        return self.commits[-1]

    def sha(self, role: str) -> str:
        return self.plants[role].sha

    def pr(self, role: str) -> int:
        return self.plants[role].pr

    def index(self, role: str) -> int:
        return self.commits.index(self.sha(role))

    def wrong_commits(self) -> tuple[str, ...]:
        """Every commit that returns wrong GEMM results: the bug up to, not including, its fix."""
        return self.commits[self.index("wrong_result") : self.index("wrong_result_fixed")]

    def skipped_commits(self) -> tuple[str, ...]:
        """Commits that do not import: the search must go around them."""
        return self.commits[self.index("broken_import") : self.index("broken_import_fixed")]

    def steps(self, device: str, timing: str = "kernel") -> tuple[Plant, ...]:
        """The performance steps a bisection on `device` should find on `timing` (the config's
        `thresholds.timing`), oldest first."""
        return tuple(
            p
            for p in sorted(self.plants.values(), key=lambda p: self.commits.index(p.sha))
            if p.kind in ("regression", "improvement") and p.shapes(device) and p.timing in (None, timing)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "branch": self.branch,
            "good": self.good,
            "bad": self.bad,
            "commits": len(self.commits),
            "plants": {
                r: {
                    "sha": p.sha,
                    "pr": p.pr,
                    "subject": p.subject,
                    "kind": p.kind,
                    "moves": {d: dict(m) for d, m in p.moves.items()},
                    **({"timing": p.timing} if p.timing else {}),
                }
                for r, p in self.plants.items()
            },
        }


def _template(name: str) -> str:
    return resources.files("bisector.demo").joinpath("templates", name + ".tmpl").read_text()


def _changelog(upto: int) -> str:
    """Written at releases only, as maintainers do: a PR's own diff stays on code, so its revert
    carries cleanly to the tip (a changelog line per PR would make every old revert conflict)."""
    released = max((i for i in range(upto + 1) if "version" in COMMITS[i].changes), default=0)
    lines = ["# Changelog", ""]
    lines += [f"- {c.subject} (#{c.pr})" for c in reversed(COMMITS[: released + 1])]
    return "\n".join(lines) + "\n"


def tree_at(index: int, knobs: Mapping[str, Any], texts: Mapping[str, str]) -> dict[str, str]:
    """Path -> content of commit `index` (pure)."""
    files = {
        name: render(texts[name], knobs, name)
        for name in _TEMPLATES
        if name != "demolib/utils.py" or knobs["utils_file"]
    }
    files["CHANGELOG.md"] = _changelog(index)
    return files


def _fast_import_stream(texts: Mapping[str, str]) -> bytes:
    out: list[bytes] = []
    mark = 0
    blob_marks: dict[bytes, int] = {}
    for i, (spec, knobs) in enumerate(zip(COMMITS, states())):
        entries = []
        for path, text in sorted(tree_at(i, knobs, texts).items()):
            data = text.encode()
            if data not in blob_marks:
                mark += 1
                blob_marks[data] = mark
                out.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
            entries.append(b"M 100644 :%d %s\n" % (blob_marks[data], path.encode()))
        message = f"{spec.subject} (#{spec.pr})\n" + (f"\n{spec.body}\n" if spec.body else "")
        out.append(commit_record(i, 100000, START_EPOCH + i * STEP_S, message, entries))
    return b"".join(out)


def commit_record(i: int, first_mark: int, when: int, message: str, entries: list[bytes]) -> bytes:
    """git fast-import's record of the i-th commit on BRANCH (marks first_mark + i), by the i-th
    author, with `entries` ("M 100644 :mark path") as its whole tree."""
    name, email = AUTHORS[i % len(AUTHORS)]
    who = f"{name} <{email}> {when} +0000".encode()
    msg = message.encode()
    out = b"commit refs/heads/%s\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s" % (
        BRANCH.encode(),
        first_mark + i,
        who,
        who,
        len(msg),
        msg,
    )
    if i:
        out += b"from :%d\n" % (first_mark + i - 1)
    return out + b"deleteall\n" + b"".join(entries) + b"\n"


def _git(dest: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    cmd = ["git", "-c", "init.defaultBranch=" + BRANCH, "-c", "core.autocrlf=false", *args]
    try:
        proc = subprocess.run(cmd, cwd=dest, input=stdin, capture_output=True, env=env)
    except FileNotFoundError:
        raise GitError("git is not installed (needed to write the demo repository)") from None
    if proc.returncode != 0:
        raise GitError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return proc.stdout.decode()


def write_demo_repo(dest: Path, reuse: bool = True) -> DemoManifest:
    """Create the demo repository at `dest` (absent or empty) and return its manifest.

    With `reuse`, a `dest` that already holds this very history (same SHAs: they are reproducible)
    is kept as it is, so that a re-run of `bisector demo` resumes instead of failing."""
    dest = Path(dest).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        if reuse and (dest / ".git").exists():
            with tempfile.TemporaryDirectory() as tmp:
                fresh = _write(Path(tmp) / "repo")
            try:
                head = _git(dest, "rev-parse", "--verify", "-q", f"refs/heads/{BRANCH}").strip()
            except GitError:
                head = ""
            if head == fresh.bad:
                return dataclasses.replace(fresh, path=str(dest))
        raise DemoDirError(f"{dest}: exists and is neither empty nor the demo repository; choose another --dir")
    return _write(dest)


def _write(dest: Path) -> DemoManifest:
    dest.mkdir(parents=True, exist_ok=True)
    texts = {name: _template(name) for name in _TEMPLATES}
    _git(dest, "init", "-q", "-b", BRANCH)
    with tempfile.TemporaryDirectory() as tmp:
        marks = Path(tmp, "marks")
        _git(
            dest,
            "fast-import",
            "--quiet",
            "--done",
            f"--export-marks={marks}",
            stdin=_fast_import_stream(texts) + b"done\n",
        )
        by_mark = dict(line.split() for line in marks.read_text().splitlines())
    commits = tuple(by_mark[f":{100000 + i}"] for i in range(len(COMMITS)))
    _git(dest, "reset", "-q", "--hard", BRANCH)
    plants = {}
    for i, spec in enumerate(COMMITS):
        if spec.role in EXPECTATIONS:
            exp = EXPECTATIONS[spec.role]
            plants[spec.role] = Plant(
                role=spec.role,
                sha=commits[i],
                pr=spec.pr,
                subject=spec.subject,
                kind=exp.kind,
                moves=exp.moves,
                timing=exp.timing,
            )
    return DemoManifest(
        path=str(dest),
        branch=BRANCH,
        commits=commits,
        prs=tuple(c.pr for c in COMMITS),
        subjects=tuple(c.subject for c in COMMITS),
        plants=plants,
        shape_keys=dict(SHAPES),
    )


def export_commit(repo: str | Path, sha: str, dest: Path) -> Path:
    """A commit's files in a plain directory under `dest` (the repository's HEAD and index untouched)."""
    target = dest / sha[:12]
    if not target.exists():
        data = subprocess.run(["git", "archive", "--format=tar", sha], cwd=repo, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(target, filter="data")
    return target

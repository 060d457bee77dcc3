"""`bisector run` and `bisector build` as a user types them: relative paths from another directory,
stderr to a pipe (as in CI logs, nohup or `| tee`), and a range where nothing builds.

A relative --work-dir once put every worktree inside the upstream's .git (git runs there): every
commit was skipped, the reason shown was the build log's first line, and the run said "No step"
with exit 0. With stderr not a terminal, a run printed nothing until the end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitfixtures import commit_file, git

ROOT = Path(__file__).resolve().parents[1]

GEMM = "import torch\n\n\ndef matmul(a, b):\n    return a @ b\n"

CONFIG = """name = "run-cli"
[upstream]
repo = "{repo}"
source_dir = "{source_dir}"
[device]
kind = "cpu"
[control]
backend = "torch"
[subject.gemm]
entry = "lib.gemm:matmul"
adapter = "torch"
[[suites.gemm.shapes]]
name = "m64"
M = 64
N = 64
K = 64
dtype = "fp32"
[protocol]
trials = 2
max_trials = 2
reps = 3
warmup = 0
jit_cache_env = []
[thresholds]
min_step_pct = 50.0
"""


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "lib").mkdir()
    (repo / "lib" / "__init__.py").write_text("")
    git(repo, "add", "lib/__init__.py")
    shas = [commit_file(repo, "lib/gemm.py", GEMM, "add gemm (#1)", 1)]
    shas += [commit_file(repo, f"docs/n{k}.md", f"note {k}\n", f"docs {k} (#{k})", k) for k in (2, 3)]
    return repo, shas


def setup(tmp_path: Path, repo: Path, source_dir: str = ".") -> Path:
    """A config next to the upstream, and an unrelated directory to run from."""
    (tmp_path / "cfg.toml").write_text(CONFIG.format(repo=repo, source_dir=source_dir))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return elsewhere


def bisector(cwd: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "PYTHONPATH": str(ROOT),
        "BISECTOR_LOCK_DIR": str(tmp / "locks"),
    }
    env.pop("BISECTOR_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def worktrees_inside_git_dir(repo: Path) -> list[str]:
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    paths = [line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")]
    return [p for p in paths if Path(p).resolve().is_relative_to((repo / ".git").resolve())]


@pytest.mark.slow
def test_relative_paths_from_another_directory_and_plain_progress_in_a_pipe(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    elsewhere = setup(tmp_path, repo)
    out = bisector(
        elsewhere,
        tmp_path,
        "run",
        "--config",
        "../cfg.toml",
        "--good",
        shas[0],
        "--bad",
        "main",
        "--work-dir",
        "work",
        "--store",
        "state/results.sqlite",
        "--report-dir",
        "report",
        "--no-fixes",
        "--no-hunks",
        "--json",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["skipped"] == [] and result["steps"] == [] and result["probes"] >= 2
    assert (elsewhere / "work" / "builds").is_dir() and (elsewhere / "state" / "results.sqlite").is_file()
    # --json names no directory of this machine: paths relative to where the command ran
    assert (elsewhere / "report" / "report.md").is_file() and result["report"] == "report/report.md"
    assert str(tmp_path) not in out.stdout
    assert worktrees_inside_git_dir(repo) == [] and not (repo / ".git" / "work").exists()

    # stderr is a pipe: plain progress lines naming the commit, the trials and the time left, as
    # they happen (not one live frame at the end), forecast for the real range of 3 commits (three
    # commits of 2 trials, their comparisons, a verification and the whole-change check: under 20;
    # the default range of 40 would start at over 30).
    progress = [line for line in out.stderr.splitlines() if line.startswith("progress: ")]
    shorts = {sha[:7] for sha in shas}
    steps = [
        re.match(
            r"progress: ([0-9a-f]{7}) (build|trial \d+/\d+( \(side by side with [0-9a-f]{7}\))?) \| search \| "
            r"commits \d \| trials (\d+) of ~(\d+) \| elapsed \d+ (s|min) \| eta (\?|~\d+ (s|min))$",
            line,
        )
        for line in progress[:-1]
    ]
    assert steps and all(steps), [line for line, m in zip(progress, steps) if not m]
    assert all(int(m.group(4)) < int(m.group(5)) < 20 for m in steps), progress
    assert {m.group(1) for m in steps} <= shorts and len({m.group(1) for m in steps}) >= 2
    assert any("eta ~" in line for line in progress), progress
    # its last line: the run's counts, as the report's header and --json name them
    assert progress[-1].startswith(f"progress: done: {counts_of(result)}; ") and out.stderr.endswith("\n")
    assert "\x1b[" not in out.stderr  # no terminal control codes in a log


def counts_of(result: dict) -> str:
    """The counts (bisector/store/totals.py) from --json's totals."""
    from bisector.store.totals import CallTotals, RunTotals

    t = dict(result["totals"])
    call = t.pop("this_call")
    return RunTotals(**t, this_call=CallTotals(**call)).counts()


def test_a_range_where_nothing_builds_fails_and_names_the_failure(tmp_path: Path, upstream) -> None:
    """Every build fails (source_dir missing): exit 1 with one error line naming the reason, and the
    reason shown (summary, report, progress) is the failure, not the log's `# worktree` line."""
    repo, shas = upstream
    elsewhere = setup(tmp_path, repo, source_dir="src")
    out = bisector(
        elsewhere,
        tmp_path,
        "run",
        "--config",
        "../cfg.toml",
        "--good",
        shas[0],
        "--bad",
        "main",
        "--work-dir",
        "work",
        "--store",
        "s.sqlite",
        "--report-dir",
        "report",
        "--no-fixes",
    )
    assert out.returncode == 1, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if not line.startswith("progress: ")]
    assert len(errors) == 1 and errors[0].startswith("error: nothing compared: 0 of 3 commits measured, 3 skipped; ")
    assert f"{shas[-1][:7]}: source_dir 'src' missing in commit {shas[-1][:12]}" in errors[0]
    assert f"  skipped {shas[0][:7]}: source_dir 'src' missing in commit {shas[0][:12]}" in out.stdout
    assert any(
        line.startswith(f"progress: {shas[0][:7]} skip: source_dir 'src' missing") for line in out.stderr.splitlines()
    ), out.stderr
    report = (elsewhere / "report" / "report.md").read_text()
    skipped = [line for line in report.splitlines() if line.startswith("- `")]
    assert len(skipped) == 3 and all("source_dir 'src' missing in commit" in line for line in skipped), skipped
    assert "# worktree" not in report


def test_build_with_a_relative_cache_dir_from_another_directory(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    elsewhere = setup(tmp_path, repo)
    out = bisector(
        elsewhere, tmp_path, "build", "--config", "../cfg.toml", "--cache-dir", "builds", "--json", shas[0], shas[-1]
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for row in rows:
        assert Path(row["source_dir"]).is_relative_to(elsewhere / "builds")
        assert (Path(row["source_dir"]) / "lib" / "gemm.py").read_text() == GEMM
    assert worktrees_inside_git_dir(repo) == [] and not (repo / ".git" / "builds").exists()

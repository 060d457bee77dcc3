"""Real git repositories for tests: squash-style and merge-style histories with PR numbers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "Ada Kernel",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Kernel",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
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
    git(
        repo,
        "merge",
        "-q",
        "--no-ff",
        "feature",
        "-m",
        "Merge pull request #950 from ada/feature",
        date="2026-08-04T12:00:00+00:00",
    )
    merge = git(repo, "rev-parse", "HEAD")
    last = commit_file(repo, "a.py", "a = 3\n", "tidy up (#951)", 5)
    return {"base": base, "side": side, "main2": main2, "merge": merge, "last": last}


BENCH_OPS = '''def work(n):
    """Sum of 0..n-1, the slow way: the work the benchmark times."""
    total = 0
    for _ in range({passes}):
        total = 0
        for i in range(n):
            total += i
    return total
'''

BENCH_TEST = """import pytest

from lib.ops import work


@pytest.mark.parametrize("n", [20000])
def test_work(benchmark, n):
    benchmark.extra_info["flops"] = float(n)
    assert benchmark(work, n) == n * (n - 1) // 2
"""


def benchmark_history(repo: Path) -> list[str]:
    """An upstream with its own pytest-benchmark file: 6 commits on main, the 5th (#5) does the
    benchmarked work eight times over (pure Python on a shared 2-core VM varies by up to 2x from
    trial to trial); the others touch docs."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1)]
    (repo / "lib" / "ops.py").write_text(BENCH_OPS.format(passes=1))
    git(repo, "add", "lib/ops.py")
    shas.append(commit_file(repo, "benchmarks/test_ops.py", BENCH_TEST, "ops and their benchmark (#2)", 2))
    for k in (3, 4):
        shas.append(commit_file(repo, f"docs/n{k}.md", f"note {k}\n", f"docs {k} (#{k})", k))
    shas.append(commit_file(repo, "lib/ops.py", BENCH_OPS.format(passes=8), "recompute to be safe (#5)", 5))
    shas.append(commit_file(repo, "docs/n6.md", "note 6\n", "docs 6 (#6)", 6))
    return shas


# A GEMM kernel whose commits plant a step by repeating its work `extra` more times.
PLANTED_MATMUL = """import torch


def matmul(a, b):
    c = a @ b
    for _ in range({extra}):  # planted: the same work again
        c = a @ b
    return c
"""


def gemm_subject(size: int, module: str = "lib.gemm:matmul") -> str:
    """The TOML of a torch GEMM subject `gemm` with one square fp32 shape `m{size}`."""
    return (
        f'[subject.gemm]\nentry = "{module}"\nadapter = "torch"\n'
        f'[[suites.gemm.shapes]]\nname = "m{size}"\nM = {size}\nN = {size}\nK = {size}\ndtype = "fp32"\n'
    )


def cpu_config(
    name: str,
    repo: Path,
    subject: str,
    *,
    trials: int,
    max_trials: int,
    reps: int,
    min_step_pct: float,
    control: str = "torch",
    jit_cache_env: tuple[str, ...] = (),
    extra: str = "",
) -> str:
    """A bisector config for a test upstream on two CPU "devices": the parts every test shares,
    with the subject, its trial counts and the step floor it plants against."""
    jit = ", ".join(f'"{v}"' for v in jit_cache_env)
    return (
        f'name = "{name}"\n[upstream]\nrepo = "{repo}"\n[device]\nkind = "cpu"\nvisible = [0, 1]\n'
        f'[control]\nbackend = "{control}"\n{subject}'
        f"[protocol]\ntrials = {trials}\nmax_trials = {max_trials}\nreps = {reps}\nwarmup = 1\n"
        f"jit_cache_env = [{jit}]\n[thresholds]\nmin_step_pct = {min_step_pct}\nalpha = 0.05\n{extra}"
    )


def bisector_run(
    tmp_path: Path, config: Path, good: str, bad: str, *extra: str, timeout: float = 900, cwd: Path | None = None
) -> dict:
    """`bisector run --json` as a user runs it (a real subprocess), its store, work and report dirs
    under `tmp_path`; asserts it succeeded and returns what it printed."""
    import json
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "run",
            "--config",
            str(config),
            "--good",
            good,
            "--bad",
            bad,
            "--store",
            str(tmp_path / "s.sqlite"),
            "--work-dir",
            str(tmp_path / "work"),
            "--report-dir",
            str(tmp_path / "report"),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)

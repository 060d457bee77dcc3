"""Files the trials never loaded are not searched, end to end: `bisector run` on the CPU (real trial
processes, real patched builds) over a commit that changes one kernel line and also edits a test
file and a benchmark script. Each trial records the checkout files it imported; the hunk search
sets the test and benchmark hunks aside, names them, and measures the one kernel hunk alone. The
same search on a store without import traces (an older bisector's) searches every hunk, as before."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bisector.model import TrialRecord, TrialStatus
from bisector.why import hunks, loaded
from tests.gitfixtures import bisector_run, commit_file, cpu_config, gemm_subject
from tests.gitfixtures import git as run_git

GEMM = """import torch


def matmul(a, b):
    c = a @ b
    for _ in range({loop}):
        c = a @ b
    return c
"""
PAD = "".join(f"PAD_{i} = {i}\n" for i in range(8))
TEST = (
    """from lib.gemm import matmul


def test_matmul():
    import torch
    a = torch.ones({n}, {n})
    assert matmul(a, a).shape == ({n}, {n})

"""
    + PAD
    + """

def test_twice():
    assert {k} > 0
"""
)
BENCH = (
    """import sys

from lib.gemm import matmul

"""
    + PAD
    + """

def main(n={n}):
    return matmul


if __name__ == "__main__":
    main()
"""
)


def test_set_aside_names_unloaded_python_files_only() -> None:
    diff_parts = [
        hunks.Hunk(p, f"diff --git a/{p} b/{p}\n", "@@ -1 +1 @@", "-a\n+b\n")
        for p in ("lib/gemm.py", "tests/test_gemm.py", "benchmark/bench.py", "README.md", "csrc/k.cu")
    ]
    record = lambda sha, files: TrialRecord(sha, "gemm/a", TrialStatus.OK, protocol={"imported": files})  # noqa: E731
    files = loaded.loaded_files([record("p", ["lib/__init__.py", "lib/gemm.py"])], [record("c", ["lib/gemm.py"])])
    aside = loaded.set_aside(diff_parts, files)
    # a README or a CUDA source may be read without an import: searched as before
    assert aside.kept == (0, 3, 4) and aside.files == ("tests/test_gemm.py", "benchmark/bench.py")
    # no trace on one side (an older store): nothing set aside
    assert loaded.loaded_files([TrialRecord("p", "gemm/a", TrialStatus.OK)], [record("c", ["x.py"])]) is None
    assert loaded.set_aside(diff_parts, None).kept == (0, 1, 2, 3, 4)
    # an installed package's path matches the checkout's (src/ layout)
    assert loaded.set_aside(diff_parts[:2], frozenset({"gemm.py"})).kept == (0,)
    assert loaded.set_aside(
        [hunks.Hunk("src/lib/gemm.py", "", "@@ -1 +1 @@", ""), diff_parts[1]], frozenset({"lib/gemm.py"})
    ).kept == (0,)


@pytest.mark.slow
def test_the_hunks_of_files_no_trial_loaded_are_set_aside(tmp_path: Path) -> None:
    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1)
    commit_file(repo, "tests/test_gemm.py", TEST.format(n=4, k=1), "tests (#2)", 2)
    commit_file(repo, "benchmark/bench_gemm.py", BENCH.format(n=64), "bench (#3)", 3)
    good = commit_file(repo, "lib/gemm.py", GEMM.format(loop=0), "add gemm (#4)", 4)
    (repo / "tests" / "test_gemm.py").write_text(TEST.format(n=8, k=2))
    (repo / "benchmark" / "bench_gemm.py").write_text(BENCH.format(n=128))
    run_git(repo, "add", "-A")
    bad = commit_file(repo, "lib/gemm.py", GEMM.format(loop=6), "repeat the product (#5)", 5)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(cpu_config("aside-test", repo, gemm_subject(384), trials=3, max_trials=8, reps=5, min_step_pct=10.0))
    result = bisector_run(tmp_path, cfg, good, bad, "--no-fixes")
    assert [s["commit"] for s in result["steps"]] == [bad]
    (h,) = result["hunks"]
    assert h["aside"] == ["benchmark/bench_gemm.py", "tests/test_gemm.py"], h  # in the diff's order
    assert h["of"] == 4 and h["alone"] and h["hunks"] == ["lib/gemm.py @@ -3,6 +3,6 @@"], h
    assert h["summary"] == (
        "1 of 4 hunks carry the step alone; not loaded by any trial: benchmark/bench_gemm.py, tests/test_gemm.py"
    ), h
    report = (tmp_path / "report" / "report.md").read_text()
    assert "not loaded by any trial: benchmark/bench_gemm.py, tests/test_gemm.py (3 hunks set aside)" in report
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        imported = {
            json.dumps(json.loads(p).get("imported"))
            for (p,) in db.execute("SELECT protocol FROM trials WHERE patch_hash IS NULL OR patch_hash = ''")
        }
        patches = db.execute("SELECT COUNT(DISTINCT patch_hash) FROM trials WHERE patch_hash != ''").fetchone()[0]
    assert imported == {json.dumps(["lib/__init__.py", "lib/gemm.py"])}
    assert patches == 1  # only the kernel's hunk was built, measured once against the parent

"""The whole-hunk fallback, end to end: a culprit whose threading base passes every check made
from the text but does not run (its plumbing reads `knobs.REPEAT`, an attribute only a
behaviour-changing hunk of another file defines: AttributeError when the trial imports it), run
through `bisector run` on the CPU (real trials, real patched builds). On two real LayerNorm
culprits the base did not run and nothing was searched ("cannot split"); now the hunks are searched
whole, and the finding says so and names the three hunks that carry the step (not the fourth)."""

from __future__ import annotations

from pathlib import Path

import git as gitpython
import pytest

from bisector import gitrepo
from bisector.why import hunk_checks, hunk_groups, hunks
from tests.gitfixtures import bisector_run, commit_file, cpu_config, gemm_subject, git

KERNEL_OLD = """def body(a, b, reps):
    c = a @ b
    for _ in range(reps):
        c = a @ b
    return c
{pad}

def describe():
    return "gemm"
"""
KERNEL_NEW = """def body(a, b, reps, extra):
    c = a @ b
    for _ in range(reps + extra):
        c = a @ b
    return c
{pad}

def describe():
    return "gemm, repeated"
"""
GEMM_OLD = "from lib import kernel, knobs\n\n\ndef matmul(a, b):\n    return kernel.body(a, b, 0)\n"
GEMM_NEW = (
    "from lib import kernel, knobs\n\n\ndef matmul(a, b):\n    extra = knobs.REPEAT\n"
    "    return kernel.body(a, b, 0, extra)\n"
)
PAD = "".join(f"\n\nP{i} = {i}" for i in range(6))


def write(root: Path) -> str:
    """Parent and culprit: the culprit repeats the product `knobs.REPEAT` (= 6) more times."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    commit_file(root, "lib/__init__.py", "", "init", 1)
    commit_file(root, "lib/knobs.py", "SCALE = 1\n", "knobs", 2)
    commit_file(root, "lib/kernel.py", KERNEL_OLD.format(pad=PAD), "kernel", 3)
    commit_file(root, "lib/gemm.py", GEMM_OLD, "gemm", 4)
    (root / "lib/knobs.py").write_text("SCALE = 1\nREPEAT = SCALE * 6\n")
    (root / "lib/kernel.py").write_text(KERNEL_NEW.format(pad=PAD))
    git(root, "add", "-A")
    return commit_file(root, "lib/gemm.py", GEMM_NEW, "repeat the product (#7)", 5)


def test_the_base_passes_the_text_checks_yet_reads_what_only_behaviour_defines(tmp_path: Path) -> None:
    root = tmp_path / "up"
    sha = write(root)
    repo = gitpython.Repo(root)
    parts = hunks.split(gitrepo.commit_diff(repo, sha))
    old = lambda p: gitrepo.file_at(repo, f"{sha}^", p)  # noqa: E731
    new = lambda p: gitrepo.file_at(repo, sha, p)  # noqa: E731
    groups = hunk_groups.group(parts, old, new)
    plan = hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)
    assert len(parts) == 4 and plan is not None and not plan.base_error
    assert "extra = knobs.REPEAT" in plan.patch(()) and "REPEAT = SCALE" not in plan.patch(())


@pytest.mark.slow
def test_bisector_run_searches_whole_hunks_when_the_base_does_not_run(tmp_path: Path) -> None:
    root = tmp_path / "up"
    sha = write(root)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        cpu_config(
            "whole-test",
            root,
            gemm_subject(384),
            trials=3,
            max_trials=8,
            reps=5,
            min_step_pct=10.0,
            extra="[build]\nmax_hunk_builds = 12\n",
        )
    )
    (h,) = bisector_run(tmp_path, cfg, f"{sha}^", sha, "--no-fixes", timeout=1500)["hunks"]
    assert "the threading base did not build or run" in h["summary"] and "AttributeError" in h["summary"], h
    assert "searched whole hunks instead" in h["summary"] and not h["summary"].startswith("cannot split"), h
    # the three hunks the step needs, whole; the describe() edit is left out
    assert sorted(h["hunks"]) == sorted(
        ["lib/gemm.py @@ -2,4 +2,5 @@", "lib/kernel.py @@ -1,6 +1,6 @@", "lib/knobs.py @@ -1 +1,2 @@"]
    ), h
    assert h["of"] == 4 and "plumbing" not in h, h

"""A threading base closed over the names it reads, on a real git history shaped like two real
LayerNorm culprits (written for these tests): the launch gains `acc=acc` (threading), the kernel a
parameter `acc`, and `acc` is computed in the caller by a statement of its own (behaviour). A
file-wide name check saw `acc` bound (the kernel's parameter) and let the base hold the launch
without the assignment: the base raised NameError when it ran and nothing was searched. Checked per
scope, the assignment joins the base, and the base runs in a fresh Python process.

Also: a data file of a benchmark directory is set aside (no trial reads it as code), and a finding
whose base did not run says it searched whole hunks instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import git as gitpython

from bisector import gitrepo
from bisector.why import hunk_calls, hunk_checks, hunk_groups, hunk_plumbing, hunks, loaded
from tests.gitfixtures import commit_file, git

PAD = "".join(f"    p{i} = {i}\n" for i in range(8))
TOP = "".join(f"T{i} = {i}\n" for i in range(8))


def _ln(new: bool) -> str:
    sig = "def kernel(x, out, n, dtype, acc):\n" if new else "def kernel(x, out, n, dtype):\n"
    use = "        out[i] = x[i] * 2 + (acc == 'f32')\n" if new else "        out[i] = x[i] * 2\n"
    acc = "    acc = 'f32' if dtype == 'f16' else dtype\n" if new else ""
    launch = "    kernel(x, out, n, dtype=dtype, acc=acc)\n" if new else "    kernel(x, out, n, dtype=dtype)\n"
    return (f"def jit(fn):\n    return fn\n\n\n@jit\n{sig}{PAD}    for i in range(n):\n{use}\n\n{TOP}\n\n"
            f"def backward(x):\n    n = len(x)\n    out = [0.0] * n\n    dtype = 'f16'\n{PAD}{acc}{launch}"
            f"    return out\n")


def culprit(root: Path) -> str:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    commit_file(root, "lib/__init__.py", "", "init", 1)
    commit_file(root, "lib/ln.py", _ln(False), "layer norm", 2)
    commit_file(root, "benchmark/data/all.csv", "kernel,ms\nln,1.0\n", "data", 3)
    (root / "benchmark/data/all.csv").write_text("kernel,ms\nln,0.5\n")
    git(root, "add", "-A")
    return commit_file(root, "lib/ln.py", _ln(True), "layer norm: f32 accumulation", 4)


def test_the_base_binds_every_name_it_reads_and_runs(tmp_path: Path) -> None:
    root = tmp_path / "up"
    sha = culprit(root)
    repo = gitpython.Repo(root)
    every = hunks.split(gitrepo.commit_diff(repo, sha))
    aside = loaded.set_aside(every, None)
    parts = tuple(every[i] for i in aside.kept)
    assert aside.files == ("benchmark/data/all.csv",) and {h.path for h in parts} == {"lib/ln.py"}
    old = lambda p: gitrepo.file_at(repo, f"{sha}^", p)  # noqa: E731
    new = lambda p: gitrepo.file_at(repo, sha, p)  # noqa: E731
    groups = hunk_groups.group(parts, old, new)
    plan = hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)
    assert plan is not None and not plan.base_error
    based = hunk_plumbing.apply_text(old("lib/ln.py"), plan.hunks_of(()))
    assert "acc=acc" in based and "acc = 'f32'" in based  # the launch's value came with it
    assert hunk_calls._unbound(__import__("ast").parse(based)) == set()
    tree = tmp_path / "tree"
    git(root, "worktree", "add", "-q", "--detach", str(tree), f"{sha}^")
    (tree / "lib/ln.py").write_text(based)
    run = subprocess.run([sys.executable, "-c", "import lib.ln; print(lib.ln.backward([1.0, 2.0]))"], cwd=tree,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-500:]
    assert any("acc == 'f32'" in "".join(parts[p.hunk].body.splitlines(keepends=True)[i] for i in p.keep or ())
               or (p.keep is None and "acc == 'f32'" in parts[p.hunk].body) for p in plan.pieces)


def test_a_name_bound_only_in_another_function_is_unbound_here() -> None:
    text = ("def k(x, acc):\n    return x + acc\n\n\ndef caller(x):\n    dx, DW = x, x\n    return dx\n\n\n"
            "def launch(x):\n    return k(x, acc=acc) + DW\n")
    assert hunk_calls._unbound(__import__("ast").parse(text)) == {"acc", "DW"}
    ok = "class C:\n    n = 1\n\n    def f(self):\n        return [y for y in range(2)], lambda z: z, self.n\n"
    assert hunk_calls._unbound(__import__("ast").parse(ok)) == set()


def test_data_files_are_set_aside_without_a_trace_and_beside_no_loaded_file_with_one() -> None:
    parts = [hunks.Hunk(p, "", "@@ -1 +1 @@", "-a\n+b\n") for p in
             ("benchmark/data/all.csv", "src/pkg/ops/ln.py", "src/pkg/ops/tuned.json", "docs/ln.md", "csrc/k.cu")]
    assert loaded.set_aside(parts, None).files == ("benchmark/data/all.csv",)
    traced = loaded.set_aside(parts, frozenset({"pkg/ops/ln.py"}))
    assert traced.files == ("benchmark/data/all.csv", "docs/ln.md") and traced.kept == (1, 2, 4)


def test_a_finding_whose_base_did_not_run_says_it_searched_whole_hunks() -> None:
    from bisector.why.culprit_hunks import HunkFinding

    f = HunkFinding("a" * 40, 4, ("lib/ln.py @@ -20,7 +20,8 @@",), True, (),
                    base_failed="did not build or run (NameError: name 'acc' is not defined)")
    assert f.summary == ("1 of 4 hunks carry the step alone; the threading base did not build or run (NameError: "
                         "name 'acc' is not defined); searched whole hunks instead")

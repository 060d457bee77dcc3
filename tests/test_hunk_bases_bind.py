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
    return (
        f"def jit(fn):\n    return fn\n\n\n@jit\n{sig}{PAD}    for i in range(n):\n{use}\n\n{TOP}\n\n"
        f"def backward(x):\n    n = len(x)\n    out = [0.0] * n\n    dtype = 'f16'\n{PAD}{acc}{launch}"
        f"    return out\n"
    )


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
    run = subprocess.run(
        [sys.executable, "-c", "import lib.ln; print(lib.ln.backward([1.0, 2.0]))"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-500:]
    assert any(
        "acc == 'f32'" in "".join(parts[p.hunk].body.splitlines(keepends=True)[i] for i in p.keep or ())
        or (p.keep is None and "acc == 'f32'" in parts[p.hunk].body)
        for p in plan.pieces
    )


def test_a_name_bound_only_in_another_function_is_unbound_here() -> None:
    text = (
        "def k(x, acc):\n    return x + acc\n\n\ndef caller(x):\n    dx, DW = x, x\n    return dx\n\n\n"
        "def launch(x):\n    return k(x, acc=acc) + DW\n"
    )
    assert hunk_calls._unbound(__import__("ast").parse(text)) == {"acc", "DW"}
    ok = "class C:\n    n = 1\n\n    def f(self):\n        return [y for y in range(2)], lambda z: z, self.n\n"
    assert hunk_calls._unbound(__import__("ast").parse(ok)) == set()


def test_data_files_are_set_aside_without_a_trace_and_beside_no_loaded_file_with_one() -> None:
    parts = [
        hunks.Hunk(p, "", "@@ -1 +1 @@", "-a\n+b\n")
        for p in ("benchmark/data/all.csv", "src/pkg/ops/ln.py", "src/pkg/ops/tuned.json", "docs/ln.md", "csrc/k.cu")
    ]
    assert loaded.set_aside(parts, None).files == ("benchmark/data/all.csv",)
    traced = loaded.set_aside(parts, frozenset({"pkg/ops/ln.py"}))
    assert traced.files == ("benchmark/data/all.csv", "docs/ln.md") and traced.kept == (1, 2, 4)


def test_a_finding_whose_base_did_not_run_says_it_searched_whole_hunks() -> None:
    from bisector.why.culprit_hunks import HunkFinding

    f = HunkFinding(
        "a" * 40,
        4,
        ("lib/ln.py @@ -20,7 +20,8 @@",),
        True,
        (),
        base_failed="did not build or run (NameError: name 'acc' is not defined)",
    )
    assert f.summary == (
        "1 of 4 hunks carry the step alone; the threading base did not build or run (NameError: "
        "name 'acc' is not defined); searched whole hunks instead"
    )


def test_a_local_read_before_any_binding_is_refused_and_a_guarded_one_is_not() -> None:
    """Two real LayerNorm culprits' subsets raised UnboundLocalError when run: a launch still passing
    `DW` after the piece that allocated it was kept, and a loop's `dw_row += ...` without its
    `dw_row = tl.zeros(...)`. A read in a branch may never run: not an error."""
    text = (
        "def launch(x, n):\n    k(x, DW)\n    DW = x\n    for i in range(n):\n        acc += i\n    acc = 0\n"
        "    for i in range(n):\n        if i:\n            use(prev)\n        prev = i\n    return DW, acc\n"
    )
    tree = __import__("ast").parse(text)
    assert hunk_calls._unassigned(tree) == {"DW", "acc"}
    assert any(
        e.startswith("local variable 'DW' is read before it is bound (UnboundLocalError")
        for _, e in hunk_calls.call_errors({"m.py": text})
    )
    # a @jit kernel keeps no name a loop binds: `w` after the loop that loads it does not compile
    kernel = (
        "@triton.jit\ndef k(X, n):\n    acc = 0\n    for i in range(n):\n        w = tl.load(X)\n"
        "        acc += w\n    w_f32 = w.to(tl.float32)\n    return acc\n"
    )
    assert hunk_calls._unassigned(__import__("ast").parse(kernel)) == {"w"}
    assert hunk_calls._unassigned(__import__("ast").parse(kernel.replace("@triton.jit\n", ""))) == set()


def test_a_pointer_moved_in_place_is_tied_to_the_statements_that_read_it() -> None:
    """`Mean_ptr += row * stride` removed while the store that reads `Mean_ptr` stays: built apart,
    a real culprit's subset wrote every row's mean to row 0 (wrong results). An augmented
    assignment binds its name, so the two pieces are one."""
    from bisector.why.hunk_checks import _BOUND

    assert _BOUND.match("    Mean_ptr += row_idx * stride") and _BOUND.match("    x //= 2")
    assert not _BOUND.match("    if x == 1:") and not _BOUND.match("    y <= 2")


KERNEL_OLD = (
    "def jit(fn):\n    return fn\n\n\n@jit\ndef kernel(X, W, out, n):\n    for i in range(n):\n"
    "        w = W[0]\n        out[i] = X[i] * w\n    return out\n"
)
KERNEL_NEW = (
    "def jit(fn):\n    return fn\n\n\n@jit\ndef kernel(X, W, out, n):\n    w = W[0]\n    w_f32 = float(w)\n"
    "    for i in range(n):\n        out[i] = X[i] * w_f32\n    return out\n"
)


def test_a_base_assignment_reading_what_only_the_rewrite_binds_is_searched_not_closed_over(tmp_path: Path) -> None:
    """A real LayerNorm culprit's base held `w_f32 = w.to(tl.float32)` (plumbing: a new name given a
    passed value) where only the rewritten kernel binds `w`; closing the base over that binding
    pulled both rewritten kernels into the base, which then gave wrong results. The assignment is
    searched instead, tied to the statement that reads it; the base stays threading."""
    from bisector.why import hunk_checks

    root = tmp_path / "up"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit_file(root, "k.py", KERNEL_OLD, "kernel", 1)
    sha = commit_file(root, "k.py", KERNEL_NEW, "kernel: w loaded once", 2)
    parts = hunks.split(gitrepo.commit_diff(gitpython.Repo(root), sha))
    found = hunk_plumbing.pieces_of(parts, lambda p: KERNEL_OLD, lambda p: KERNEL_NEW)
    assert [p.plumbing for p in found] == [False, True, False, False]  # `w_f32 = float(w)` reads as plumbing
    plan = hunk_plumbing.Plan(tuple(parts), (found[1],), (found[0], found[2], found[3]))
    assert "local variable 'w' is read before it is bound" in plan.compile_error(
        (), lambda p: KERNEL_OLD, lambda p: KERNEL_NEW
    )
    fixed = hunk_checks.checked(plan, lambda p: KERNEL_OLD, lambda p: KERNEL_NEW)
    assert fixed.base == () and not fixed.base_error
    assert any(
        p.keep and set(found[1].keep) <= set(p.keep) and set(found[3].keep) <= set(p.keep) for p in fixed.pieces
    )  # searched with `out[i] = X[i] * w_f32`, which reads it

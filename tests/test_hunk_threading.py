"""Threading as the base when the threaded name is also used in new code, on a real git history
(tests/threading_fixture.py): the threading hunks (signatures, `__slots__`, ten call sites, two of
which pass the new value as an expression) are applied as the base, the address helper's statements
are searched, and no subset that would raise TypeError for a missing argument is ever built. Every
subset is applied with `git apply` in a real worktree and run in a fresh Python process."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import git
import pytest

from bisector import gitrepo
from bisector.why import hunk_calls, hunk_checks, hunk_groups, hunk_plumbing, hunks
from tests import threading_fixture


@pytest.fixture()
def culprit(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "up"
    return root, threading_fixture.write(root)


def sources(root: Path, sha: str):
    repo = git.Repo(root)
    return (lambda p: gitrepo.file_at(repo, f"{sha}^", p)), (lambda p: gitrepo.file_at(repo, sha, p))


def planned(root: Path, sha: str):
    parts = hunks.split(gitrepo.commit_diff(git.Repo(root), sha))
    old, new = sources(root, sha)
    groups = hunk_groups.group(parts, old, new)
    return parts, groups, hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)


class Runs:
    """The parent with a patch applied in a real worktree, `lib.api.run()` in a fresh process."""

    def __init__(self, root: Path, sha: str, tree: Path) -> None:
        self.sha, self.tree, self.errors = sha, tree, []
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), f"{sha}^"], cwd=root, check=True)

    def value(self, patch: str, ref: str | None = None) -> float | None:
        subprocess.run(["git", "checkout", "-q", "--force", ref or f"{self.sha}^"], cwd=self.tree, check=True)
        if patch:
            (self.tree / ".p.diff").write_text(patch)
            subprocess.run(["git", "apply", ".p.diff"], cwd=self.tree, check=True, capture_output=True)
            (self.tree / ".p.diff").unlink()
        proc = subprocess.run(
            [sys.executable, "-c", "import lib.api; print(lib.api.run())"],
            cwd=self.tree,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode:
            self.errors.append(proc.stderr.strip().splitlines()[-1])
            return None
        return float(proc.stdout)


def test_threading_is_the_base_and_the_helper_is_searched(culprit) -> None:
    root, sha = culprit
    parts, groups, plan = planned(root, sha)
    # Grouping by names ties the threading and the helper into one group of most of the commit.
    assert max(len(g.members) for g in groups) > len(parts) / 2
    assert plan is not None and not plan.base_error and not plan.unsplit
    threading = {parts[i].path for i in plan.plumbing_hunks}
    assert len(plan.plumbing_hunks) == 11 and threading == {"lib/api.py", "lib/meta.py"}
    # The two call sites that pass an expression are threading too: the class's __init__ widened.
    assert all(parts[i].path == "lib/api.py" for i in range(10)) and set(range(10)) <= set(plan.plumbing_hunks)
    # searched: the helper's two statements, tied (the return reads what the new line binds), and
    # the decorator's do_not_specialize list
    assert [p.label for p in plan.pieces] == [
        "lib/kernel.py @@ -5,10 +5,11 @@ lines +11-12",
        "lib/kernel.py @@ -20,7 +21,7 @@ lines +24",
    ]
    text = ["".join(parts[p.hunk].body.splitlines(keepends=True)[i] for i in p.keep or ()) for p in plan.pieces]
    assert "+    pages = [r * kv_stride for r in rows]" in text[0] and "-    return [r * stride" in text[0]
    assert "+    return [p + c" in text[0] and '+@jit(do_not_specialize=["n", "kv_stride"])' in text[1]


def test_the_search_names_the_helper_and_never_builds_a_type_error(culprit, tmp_path: Path) -> None:
    root, sha = culprit
    parts, _, plan = planned(root, sha)
    assert plan is not None
    old, new = sources(root, sha)
    runs = Runs(root, sha, tmp_path / "tree")
    before, after = runs.value(""), runs.value("", ref=sha)
    assert before != after
    assert runs.value(plan.patch(())) == before  # the threading alone changes nothing

    def carries(subsets):
        out = []
        for subset in subsets:
            if plan.compile_error(subset, old, new):
                out.append(None)  # never built
                continue
            got = runs.value(plan.patch(subset))
            out.append(None if got is None else got == after)
        return out

    found = hunks.search(len(plan.pieces), carries)
    assert runs.errors == []  # no subset built raised (TypeError or anything else)
    assert [plan.pieces[i].label for i in found.found] == ["lib/kernel.py @@ -5,10 +5,11 @@ lines +11-12"]
    assert found.alone and not found.unresolved
    # Cut apart, the helper's return without the assignment it reads would raise NameError: such a
    # subset is refused before it is built.
    cut = hunk_plumbing.Plan(
        plan.parts, plan.base, tuple(p for p in hunk_plumbing.pieces_of(parts, old, new) if not p.plumbing)
    )
    alone = next(i for i, p in enumerate(cut.pieces) if p.label.endswith("lines +12"))
    assert "name 'pages' is not defined" in cut.compile_error((alone,), old, new)
    assert runs.value(plan.patch(found.found)) == after


def test_a_base_missing_call_sites_is_closed_over_them(culprit) -> None:
    """Where the threading rule misses call sites (here: moved out of the base by hand), the base
    would raise TypeError; the check says so before anything is built, and `checked` moves the call
    sites that the widened constructor needs into the base."""
    root, sha = culprit
    _parts, _, plan = planned(root, sha)
    assert plan is not None
    old, new = sources(root, sha)
    inline = tuple(p for p in plan.base if p.hunk in (8, 9))
    broken = replace(plan, base=tuple(p for p in plan.base if p not in inline), pieces=(*inline, *plan.pieces))
    assert "would not run: lib/api.py: LaunchMeta() missing 1 required argument" in broken.compile_error((), old, new)
    fixed = hunk_checks.checked(broken, old, new)
    assert not fixed.base_error and {p.hunk for p in fixed.pieces} == {p.hunk for p in plan.pieces}
    assert fixed.compile_error((), old, new) == ""


def test_call_binding_says_what_python_would() -> None:
    text = (
        "from triton import autotune, jit\n\nclass M:\n    def __init__(self, a, b, *, c, d=1):\n        pass\n\n"
        "def f(x, y=2):\n    pass\n\n@autotune(configs=[])\n@jit\ndef k(p, BLOCK):\n    pass\n\nxs = ()\n"
        "M(1, 2, c=3)\nf(1)\nf(1, 2, 3)\nf(1, x=2)\nf(1, z=3)\nM(1, c=2)\nk[(1,)](1, num_warps=4)\nf(*xs)\n"
        "def g():\n    return pages\n"
    )
    errors = sorted(e for _, e in hunk_calls.call_errors({"m.py": text}))
    assert errors == [
        "M() missing 1 required argument: 'b'",
        "f() got an unexpected keyword argument 'z'",
        "f() got multiple values for argument 'x'",
        "f() takes 2 positional arguments but 3 were given",
        "name 'pages' is not defined (NameError)",
    ]
    for line, message in [("M(1, 2, c=3)", "missing 1 required"), ("f(1)", "takes 2")]:
        assert not any(
            message in e
            for _, e in hunk_calls.call_errors({"m.py": text.split("\nM(1, 2, c=3)")[0] + "\n" + line + "\n"})
        )
    # a plain @jit kernel's launch fills every parameter (only an autotuner fills constexprs); its
    # `**kernel_args` carry launch options; too many positionals, or a repeat, fail either way
    plain = (
        "from triton import jit\n\n@jit\ndef k(p, n, BLOCK):\n    pass\n\nkw = {}\n"
        "k[(1,)](1, BLOCK=2, **kw)\nk[(1,)](1, 2, 3, 4, **kw)\nk[(1,)](1, 2, 3, n=2, num_warps=4)\n"
    )
    assert sorted(e for _, e in hunk_calls.call_errors({"m.py": plain})) == [
        "k() got multiple values for argument 'n'",
        "k() missing 1 required argument: 'n'",
        "k() takes 3 positional arguments but 4 were given",
    ]
    # errors the parent or the culprit already have are not the subset's own
    assert (
        hunk_calls.new_errors({"m.py": "def f(a):\n    pass\nf()\n"}, {"m.py": "def f(a):\n    pass\nf()\n"}, {}) == []
    )


GEMM = """import torch

from lib import api

# the product is repeated as often as the address helper's result says (the culprit's moves it)
REPEATS = 6 if api.run() != 728.0 else 0


def matmul(a, b):
    c = a @ b
    for _ in range(REPEATS):
        c = a @ b
    return c
"""


@pytest.mark.slow
def test_bisector_run_names_the_helper_on_top_of_the_threading(tmp_path: Path) -> None:
    """`bisector run` on the CPU (real trials, real patched builds) over the threading culprit, its
    speed set by the address helper: the finding names the helper's statements, the threading is
    the base, and no subset that was built failed to run."""
    from tests.gitfixtures import bisector_run, cpu_config, gemm_subject

    root = tmp_path / "up"
    sha = threading_fixture.write(root, {"lib/gemm.py": GEMM}, {"lib/gemm.py": GEMM})
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        cpu_config(
            "threading-test",
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
    assert h["hunks"] == ["lib/kernel.py @@ -5,10 +5,11 @@ lines +11-12"] and h["alone"], h
    assert len(h["plumbing"]) == 11 and not h["plumbing_carries"], h
    assert h["rest"] == "threading: 11 hunks, applied as base", h
    report = (tmp_path / "report" / "report.md").read_text()
    tried = [ln for ln in report.splitlines() if ln.startswith(("  - parent + base + ", "  - parent + the base alone"))]
    assert tried and not any("TypeError" in ln or "did not run" in ln for ln in tried), tried


def test_the_finding_says_the_helper_carries_it_and_the_rest_is_threading() -> None:
    from bisector.why.culprit_hunks import HunkFinding

    labels = ("lib/kernel.py @@ -5,10 +5,11 @@ lines +11", "lib/kernel.py @@ -5,10 +5,11 @@ lines +12")
    f = HunkFinding(
        "a" * 40,
        13,
        labels,
        False,
        (),
        n_plumbing=11,
        n_behaviour=2,
        n_pieces=3,
        found_hunks=1,
        pieces_in_found=2,
        shown_minimal=False,
    )
    assert f.summary == (
        "1 of 2 behaviour-changing hunks carries the step alone, on top of 11 plumbing hunks applied "
        "as a base; within it, 2 of 2 statements together"
    )
    assert f.rest == "threading: 11 hunks, applied as base"
    stuck = HunkFinding(
        "a" * 40,
        13,
        labels,
        False,
        (),
        n_plumbing=11,
        n_behaviour=2,
        n_pieces=3,
        complete=False,
        cannot_split="the threading base alone would not run: lib/api.py: LaunchMeta() missing 1 "
        "required argument: 'causal'",
    )
    assert stuck.summary.startswith("cannot split the 13 hunks: the threading base alone would not run")
    assert stuck.rest == ""

"""Hunks that must travel together, on a real git history: a kernel's new parameter and its call
site, a new helper and its user in another file, a changed `__slots__` and the code that sets it.

Every subset of the culprit's hunks is applied to the parent in a real worktree and imported and
run in a real Python process: split hunk by hunk, some subsets fail as on the real upstream
(`missing 1 required positional argument`), split by group, every subset runs.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import git
import pytest

from bisector import gitrepo
from bisector.why import hunk_groups, hunks
from tests.gitfixtures import commit_file

KERNEL_BEFORE = '''"""A Triton-style kernel module (the decorator stands in for @triton.jit)."""


def jit(fn):
    return fn


@jit
def _attn_kernel(q, k, scale,
                 BLOCK_M):
    return [x * scale + y for x, y in zip(q, k)][:BLOCK_M]


# ---------------------------------------------------------------------------------------------
# (a stretch of code that no hunk touches, so that git keeps the hunks around it apart)
# ---------------------------------------------------------------------------------------------
FILLER_A = 1
FILLER_B = 2
FILLER_C = 3


def unrelated_norm(x):
    return sum(v * v for v in x) ** 0.5


# ---------------------------------------------------------------------------------------------
# (a stretch of code that no hunk touches, so that git keeps the hunks around it apart)
# ---------------------------------------------------------------------------------------------
FILLER_A = 1
FILLER_B = 2
FILLER_C = 3


PAD = 0
'''

KERNEL_AFTER = '''"""A Triton-style kernel module (the decorator stands in for @triton.jit)."""


def jit(fn):
    return fn


@jit
def _attn_kernel(q, k, scale, k_page_stride,
                 BLOCK_M):
    return [x * scale + y * k_page_stride for x, y in zip(q, k)][:BLOCK_M]


# ---------------------------------------------------------------------------------------------
# (a stretch of code that no hunk touches, so that git keeps the hunks around it apart)
# ---------------------------------------------------------------------------------------------
FILLER_A = 1
FILLER_B = 2
FILLER_C = 3


def unrelated_norm(x):
    return sum(abs(v) for v in x)


# ---------------------------------------------------------------------------------------------
# (a stretch of code that no hunk touches, so that git keeps the hunks around it apart)
# ---------------------------------------------------------------------------------------------
FILLER_A = 1
FILLER_B = 2
FILLER_C = 3


PAD = 1
'''

API_BEFORE = """from lib.kern import _attn_kernel
from lib.state import State


def run():
    s = State()
    s.block = 4
    return _attn_kernel([1.0, 2.0], [3.0, 4.0], 0.5,
                        BLOCK_M=s.block)
"""

API_AFTER = """from lib.kern import _attn_kernel
from lib.state import State
from lib.util import page_stride


def run():
    s = State()
    s.block = 4
    s.pages = page_stride(2)
    return _attn_kernel([1.0, 2.0], [3.0, 4.0], 0.5, s.pages,
                        BLOCK_M=s.block)
"""

STATE_BEFORE = """class State:
    __slots__ = ("block",)
"""

STATE_AFTER = """class State:
    __slots__ = ("block", "pages")
"""

UTIL = """def page_stride(n):
    return n * 1
"""


@pytest.fixture()
def culprit(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "up"
    root.mkdir()
    git.Repo.init(root, initial_branch="main")
    commit_file(root, "lib/__init__.py", "", "init (#1)", 1)
    commit_file(root, "lib/kern.py", KERNEL_BEFORE, "kernel (#2)", 2)
    commit_file(root, "lib/state.py", STATE_BEFORE, "state (#3)", 3)
    commit_file(root, "lib/api.py", API_BEFORE, "api (#4)", 4)
    commit_file(root, "README.md", "lib\n", "readme (#5)", 5)
    (root / "lib" / "kern.py").write_text(KERNEL_AFTER)
    (root / "lib" / "state.py").write_text(STATE_AFTER)
    (root / "lib" / "util.py").write_text(UTIL)
    (root / "README.md").write_text("lib: pass k_page_stride to the kernel\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    sha = commit_file(root, "lib/api.py", API_AFTER, "paged K (#6)", 6)
    return root, sha


def parts_and_groups(root: Path, sha: str):
    repo = git.Repo(root)
    parts = hunks.split(gitrepo.commit_diff(repo, sha))
    groups = hunk_groups.group(
        parts, lambda p: gitrepo.file_at(repo, f"{sha}^", p), lambda p: gitrepo.file_at(repo, sha, p)
    )
    return parts, groups


def labels(parts, members) -> set[str]:
    return {
        parts[i].label.split(" ")[0] + (" " + parts[i].body.splitlines()[1][:30] if parts[i].header else "")
        for i in members
    }


def test_signature_change_goes_with_its_call_sites_and_names_with_their_users(culprit) -> None:
    root, sha = culprit
    parts, groups = parts_and_groups(root, sha)
    by_hunk = {i: g for g in groups for i in g.members}
    files = [h.path for h in parts]
    assert files.count("lib/kern.py") == 3  # the signature, the unrelated norm, PAD
    sig = next(i for i, h in enumerate(parts) if h.path == "lib/kern.py" and "k_page_stride" in h.body)
    norm = next(i for i, h in enumerate(parts) if h.path == "lib/kern.py" and "abs(v)" in h.body)
    pad = next(i for i, h in enumerate(parts) if h.path == "lib/kern.py" and "PAD" in h.body)
    api = [i for i, h in enumerate(parts) if h.path == "lib/api.py"]
    state = next(i for i, h in enumerate(parts) if h.path == "lib/state.py")
    util = next(i for i, h in enumerate(parts) if h.path == "lib/util.py")
    readme = next(i for i, h in enumerate(parts) if h.path == "README.md")
    # The kernel's new parameter travels with the call that passes it, the new helper with its
    # import and use, the new slot with the code that sets it: all one group here (api.py holds
    # the users of all three); the README names the parameter, so it goes along (by name).
    big = by_hunk[sig]
    assert {sig, *api, state, util, readme} <= set(big.members)
    assert norm not in big.members and pad not in big.members
    assert by_hunk[norm].members == (norm,) and by_hunk[pad].members == (pad,)
    why = " | ".join(big.reasons)
    assert "`_attn_kernel` (lib/kern.py): parameters +k_page_stride" in why
    assert "`page_stride` (lib/util.py) added" in why
    assert "`State.__slots__` (lib/state.py): +pages" in why
    assert [g.members for g in groups] == sorted([g.members for g in groups])  # commit order


def _runs(root: Path, sha: str, parts, subset: tuple[int, ...], tree: Path) -> tuple[bool, str]:
    """The parent with `subset` applied, imported and run in a fresh Python process."""
    subprocess.run(["git", "checkout", "-q", "--force", f"{sha}^"], cwd=tree, check=True)
    subprocess.run(["git", "clean", "-qfd"], cwd=tree, check=True)
    if subset:
        patch = tree / ".subset.diff"
        patch.write_text(hunks.patch_of([parts[i] for i in subset]))
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True, capture_output=True)
        patch.unlink()
    proc = subprocess.run(
        [sys.executable, "-c", "import lib.api; print(lib.api.run())"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode == 0, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


@pytest.mark.slow
def test_every_subset_of_groups_runs_where_subsets_of_hunks_do_not(culprit, tmp_path: Path) -> None:
    root, sha = culprit
    parts, groups = parts_and_groups(root, sha)
    tree = tmp_path / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), f"{sha}^"], cwd=root, check=True)
    errors = set()
    for r in range(1, len(parts)):
        for subset in itertools.combinations(range(len(parts)), r):
            ok, err = _runs(root, sha, parts, subset, tree)
            if not ok:
                errors.add(err.split(":")[0])
    # Hunk by hunk, the real upstream's failures: a signature without its call site, a use
    # without its definition, a slot set that the class does not have.
    assert {"TypeError", "ModuleNotFoundError", "AttributeError"} <= errors
    for r in range(len(groups) + 1):
        for chosen in itertools.combinations(groups, r):
            subset = tuple(sorted(i for g in chosen for i in g.members))
            ok, err = _runs(root, sha, parts, subset, tree)
            assert ok, (subset, err)


def test_files_that_do_not_parse_or_are_not_python_are_grouped_by_name_only(tmp_path: Path) -> None:
    root = tmp_path / "up"
    root.mkdir()
    git.Repo.init(root, initial_branch="main")
    filler = "".join(f"# line {i}\n" for i in range(10))
    commit_file(root, "k.py", f"def f(a):\n    return a\n\n\n{filler}x = 1\n", "base (#1)", 1)
    commit_file(root, "k.cu", "// f(a)\nint g();\n", "cuda (#2)", 2)
    (root / "k.cu").write_text("// f(a, b)\nint g();\n")
    subprocess.run(["git", "add", "k.cu"], cwd=root, check=True)
    sha = commit_file(root, "k.py", f"def f(a, b):\n    return a + b\n\n\n{filler}x = 2\n", "b (#3)", 3)
    parts, groups = parts_and_groups(root, sha)
    # The CUDA comment names f with its new argument: it travels with f's signature; `x = 2` does not.
    assert [tuple(parts[i].path for i in g.members) for g in groups] == [("k.cu", "k.py"), ("k.py",)]
    broken = hunk_groups.group(parts, lambda p: "def (:", lambda p: "def (:")  # a syntax error: no grouping
    assert [g.members for g in broken] == [(i,) for i in range(len(parts))]


def test_the_report_names_the_groups_and_the_unresolved_subsets(culprit) -> None:
    from bisector.model import Commit
    from bisector.report import markdown
    from bisector.why.culprit_hunks import HunkFinding, HunkTry
    from tests.report_fixtures import one_commit_report

    root, sha = culprit
    parts, groups = parts_and_groups(root, sha)
    formed = tuple(g for g in groups if len(g.members) > 1)
    finding = HunkFinding(
        sha,
        len(parts),
        ("lib/util.py (whole file)",),
        True,
        (
            HunkTry(
                ("lib/kern.py @@ -8,7 +8,7 @@",),
                None,
                error="does not run: TypeError: _attn_kernel() missing 1 required positional argument: 'k_page_stride'",
            ),
        ),
        groups=formed,
        unresolved=1,
    )
    c = Commit(sha, "2026-08-06", "Ada", "paged K", 6)
    data = one_commit_report(c, device="cpu", hunks=(finding,))
    section = markdown.render(data).split("## Hunks that must travel together", 1)[1]
    assert "searched as one" in section and "parameters +k_page_stride" in section
    assert "1 subset(s) unresolved" in section and "missing 1 required positional argument" in section

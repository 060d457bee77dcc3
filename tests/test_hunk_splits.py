"""Sub-hunk splits on AST statements that parse, on a real git history: the threading culprit of
tests/threading_fixture.py also edits a test file and a benchmark script in ways whose naive
statement cuts do not parse (a call split over a line that stays as context: "'(' was never
closed"; an `else:` whose only statement goes: "expected an indented block"). Those hunks are
searched whole and the finding says so; every subset the search builds is applied with `git apply`
and every touched Python file parses; no unparsable subset is built."""

from __future__ import annotations

import ast
import itertools
import subprocess
from pathlib import Path

import git

from bisector import gitrepo
from bisector.why import hunk_checks, hunk_groups, hunk_plumbing, hunks
from tests import threading_fixture

PAD = "".join(f"PAD_{i} = {i}\n" for i in range(8))

TEST_BEFORE = f"""from lib import api


def test_prefill():
    got = api.prefill([1.0, 2.0],
                      [3.0, 4.0])
    assert got > 0


{PAD}

def test_decode():
    assert api.decode([1.0], [2.0]) > 0
"""
TEST_AFTER = f"""from lib import api


def test_prefill():
    got = api.prefill([1.0, 2.0], [3.0, 4.0])
    check(
                      [3.0, 4.0])
    assert got > 0


{PAD}

def test_decode():
    assert api.decode([1.0], [2.0]) >= 0
"""
BENCH_BEFORE = f"""import sys

from lib import api


def main(argv):
    if argv:
        n = int(argv[0])
    else:
        n = 10
    for _ in range(n):
        api.run()


{PAD}

if __name__ == "__main__":
    main(sys.argv[1:])
"""
BENCH_AFTER = f"""import sys

from lib import api


def main(argv):
    if argv:
        n = int(argv[0]) * 2
    for _ in range(n):
        api.run()


{PAD}

if __name__ == "__main__":
    main(sys.argv[2:])
"""
EXTRA = (
    {"tests/test_api.py": TEST_BEFORE, "benchmark/bench_api.py": BENCH_BEFORE},
    {"tests/test_api.py": TEST_AFTER, "benchmark/bench_api.py": BENCH_AFTER},
)


def culprit(root: Path):
    sha = threading_fixture.write(root, *EXTRA)
    repo = git.Repo(root)
    parts = hunks.split(gitrepo.commit_diff(repo, sha))
    old = lambda p: gitrepo.file_at(repo, f"{sha}^", p)  # noqa: E731
    new = lambda p: gitrepo.file_at(repo, sha, p)  # noqa: E731
    groups = hunk_groups.group(parts, old, new)
    return sha, parts, old, new, hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)


def test_naive_statement_cuts_of_these_hunks_do_not_parse(tmp_path: Path) -> None:
    """The fixture is what it claims: cut into statements, a piece of each does not parse alone."""
    _sha, parts, old, new, _ = culprit(tmp_path / "up")
    cut = hunk_plumbing.pieces_of(parts, old, new)
    naive = hunk_plumbing.Plan(
        tuple(parts),
        (),
        tuple(p for p in cut if parts[p.hunk].path != "lib/api.py" and parts[p.hunk].path != "lib/meta.py"),
    )
    broken = {
        parts[naive.pieces[i].hunk].path: naive.compile_error((i,), old)
        for i in range(len(naive.pieces))
        if naive.compile_error((i,), old)
    }
    assert "'(' was never closed" in broken["tests/test_api.py"]
    assert "expected an indented block" in broken["benchmark/bench_api.py"]


def test_every_subset_of_the_plan_parses_and_the_unsplit_hunks_are_named(tmp_path: Path) -> None:
    _sha, parts, old, _new, plan = culprit(tmp_path / "up")
    assert plan is not None and not plan.base_error
    # the call cut over a context line: searched whole; the emptied else: its statements are tied
    # by the name they bind (`n`), so the piece that drops the branch travels with the one that reads n
    (named,) = plan.unsplit
    assert named.startswith("tests/test_api.py @@") and named.endswith("do not parse apart, searched whole")
    assert sum(parts[p.hunk].path == "benchmark/bench_api.py" for p in plan.pieces) == 2
    n = len(plan.pieces)
    assert n <= 12
    for k in range(n + 1):
        for subset in itertools.combinations(range(n), k):
            assert not plan.compile_error(subset, old).startswith("does not compile"), (subset, plan.pieces)


def test_the_search_builds_only_trees_that_parse(tmp_path: Path) -> None:
    sha, parts, old, new, plan = culprit(tmp_path / "up")
    assert plan is not None
    tree = tmp_path / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), f"{sha}^"], cwd=tmp_path / "up", check=True)
    touched = sorted({h.path for h in parts if h.path.endswith(".py")})
    built = []

    def carries(subsets):
        out = []
        for subset in subsets:
            if plan.compile_error(subset, old, new):
                out.append(None)
                continue
            subprocess.run(["git", "checkout", "-q", "--force", f"{sha}^"], cwd=tree, check=True)
            (tree / ".p.diff").write_text(plan.patch(subset))
            subprocess.run(["git", "apply", ".p.diff"], cwd=tree, check=True, capture_output=True)
            for path in touched:
                ast.parse((tree / path).read_text(), path)  # raises: an unparsable subset was built
            built.append(subset)
            text = (tree / "lib/kernel.py").read_text()
            out.append("pages = [r * kv_stride" in text and "return [p + c" in text)
        return out

    found = hunks.search(len(plan.pieces), carries)
    assert built and found.complete
    assert [plan.pieces[i].label for i in found.found] == ["lib/kernel.py @@ -5,10 +5,11 @@ lines +11-12"]


def test_subsets_never_built_do_not_spend_the_build_budget() -> None:
    """Statement 3 reads what statement 2 binds: a subset with 3 and without 2 is refused before it
    is built. Refusals once spent the build budget ("stopped early: builds"); now only builds count."""
    refused = lambda s: 3 in s and 2 not in s  # noqa: E731
    built: list[tuple[int, ...]] = []

    def carries(subsets):
        out = []
        for s in subsets:
            if refused(s):
                out.append(None)
                continue
            built.append(s)
            out.append({2, 3} <= set(s))
        return out

    whole = hunks.search(6, carries)
    needed, refusals = len(built), len(whole.unresolved)
    assert whole.found == (2, 3) and refusals >= 1
    built.clear()
    stopped = hunks.search(6, carries, budget=needed)
    assert not stopped.complete  # the refusals counted: the budget ran out
    built.clear()
    found = hunks.search(6, carries, budget=needed, free=refused)
    assert found.complete and found.found == (2, 3) and len(built) == needed

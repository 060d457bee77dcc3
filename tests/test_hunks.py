"""A commit's hunks: split from a real git diff, any subset applied by real `git apply`, the search."""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import git
import pytest

from bisector import gitrepo
from bisector.config import parse
from bisector.model import Step
from bisector.why import culprit_hunks, hunks
from tests.gitfixtures import bisector_run, commit_file, cpu_config, gemm_subject
from tests.gitfixtures import git as run_git

ORIGINAL = [f"line {i}\n" for i in range(1, 41)]


def edits() -> dict[str, Callable[[list[str]], list[str]]]:
    """Four separate changes to k.py (a replacement, an insertion, a deletion, an append)."""

    def replace5(ls):
        return [*ls[:4], "line 5 changed\n", *ls[5:]]

    def insert20(ls):
        return [*ls[:20], "new a\n", "new b\n", *ls[20:]]

    def delete30(ls):
        return ls[:29] + ls[30:]

    def append(ls):
        return [*ls, "line 41\n"]

    return {"replace5": replace5, "insert20": insert20, "delete30": delete30, "append": append}


def apply_in_order(names) -> str:
    """The file with the chosen edits, applied from the bottom up so earlier line numbers hold."""
    lines = list(ORIGINAL)
    for name in ("append", "delete30", "insert20", "replace5"):
        if name in names:
            lines = edits()[name](lines)
    return "".join(lines)


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "r"
    root.mkdir()
    git.Repo.init(root, initial_branch="main")
    commit_file(root, "k.py", "".join(ORIGINAL), "base (#1)", 1)
    commit_file(root, "gone.py", "x = 1\n", "a file to delete (#2)", 2)
    (root / "gone.py").unlink()
    (root / "new.py").write_text("y = 2\n")
    (root / "k.py").write_text(apply_in_order(edits()))
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    sha = commit_file(root, "k.py", apply_in_order(edits()), "four edits, a new file, a deleted one (#3)", 3)
    return root, sha


def test_split_names_every_hunk_with_its_file(repo) -> None:
    root, sha = repo
    parts = hunks.split(gitrepo.commit_diff(git.Repo(root), sha))
    assert [h.path for h in parts] == ["gone.py", "k.py", "k.py", "k.py", "k.py", "new.py"]
    assert [h.delta for h in parts] == [-1, 0, 2, -1, 1, 1]
    assert parts[1].label == "k.py @@ -2,7 +2,7 @@"


def test_the_progress_estimate_of_the_hunk_searches(repo) -> None:
    """6 hunks: ceil(log2 6) = 3 halvings of two subsets and the parent, n = 2 trials each; a
    one-hunk culprit, an unverified step and one with candidates take none; the budget caps it."""
    root, sha = repo
    one = commit_file(root, "k.py", "changed\n", "one hunk (#4)", 4)

    def step(commit: str, parent: str, verified: bool = True, candidates: tuple[str, ...] = ()) -> Step:
        return Step(
            commit,
            parent,
            ("gemm/a",),
            {"gemm/a": -30.0},
            {"gemm/a": (-35.0, -25.0)},
            {"gemm/a": 1e-6},
            verified=verified,
            candidates=candidates,
        )

    def session(budget: int) -> SimpleNamespace:
        text = cpu_config(
            "x",
            root,
            gemm_subject(64),
            trials=2,
            max_trials=4,
            reps=1,
            min_step_pct=10.0,
            extra=f"[build]\nmax_hunk_trials = {budget}\n",
        )
        return SimpleNamespace(config=parse(tomllib.loads(text), root / "x.toml"), repo=git.Repo(root))

    steps = [
        step(sha, sha + "^"),
        step(one, sha),
        step(sha, sha + "^", verified=False),
        step(sha, sha + "^", candidates=(sha, one)),
    ]
    assert culprit_hunks.expected_trials(session(64), steps) == 3 * 2 * 3
    assert culprit_hunks.expected_trials(session(10), steps) == 10


def test_every_subset_applies_exactly_to_the_parent(repo, tmp_path: Path) -> None:
    root, sha = repo
    parts = hunks.split(gitrepo.commit_diff(git.Repo(root), sha))
    names = ["replace5", "insert20", "delete30", "append"]  # the k.py hunks, in order
    for r in range(len(parts) + 1):
        for subset in itertools.combinations(range(len(parts)), r):
            work = tmp_path / f"w{'-'.join(map(str, subset))}"
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(work), f"{sha}^"], cwd=root, check=True)
            patch = work / "p.diff"
            patch.write_text(hunks.patch_of([parts[i] for i in subset]))
            if subset:
                subprocess.run(["git", "apply", str(patch)], cwd=work, check=True, capture_output=True)
            chosen = [names[i - 1] for i in subset if 1 <= i <= 4]
            assert (work / "k.py").read_text() == apply_in_order(chosen), subset
            assert (work / "gone.py").exists() == (0 not in subset)
            assert (work / "new.py").exists() == (5 in subset)
            subprocess.run(["git", "worktree", "remove", "--force", str(work)], cwd=root, check=True)


def scripted(needed: set[int]):
    return lambda subsets: [needed <= set(subset) for subset in subsets]


def test_search_halves_down_to_the_one_hunk() -> None:
    found = hunks.search(8, scripted({5}))
    assert found.found == (5,) and found.alone
    assert len(found.tried) <= 6 and all(ok == (5 in part) for part, ok in found.tried)


def test_hunks_that_work_only_together_end_as_a_set_none_of_which_can_go() -> None:
    found = hunks.search(8, scripted({4, 6}))
    assert found.found == (4, 6) and not found.alone
    # Each level's chunks (then their complements) are measured together, in one side-by-side round.
    assert [part for part, _ in found.tried] == [
        (0, 1, 2, 3),
        (4, 5, 6, 7),
        (4, 5),
        (6, 7),
        (4,),
        (5,),
        (6,),
        (7,),
        (5, 6, 7),
        (4, 6, 7),
        (4, 5, 7),
        (4, 5, 6),
        (4, 7),
        (4, 6),
    ]
    assert all(ok == ({4, 6} <= set(part)) for part, ok in found.tried)
    assert hunks.search(8, scripted({2, 6})).found == (2, 6)
    # The demo's fast-math commit: a signature and its call in one file, the Triton twin in another.
    assert hunks.search(3, scripted({0, 1})).found == (0, 1)


def test_no_hunk_or_one_hunk() -> None:
    assert hunks.search(0, scripted(set())).found == () and not hunks.search(0, scripted(set())).alone
    one = hunks.search(1, scripted({0}))
    assert one.found == (0,) and one.alone and one.tried == ()


def test_the_build_budget_stops_at_the_smallest_set_known_to_carry() -> None:
    found = hunks.search(16, scripted({3, 12}), budget=5)
    assert len(found.tried) <= 5 and not found.complete and not found.alone  # a round that would pass it is not begun
    carrying = [part for part, ok in found.tried if ok]
    assert found.found == (min(carrying, key=len) if carrying else tuple(range(16)))
    assert {3, 12} <= set(found.found)
    assert hunks.search(16, scripted({3}), budget=8).complete  # one hunk: 2 * log2(16) = 8 builds suffice


def tied(needed: set[int], pairs: list[tuple[int, int]]):
    """Like `scripted`, but a subset holding one hunk of a tied pair without the other does not
    import (a signature without its call site): unresolved, None."""

    def outcome(subset: tuple[int, ...]) -> bool | None:
        s = set(subset)
        if any((a in s) != (b in s) for a, b in pairs):
            return None
        return needed <= s

    return lambda subsets: [outcome(subset) for subset in subsets]


def test_an_unresolved_subset_neither_carries_nor_clears_the_step() -> None:
    # Hunks 3 and 4 are a signature and its call site, split by the first halving; the step is in 5.
    found = hunks.search(8, tied({5}, [(3, 4)]))
    assert found.found == (5,) and found.alone and found.complete
    assert {(0, 1, 2, 3), (4, 5, 6, 7)} <= set(found.unresolved)  # both halves: neither carries nor clears
    assert all(len({3, 4} & set(s)) == 1 for s in found.unresolved)
    assert all(ok is None for s, ok in found.tried if s in found.unresolved)
    # The step in the tied pair itself: ddmin ends at the pair, and since removing either one
    # was unresolved, it does not claim that each is needed.
    pair = hunks.search(8, tied({2, 3}, [(2, 3)]))
    assert pair.found == (2, 3) and not pair.alone and not pair.shown_minimal
    assert dict(pair.tried)[(2,)] is None and dict(pair.tried)[(3,)] is None
    # A step carried by two independent hunks is shown minimal: each removal measured, and lost it.
    both = hunks.search(8, scripted({4, 6}))
    assert both.found == (4, 6) and both.shown_minimal and not both.unresolved


def test_unresolved_is_never_taken_for_carrying() -> None:
    """Every subset unresolved but the whole commit: the search cannot narrow and says so."""

    def nothing_runs(subsets):
        return [None for _ in subsets]

    found = hunks.search(4, nothing_runs)
    assert found.found == (0, 1, 2, 3) and not found.alone and not found.shown_minimal
    assert len(found.unresolved) == len(found.tried) > 0


def test_searching_groups_instead_of_hunks_never_splits_a_group() -> None:
    groups = [(0,), (1, 2), (3,), (4, 5, 6)]  # a signature change with its two call sites, and one of three
    asked: list[tuple[int, ...]] = []

    def over_groups(subsets):
        out = []
        for subset in subsets:
            hunk_set = tuple(sorted(i for g in subset for i in groups[g]))
            asked.append(hunk_set)
            out.append(5 in hunk_set)
        return out

    found = hunks.search(len(groups), over_groups)
    assert found.found == (3,) and groups[3] == (4, 5, 6)
    for hunk_set in asked:
        for g in groups:
            assert set(g) <= set(hunk_set) or not set(g) & set(hunk_set)


def misread(needed: set[int], wrong: dict[tuple[int, ...], list[bool]]):
    """Like `scripted`, but the listed subsets read as given on their first looks (a busy machine's
    misreads), truly after: each call is one look on fresh trials."""
    looks: dict[tuple[int, ...], int] = {}

    def outcome(subset: tuple[int, ...]) -> bool:
        k = looks[subset] = looks.get(subset, 0) + 1
        reads = wrong.get(subset, [])
        return reads[k - 1] if k <= len(reads) else needed <= set(subset)

    return lambda subsets: [outcome(s) for s in subsets]


def test_a_misread_removal_does_not_make_an_inert_hunk_needed() -> None:
    # The demo's plants: the CPU hunk (0) carries the step, its Triton twin (1) is inert on the CPU.
    # One misread of (0,) made ddmin end at both, "only together" (a busy 2-core CI run).
    carries = misread({0}, {(0,): [False]})
    assert hunks.search(2, carries).found == (0, 1)  # without a second look
    carries = misread({0}, {(0,): [False]})
    found = hunks.search(2, carries, look_again=carries)
    assert found.found == (0,) and found.alone and found.complete
    assert [ok for part, ok in found.tried if part == (0,)] == [False, True, True]


def test_only_together_is_looked_at_again_and_kept_when_it_holds() -> None:
    asked: list[list[tuple[int, ...]]] = []
    truth = scripted({0, 1})

    def again(subsets):
        asked.append(list(subsets))
        return truth(subsets)

    found = hunks.search(3, truth, look_again=again)
    assert found.found == (0, 1) and found.shown_minimal and not found.alone
    assert asked == [[(1,), (0,)]]  # each removal once more, and no third look where the two agree
    # A second look that misreads is outvoted by the third.
    carries = misread({0, 1}, {(0,): [False, True]})
    found = hunks.search(3, carries, look_again=carries)
    assert found.found == (0, 1) and found.shown_minimal
    assert [ok for part, ok in found.tried if part == (0,)] == [False, True, False]


def test_a_look_again_past_the_budget_leaves_the_first_looks() -> None:
    def spent(subsets):
        raise hunks.OutOfBudget

    found = hunks.search(8, scripted({4, 6}), look_again=spent)
    assert found.found == (4, 6) and found.complete and found.shown_minimal


TUNED = """# the GEMM's repeat count, read by lib/gemm.py
EXTRA = {extra}
"""
USES_TUNED = """import torch

from lib import tuning


def matmul(a, b):
    c = a @ b
    for _ in range({loop}):
        c = a @ b
    return c
"""


@pytest.mark.slow
def test_two_hunks_needed_together_are_measured_twice_on_fresh_trials(tmp_path: Path) -> None:
    """`bisector run` for real (CPU trials) on a commit whose two hunks, in two files, carry its step
    only together: one sets a repeat count the kernel never read, the other makes the kernel read it.
    Each removal is measured once more on fresh trials of the subset and the parent, so one
    misread cannot make an inert hunk look needed (tests above); here both looks agree."""
    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1)
    commit_file(repo, "lib/tuning.py", TUNED.format(extra=0), "tuning (#2)", 2)
    good = commit_file(repo, "lib/gemm.py", USES_TUNED.format(loop=0), "add gemm (#3)", 3)
    (repo / "lib" / "tuning.py").write_text(TUNED.format(extra=6))
    run_git(repo, "add", "lib/tuning.py")
    bad = commit_file(repo, "lib/gemm.py", USES_TUNED.format(loop="tuning.EXTRA"), "read the tuned count (#4)", 4)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        cpu_config("together-test", repo, gemm_subject(384), trials=3, max_trials=8, reps=5, min_step_pct=10.0)
    )
    result = bisector_run(tmp_path, cfg, good, bad, "--no-fixes")
    assert [s["commit"] for s in result["steps"]] == [bad]
    (h,) = result["hunks"]
    assert h["of"] == 2 and not h["alone"] and len(h["hunks"]) == 2, h
    assert "only together" in h["summary"], h
    report = (tmp_path / "report" / "report.md").read_text()
    for path in ("lib/gemm.py", "lib/tuning.py"):  # each hunk alone (the other removed): twice, fresh
        first, second = (ln for ln in report.splitlines() if ln.startswith(f"  - parent + `{path}"))
        assert "look 2, on fresh trials" in second and "look" not in first and "does not reproduce" in second
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        per_patch = dict(
            db.execute(
                "SELECT patch_hash, COUNT(*) FROM trials "
                "WHERE patch_hash IS NOT NULL AND patch_hash != '' GROUP BY patch_hash"
            )
        )
        stored = db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    assert len(per_patch) == 2 and all(n >= 6 for n in per_patch.values()), per_patch
    # Resumed: the same questions in the same order take the same slices; nothing new is measured.
    assert bisector_run(tmp_path, cfg, good, bad, "--no-fixes")["hunks"][0]["hunks"] == h["hunks"]
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == stored

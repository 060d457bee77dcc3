"""Steps that interact: the verdict of two reverts combined, the patches composed by real git, and
`bisector run` on a small real upstream with two planted steps on one shape (CPU trials).

The same run checks part 1 of issue #14 end to end: its kernel module, standing in for a JIT,
writes real Triton artifacts (the demo's, tests/fixtures/kernels/) into the commit's
TRITON_CACHE_DIR on its first call; the report shows what changed in them across the first step,
and after the work dir (the JIT caches) is gone an offline re-make still does, from the copies kept
beside the report.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import subprocess
from pathlib import Path

import git
import pytest

from bisector import gitrepo
from bisector.model import Step
from bisector.search.samples import PooledNoise
from bisector.why.interactions import MAX_STEPS, combined_patch, groups, pair_effect
from tests.gitfixtures import bisector_run, commit_file, cpu_config, gemm_subject
from tests.gitfixtures import git as run_git

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"
INDEX = json.loads((FIXTURES / "index.json").read_text())["steps"]


def around(center: float, spread: float = 0.01, n: int = 6) -> list[float]:
    """n samples around `center`, +-spread relative, symmetric (a fixed, noisy-looking series)."""
    return [center * (1 + spread * math.sin(1.7 * i + 0.3)) for i in range(n)]


def test_verdicts_add_overlap_hide_unclear() -> None:
    tip = around(1.0)
    # Independent: each revert gains 20% whatever the other: 1.2 * 1.2 together.
    *_, inter, ci, verdict = pair_effect(tip, around(1.2), around(1.2), around(1.44), 3.0)
    assert verdict == "add" and abs(inter) < 1 and ci[0] < 0 < ci[1]
    # The seed's case: fast math's revert gains 10.4% with the remap dropped, 1.4% with it back.
    a_alone, a_with, _b_alone, _b_with, inter, ci, verdict = pair_effect(
        tip, around(1.104), around(1.17), around(1.17 * 1.014), 3.0
    )
    assert verdict == "overlap" and ci[1] < 0
    assert a_alone == pytest.approx(10.4, abs=0.2) and a_with == pytest.approx(1.4, abs=0.2)
    # One step hides the other: reverting a alone gains nothing, with b reverted 30%.
    *_, verdict = pair_effect(tip, around(1.0), around(1.25), around(1.25 * 1.3), 3.0)
    assert verdict == "hide"
    # Too noisy to say.
    *_, verdict = pair_effect(around(1.0, 0.3, 3), around(1.2, 0.3, 3), around(1.2, 0.3, 3), around(1.3, 0.3, 3), 3.0)
    assert verdict == "unclear"


def test_the_runs_trial_noise_decides_a_pair_on_two_trials_a_build() -> None:
    """Two trials of each of the four builds (the H200's protocol) leave 4 degrees of freedom: an
    independent pair reads unclear. On the search's pooled noise of the shape (many degrees of
    freedom) it is decided; a pool far quieter than the builds' own spread (beyond chance) does not
    narrow the interval below what that spread allows."""
    builds = [[c * 0.993, c * 1.007] for c in (1.0, 1.2, 1.1, 1.32)]  # a 1% trial noise, independent reverts
    alone = pair_effect(*builds, 3.0)
    pooled = pair_effect(*builds, 3.0, PooledNoise(sd=0.01, raw_sd=0.01, df=60))
    quieter = pair_effect(*builds, 3.0, PooledNoise(sd=0.001, raw_sd=0.001, df=60))
    assert alone[-1] == "unclear" and pooled[-1] == "add"
    width = lambda r: r[-2][1] - r[-2][0]  # noqa: E731
    assert width(pooled) < 0.75 * width(alone)  # t of 2.0 instead of 2.8
    assert width(quieter) > 0.97 * width(pooled)  # the builds' own spread (0.99%) stands


def step(sha: str, shapes: dict[str, float]) -> Step:
    return Step(
        sha, sha + "^", tuple(shapes), shapes, {k: (v - 1, v + 1) for k, v in shapes.items()}, {k: 1e-6 for k in shapes}
    )


def test_groups_are_regressions_sharing_shapes() -> None:
    a = step("a", {"fa/s1024": -25.0, "fa/s2048": -31.0})
    b = step("b", {"fa/s512": -46.0, "fa/s1024": -30.0, "fa/s2048": -26.0})
    c = step("c", {"gemm/tall": -44.0})
    up = step("u", {"fa/s1024": +20.0})  # an improvement: no revert to combine
    (g,) = groups([a, b, c, up])
    assert [s.commit for s in g[0]] == ["a", "b"] and g[1] == ("fa/s1024", "fa/s2048") and not g[2]
    many = [step(f"s{i}", {"fa/s1024": -5.0 * (i + 1)}) for i in range(5)]
    (g,) = groups(many)
    assert [s.commit for s in g[0]] == ["s2", "s3", "s4"] and str(2**MAX_STEPS) in g[2]
    assert groups([a, c]) == []


def test_reverts_composed_on_the_tip(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    git.Repo.init(root, initial_branch="main")
    lines = [f"line {i}\n" for i in range(30)]
    commit_file(root, "k.py", "".join(lines), "base (#1)", 1)
    lines[3] = "A\n"
    a = commit_file(root, "k.py", "".join(lines), "a (#2)", 2)
    lines[20] = "B\n"
    b = commit_file(root, "k.py", "".join(lines), "b (#3)", 3)
    lines[10] = "C\n"
    tip = commit_file(root, "k.py", "".join(lines), "c (#4)", 4)
    repo = git.Repo(root)
    patch, why = combined_patch(Path(repo.git_dir), tip, [gitrepo.revert_patch(repo, s) for s in (b, a)])
    assert not why and "-A" in patch and "+line 3" in patch and "-B" in patch and "-C" not in patch
    out = tmp_path / "check"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(out), tip], cwd=root, check=True)
    (out / "p.diff").write_text(patch)
    subprocess.run(["git", "apply", "p.diff"], cwd=out, check=True)
    assert (out / "k.py").read_text().splitlines()[3] == "line 3" and (out / "k.py").read_text().count("C\n") == 1
    # A later commit rewrote what a revert would restore: they do not apply together, said why.
    lines[3] = "A2\n"
    tip2 = commit_file(root, "k.py", "".join(lines), "a again (#5)", 5)
    patch, why = combined_patch(Path(repo.git_dir), tip2, [gitrepo.revert_patch(repo, s) for s in (b, a)])
    assert not patch and "conflict" in why
    assert repo.git.status("--porcelain") == "" and repo.head.commit.hexsha == tip2  # nothing touched


KERNEL = """import os
import shutil

import torch

A = {a}  # planted: the same work again
ARTIFACTS = "{art}"  # what this commit's "JIT" writes into its cache


def _compile():
    cache = os.environ.get("TRITON_CACHE_DIR")
    if cache and ARTIFACTS and not os.listdir(cache):
        shutil.copytree(ARTIFACTS, cache, dirs_exist_ok=True)


def matmul(a, b):
    _compile()
    c = a @ b
    for _ in range(A + B + 30 * A * B):
        c = a @ b
    return c


# B sits apart from A, so that each revert carries to the tip without the other
B = {b}  # planted: more work again, much more with A
"""


def config(repo: Path) -> str:
    return cpu_config(
        "interactions-test",
        repo,
        gemm_subject(512),
        trials=4,
        max_trials=8,
        reps=5,
        min_step_pct=10.0,
        jit_cache_env=("TRITON_CACHE_DIR",),
    )


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    """Two steps on one shape: A doubles the GEMM's work, B then takes it from 2 to 33 GEMMs. Reverted
    on the tip, each alone goes back to 2 (+1550%), both to 1 (+3200%): the effects overlap, by -88%
    (log -2.1), far outside what a busy 2-core machine's trials blur (from 2 to 9 GEMMs, -56%, 3 of
    8 runs read "unclear" there: -26% [-57, +27] on 8 trials a build)."""
    st = INDEX["145"]
    before = FIXTURES / st["parent"][:12] / "triton_cache_dir"
    after = FIXTURES / st["culprit"][:12] / "triton_cache_dir"
    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1)]
    shas.append(commit_file(repo, "lib/gemm.py", KERNEL.format(a=0, b=0, art=before), "add gemm (#2)", 2))
    shas.append(commit_file(repo, "docs/n3.md", "note\n", "docs 3 (#3)", 3))
    shas.append(commit_file(repo, "lib/gemm.py", KERNEL.format(a=1, b=0, art=after), "stage less (#4)", 4))
    shas.append(commit_file(repo, "docs/n5.md", "note\n", "docs 5 (#5)", 5))
    shas.append(commit_file(repo, "lib/gemm.py", KERNEL.format(a=1, b=1, art=after), "more work (#6)", 6))
    shas.append(commit_file(repo, "docs/n7.md", "note\n", "docs 7 (#7)", 7))
    return repo, shas


def run(tmp_path: Path, repo: Path, good: str, *extra: str) -> dict:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config(repo))
    return bisector_run(tmp_path, cfg, good, "main", "--no-hunks", *extra)


@pytest.mark.slow
def test_two_steps_on_one_shape_overlap_and_the_kernels_show_offline(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    result = run(tmp_path, repo, shas[1])
    assert [s["commit"] for s in result["steps"]] == [shas[3], shas[5]]
    (inter,) = result["interactions"]
    assert inter["steps"] == [shas[3], shas[5]] and inter["shapes"] == ["gemm/m512"] and inter["trials"] in (4, 8)
    combos = {tuple(c["reverted"]): c for c in inter["combos"]}
    assert set(combos) == {(), (shas[3],), (shas[5],), (shas[3], shas[5])} and not any(
        c["error"] for c in combos.values()
    )
    both, one_a, one_b = (combos[k]["gain_pct"]["gemm/m512"] for k in [(shas[3], shas[5]), (shas[3],), (shas[5],)])
    # each revert alone restores a lot, and both together; which of them the most is the verdict's
    # to say (on both cores spun, one read 1288% alone against 1093% together)
    assert min(both, one_a, one_b) > 100
    (pair,) = inter["pairs"]
    assert pair["verdict"] == "overlap" and pair["ci95"][1] < 0  # 33 -> 2 each alone, 33 -> 1 together
    # The tip and each single revert are measured once, in the fixes' rounds, side by side with the
    # combination: the group takes their trials instead of measuring them again after the fixes.
    fixes = {f["commit"]: f["trials"] for f in result["fixes"]}
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        patched = sorted(
            n
            for (n,) in db.execute(
                "SELECT COUNT(DISTINCT slot) FROM trials WHERE sha = ? AND patch_hash IS NOT NULL GROUP BY patch_hash",
                (shas[-1],),
            )
        )
    assert patched == sorted([max(fixes[c], inter["trials"]) for c in (shas[3], shas[5])] + [inter["trials"]])
    # A revert is judged on at least its group's trials, and where on as many, its check and its
    # line in the group's table read the same trials and agree.
    for c in (shas[3], shas[5]):
        fix = next(f for f in result["fixes"] if f["commit"] == c)
        assert fix["trials"] >= inter["trials"]
        if fix["trials"] == inter["trials"]:
            assert fix["shapes"]["gemm/m512"]["vs_tip"]["change_pct"] == pytest.approx(
                combos[(c,)]["gain_pct"]["gemm/m512"], abs=1e-3
            )
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Steps that interact" in report and "the effects **overlap**" in report
    assert f"| `{shas[3][:7]}` (#4) + `{shas[5][:7]}` (#6) |" in report

    # Part 1 end to end: step #4 changed what the "JIT" wrote (the demo's num_stages 3 -> 2), #6 did not.
    kernels = {k["commit"]: k for k in result["kernels"]}
    assert kernels[shas[3]]["changed"] == ["_matmul_kernel"] and kernels[shas[5]]["changed"] == []
    section = report.split("## What changed in the compiled kernel", 1)[1].split("\n## ", 1)[0]
    assert "num_stages 3 → 2" in section and "No compiled kernel changed" in section

    shutil.rmtree(tmp_path / "work")  # the JIT caches (and builds) are gone; the store and the report stay
    offline = run(tmp_path, repo, shas[1], "--offline")
    assert [s["commit"] for s in offline["steps"]] == [shas[3], shas[5]]
    again = (tmp_path / "report" / "report.md").read_text()
    assert section == again.split("## What changed in the compiled kernel", 1)[1].split("\n## ", 1)[0]
    assert offline["interactions"][0]["pairs"][0]["verdict"] == "overlap"

    # Resumed with neither the JIT caches nor the report's copies: the steps' commits are compiled
    # again, one cold trial each (stored nothing), and the kernels are compared as before.
    shutil.rmtree(tmp_path / "report" / "kernels")
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        stored = db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    resumed = run(tmp_path, repo, shas[1], "--no-fixes")
    kernels = {k["commit"]: k for k in resumed["kernels"]}
    assert (
        kernels[shas[3]]["changed"] == ["_matmul_kernel"]
        and "compiled again for this report" in kernels[shas[3]]["note"]
    )
    remade = (tmp_path / "report" / "report.md").read_text()
    assert "num_stages 3 → 2" in remade and "no compiled artifacts" not in remade
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == stored

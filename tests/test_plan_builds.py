"""`bisector plan --config`: each build step's builds over a range, read from the commits' files, on a
real git history whose LLVM pin moves from one file to another (tests/llvm_pins.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import git
import pytest

from bisector.config.keyfiles import key_from_commit, key_from_dir, pattern_problem
from tests.llvm_pins import pin_history

ROOT = Path(__file__).resolve().parents[1]
FLYDSL = ROOT / "configs" / "mi355x-flydsl.toml"


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bisector", "plan", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    repo = tmp_path_factory.mktemp("pins") / "upstream"
    return repo, pin_history(repo)


def test_flydsl_config_counts_one_llvm_build_per_pin_and_no_missing_key(history):
    repo, eras = history
    shas = eras["txt"] + eras["json"] + eras["patch"]
    out = plan("--config", str(FLYDSL), "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["commits"] == len(shas) == 8
    llvm, flydsl, link = got["builds"]
    assert (llvm["step"], llvm["keyed"], llvm["missing"]) == (1, True, [])
    assert "build_llvm.sh" in llvm["run"]
    assert llvm["distinct_keys"] == 3  # pin A; pin B; pin B + patch
    assert [(b["step"], b["keyed"], b["distinct_keys"], b["missing"]) for b in (flydsl, link)] == [
        (2, False, 8, []),
        (3, False, 8, []),
    ]


def test_a_key_file_that_was_deleted_names_every_commit_after_it(history, tmp_path):
    """The config's old key (the deleted llvm-hash.txt): the plan lists the commits that would fail."""
    repo, eras = history
    old = FLYDSL.read_text().replace(
        'key_files = ["scripts/build_llvm.sh", "thirdparty/llvm-*"]',
        'key_files = ["thirdparty/llvm-hash.txt", "scripts/build_llvm.sh"]',
    )
    assert old != FLYDSL.read_text()
    cfg = tmp_path / "old.toml"
    cfg.write_text(old)
    shas = eras["txt"] + eras["json"] + eras["patch"]
    out = plan("--config", str(cfg), "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--json")
    assert out.returncode == 0, out.stderr
    llvm = json.loads(out.stdout)["builds"][0]
    assert llvm["missing"] == eras["json"] + eras["patch"]
    assert llvm["distinct_keys"] == 1
    text = plan("--config", str(cfg), "--repo", str(repo), "--good", shas[0], "--bad", shas[-1])
    assert text.returncode == 0, text.stderr
    assert (
        f"at most 1 builds (distinct keys over 8 commits), key files missing in 5: {eras['json'][0][:8]}" in text.stdout
    )


def test_plan_with_noise_and_config_keeps_the_estimate_and_adds_builds(history):
    repo, eras = history
    out = plan(
        "--config",
        str(FLYDSL),
        "--repo",
        str(repo),
        "--good",
        eras["txt"][0],
        "--bad",
        eras["json"][-1],
        "--noise-cv",
        "0.01",
        "--runs",
        "2",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["commits"] == 5 and "trials_mean" in got
    assert got["builds"][0]["distinct_keys"] == 2


def test_plan_needs_a_noise_source_or_a_config(history):
    repo, eras = history
    out = plan("--repo", str(repo), "--good", eras["txt"][0], "--bad", eras["txt"][-1])
    assert out.returncode == 2
    assert out.stderr.strip() == "error: give exactly one of --noise-cv, --from-store, --from-csv (or only --config)"


def test_key_from_a_worktree_equals_key_from_the_commit(history, tmp_path):
    """The build (worktree) and the plan (commit objects) must agree, or the plan counts wrong."""
    repo, eras = history
    patterns = ("scripts/build_llvm.sh", "thirdparty/llvm-*")
    keys = []
    for i, sha in enumerate(eras["txt"][:1] + eras["json"][:1] + eras["patch"][:1]):
        tree = tmp_path / f"wt{i}"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(tree), sha], check=True)
        from_commit = key_from_commit(git.Repo(repo), sha, patterns)
        assert key_from_dir(tree, patterns) == from_commit and from_commit.ok
        keys.append([path for path, _ in from_commit.files])
    assert keys == [
        ["scripts/build_llvm.sh", "thirdparty/llvm-hash.txt"],
        ["scripts/build_llvm.sh", "thirdparty/llvm-build-info.json"],
        ["scripts/build_llvm.sh", "thirdparty/llvm-build-info.json", "thirdparty/llvm-rocdl-lld-argv0.patch"],
    ]
    gone = key_from_commit(git.Repo(repo), eras["json"][0], ("thirdparty/llvm-hash.txt", "nodir/x-*"))
    assert gone.unmatched == ("thirdparty/llvm-hash.txt", "nodir/x-*") and not gone.ok


@pytest.mark.parametrize(
    "pattern,problem",
    [
        ("thirdparty/llvm-*", None),
        ("scripts/build_llvm.sh", None),
        ("*.json", None),
        ("", "non-empty"),
        ("/etc/passwd", "relative"),
        ("../x", "relative"),
        ("a/./b", "relative"),
        ("third*/llvm-hash.txt", "only in the file name"),
        ("thirdparty/", "not a directory"),
    ],
)
def test_key_file_patterns(pattern, problem):
    got = pattern_problem(pattern)
    assert (got is None) if problem is None else (problem in (got or ""))

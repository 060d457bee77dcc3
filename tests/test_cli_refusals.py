"""Bad input met by a new user, refused before anything is started or written.

The shipped demo configs hold `repo = "demo"`, a placeholder only `bisector demo` fills in:
`check-config` passed them and `run` failed deep in, with no word on how to point them at a repo.
A typo in `demo --shapes` or a `run` that failed repointed `~/.cache/bisector/last-store` at a store
that was never written and left the demo's upstream and work dirs behind. GOOD and BAD given the
wrong way round said only "is not an ancestor".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitfixtures import commit_file, git
from tests.test_run_cli import CONFIG

ROOT = Path(__file__).resolve().parents[1]


def bisector(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "PYTHONPATH": str(ROOT),
        "BISECTOR_LOCK_DIR": str(tmp / "locks"),
    }
    env.pop("BISECTOR_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp / "here",
        timeout=300,
    )


@pytest.fixture()
def tmp(tmp_path: Path) -> Path:
    """A working dir and a last-store note pointing at a store that exists."""
    (tmp_path / "here").mkdir()
    kept = tmp_path / "kept.sqlite"
    kept.write_bytes(b"")
    note = tmp_path / "cache" / "bisector" / "last-store"
    note.parent.mkdir(parents=True)
    note.write_text(f"{kept}\n")
    return tmp_path


def last_store(tmp: Path) -> str:
    return (tmp / "cache" / "bisector" / "last-store").read_text().strip()


@pytest.mark.parametrize("name", ["cpu-demo.toml", "h200-demo.toml"])
def test_a_demo_config_says_how_to_point_it_at_a_repo(tmp: Path, name: str) -> None:
    for args in (
        ("check-config", str(ROOT / "configs" / name)),
        ("run", "--config", str(ROOT / "configs" / name), "--good", "v1", "--bad", "main"),
        ("build", "--config", str(ROOT / "configs" / name), "main"),
        ("nightly", "--config", str(ROOT / "configs" / name), "--plan-out", "plan.json"),
    ):
        out = bisector(tmp, *args)
        assert out.returncode == 2, out.stderr
        line = out.stderr.strip()
        assert line.count("\n") == 0 and "upstream.repo" in line and str(ROOT / "configs" / name) in line
        assert "bisector demo --dir D" in line and 'repo = "D/upstream"' in line
    assert last_store(tmp) == str(tmp / "kept.sqlite")
    assert sorted(p.name for p in (tmp / "here").iterdir()) == []
    assert not (tmp / "cache" / "bisector" / "work").exists()


def test_a_typo_in_demo_shapes_writes_nothing(tmp: Path) -> None:
    out = bisector(tmp, "demo", "--device", "cpu", "--dir", "d", "--shapes", "fa/s1024,gemm/tal")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: --shapes: no shape or suite named gemm/tal (have: fa/s512,")
    assert not (tmp / "here" / "d").exists()
    assert last_store(tmp) == str(tmp / "kept.sqlite")


def test_a_typo_in_run_shapes_writes_nothing(tmp: Path) -> None:
    repo = tmp / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "lib/gemm.py", f"V = {k}\n", f"v{k} (#{k})", k) for k in (1, 2)]
    (tmp / "cfg.toml").write_text(CONFIG.format(repo=repo, source_dir="."))
    out = bisector(
        tmp,
        "run",
        "--config",
        "../cfg.toml",
        "--good",
        shas[0],
        "--bad",
        shas[1],
        "--work-dir",
        "work",
        "--store",
        "s.sqlite",
        "--shapes",
        "gemm/m65",
    )
    assert out.returncode == 2 and "--shapes: no shape or suite named gemm/m65" in out.stderr
    assert sorted(p.name for p in (tmp / "here").iterdir()) == []
    assert last_store(tmp) == str(tmp / "kept.sqlite")


def test_a_reversed_range_asks_whether_good_and_bad_were_swapped(tmp: Path) -> None:
    repo = tmp / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "lib/gemm.py", f"V = {k}\n", f"v{k} (#{k})", k) for k in (1, 2, 3)]
    (tmp / "cfg.toml").write_text(CONFIG.format(repo=repo, source_dir="."))
    for args in (
        ("range", shas[2], shas[0], "--repo", str(repo)),
        ("run", "--config", "../cfg.toml", "--good", shas[2], "--bad", shas[0], "--work-dir", "work"),
    ):
        out = bisector(tmp, *args)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().endswith("did you swap --good and --bad?"), out.stderr
    assert sorted(p.name for p in (tmp / "here").iterdir()) == []
    # Not every refusal is a swap: two commits of unrelated histories say what they are.
    git(repo, "checkout", "-q", "--orphan", "other")
    other = commit_file(repo, "x.py", "X = 1\n", "unrelated", 4)
    out = bisector(tmp, "range", shas[0], other, "--repo", str(repo))
    assert out.returncode == 2 and "swap" not in out.stderr and "not an ancestor" in out.stderr


def test_an_upstream_that_is_no_repository_is_refused_before_anything_starts(tmp: Path) -> None:
    (tmp / "plain").mkdir()
    (tmp / "cfg.toml").write_text(CONFIG.format(repo=tmp / "plain", source_dir="."))
    for args in (
        ("check-config", "../cfg.toml"),
        ("run", "--config", "../cfg.toml", "--good", "v1", "--bad", "main", "--work-dir", "work"),
    ):
        out = bisector(tmp, *args)
        assert out.returncode == 2, out.stderr
        assert "upstream.repo" in out.stderr and "not a git repository" in out.stderr
    assert sorted(p.name for p in (tmp / "here").iterdir()) == []
    assert last_store(tmp) == str(tmp / "kept.sqlite")

"""Warm and cold (issue #59): a suite may ask for `cache = "warm"`; its trials time the kernels again with
the cache left warm, the search tests that as a shape of its own, a step seen only warm is said to be,
and the report says which shapes' data fits in the device's L2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benches import trial
from bisector import config
from bisector.errors import ConfigError
from bisector.model import WARM_KEY, BuildResult, BuildStatus, Shape, TrialRecord, TrialStatus, base_shape
from bisector.report.cache_fit import cache_fit_lines
from bisector.runner.spec import build_spec
from bisector.search import SearchSettings, localize
from bisector.search.decisions import decision_lines
from bisector.search.samples import trial_views
from bisector.search.simulate import SimStep, StepModel
from bisector.search.simulate_drift import DriftingProbe
from tests.test_config import GOOD, write
from tests.test_trial import spec as trial_spec

WARM = GOOD.replace("[[suites.fa.shapes]]", '[suites.fa]\ncache = "warm"\n[[suites.fa.shapes]]')


def test_a_suite_asks_for_the_warm_cache_and_its_trial_spec_says_so(tmp_path: Path) -> None:
    build = BuildResult(sha="d" * 40, status=BuildStatus.OK, source_dir=str(tmp_path))
    cfg = config.load(write(tmp_path, WARM))
    assert dict(cfg.caches) == {"fa": "warm"}
    assert build_spec(cfg, build, "fa", seed=1)["cache"] == {"fa": "warm"}
    plain = config.load(write(tmp_path, GOOD))
    assert dict(plain.caches) == {} and "cache" not in build_spec(plain, build, "fa", seed=1)  # cold unless asked


def test_a_bad_cache_value_is_one_line_naming_the_key_exit_2(tmp_path: Path) -> None:
    bad = write(tmp_path, WARM.replace('cache = "warm"', 'cache = "hot"'))
    with pytest.raises(ConfigError, match=r"suites\.fa\.cache.*cold, warm.*'hot'"):
        config.load(bad)
    out = subprocess.run(
        [sys.executable, "-m", "bisector", "run", "--config", str(bad), "--good", "a", "--bad", "b"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "suites.fa.cache" in lines[0] and "hot" in lines[0]


def test_a_trial_times_a_warm_suite_again_without_the_flush(tmp_path: Path) -> None:
    warm = trial.run(trial_spec(cache={"gemm": "warm"}), tmp_path / "warm.json")
    for r in warm["results"]:
        assert r["status"] == "ok"
        assert len(r["warm_subject_ms"]) == len(r["warm_control_ms"]) == 3 and r["warm_ratio"] > 0
    cold = trial.run(trial_spec(), tmp_path / "cold.json")
    assert not any(k.startswith("warm_") for r in cold["results"] for k in r)


def record(ratio: float, warm: float | None) -> TrialRecord:
    return TrialRecord(
        sha="a" * 40,
        shape="gemm/d",
        status=TrialStatus.OK,
        subject_ms=(1.0,),
        control_ms=(1.0,),
        ratio=ratio,
        protocol={"warm_ratio": warm} if warm else {},
    )


def test_the_warm_ratio_is_a_view_of_the_trials_where_every_trial_has_it() -> None:
    views, _ = trial_views({"gemm/d": [record(0.9, 1.2), record(0.91, 1.25)]})
    assert views["warm"] == {"gemm/d": (1.2, 1.25)}
    views, _ = trial_views({"gemm/d": [record(0.9, 1.2), record(0.91, None)]})
    assert "warm" not in views
    assert base_shape("gemm/d" + WARM_KEY) == "gemm/d"


def test_a_step_seen_only_warm_is_found_and_reported_as_such() -> None:
    """The warm time's ratio drops 25% at one commit, the cold kernel time is flat: the warm shape's step
    is found and verified, and its line says it was seen only warm."""
    commits = [f"{k:04d}".ljust(40, "b") for k in range(40)]
    shapes = ("gemm/m64",)
    flat = StepModel(dict.fromkeys(shapes, 100.0), (), frozenset())
    warm = StepModel(dict.fromkeys(shapes, 1.0), (SimStep(commits[17], {"gemm/m64": 0.75}),), frozenset())
    probe = DriftingProbe(
        commits, flat, control_drift_pct=0.0, latency=warm, latency_cv=0.01, seed=3, latency_view="warm"
    )
    result = localize(commits, probe, SearchSettings(min_step_pct=3.0))
    assert [(s.commit, s.shapes, s.verified) for s in result.steps] == [(commits[17], ("gemm/m64" + WARM_KEY,), True)]
    assert any(line.startswith(f"gemm/m64 at {commits[17][:7]}: seen only warm") for line in decision_lines(result))


H100 = {"device_name": "NVIDIA H100 80GB HBM3", "l2_cache": 52428800}


def gemm(name: str, m: int, n: int, k: int) -> Shape:
    return Shape("gemm", name, tuple(sorted({"M": m, "N": n, "K": k, "dtype": "bf16", "layout": "nn"}.items())))


def test_the_report_says_which_shapes_data_fits_in_the_l2() -> None:
    decode, big = gemm("decode", 64, 7168, 2048), gemm("m8192", 8192, 8192, 8192)
    lines = cache_fit_lines([decode, big], H100, {})
    assert (
        len(lines) == 1 and lines[0].startswith("gemm/decode: its data (29.") and "50 MiB L2 of NVIDIA H100" in lines[0]
    )
    assert 'cache = "warm"` tests that too' in lines[0]
    assert "and warm (the L2 left warm" in cache_fit_lines([decode], H100, {"gemm": "warm"})[0]
    assert cache_fit_lines([decode], {"device_name": "cpu"}, {}) == []  # no L2 reported: nothing said


@pytest.mark.slow
def test_a_run_on_a_real_upstream_stores_the_warm_time_and_finds_its_step(tmp_path: Path) -> None:
    """`bisector run` on a small git upstream whose GEMM does its work five times over from one commit:
    every trial stores a warm ratio beside the cold one (the runner keeps it), and the step is found
    and verified on the warm shape too."""
    import sqlite3

    from tests.gitfixtures import PLANTED_MATMUL, bisector_run, commit_file, cpu_config, gemm_subject, git

    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = [
        commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1),
        commit_file(repo, "lib/gemm.py", PLANTED_MATMUL.format(extra=0), "add gemm (#2)", 2),
        commit_file(repo, "docs/a.md", "a\n", "docs (#3)", 3),
        commit_file(repo, "lib/gemm.py", PLANTED_MATMUL.format(extra=4), "slower (#4)", 4),
        commit_file(repo, "docs/b.md", "b\n", "docs (#5)", 5),
    ]
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        cpu_config(
            "warm-test",
            repo,
            gemm_subject(256),
            trials=3,
            max_trials=6,
            reps=5,
            min_step_pct=20.0,
            extra='[suites.gemm]\ncache = "warm"\n',
        )
    )
    result = bisector_run(tmp_path, cfg, shas[1], "main", "--no-fixes", "--no-hunks")
    [step] = result["steps"]
    assert step["commit"] == shas[3] and step["verified"]
    assert set(step["change_pct"]) == {"gemm/m256", "gemm/m256" + WARM_KEY}
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        warm = db.execute("SELECT json_extract(protocol, '$.warm_ratio') FROM trials WHERE status = 'ok'").fetchall()
    assert warm and all(w is not None and w > 0 for (w,) in warm)
    assert "warm ratio" in (tmp_path / "report" / "report.md").read_text()

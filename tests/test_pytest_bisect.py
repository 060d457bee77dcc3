"""`bisector run` on an upstream whose own pytest-benchmark file is the subject: each benchmark a
shape, measured per commit in the trial's fresh process; the planted 8x slowdown is found at its
commit (and verified against its parent), its raw rounds stored as trials, end to end on the CPU.
Reverts are left out (--no-fixes): they measure nothing the pytest subject does differently."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitfixtures import benchmark_history, cpu_config

pytestmark = pytest.mark.slow

SUBJECT = """[subject.ops]
pytest = "benchmarks/test_ops.py::test_work"
[[suites.ops.shapes]]
name = "work20k"
benchmark = "test_work[20000]"
"""


def test_pytest_benchmark_subject_bisected_end_to_end(tmp_path: Path) -> None:
    repo = tmp_path / "up"
    shas = benchmark_history(repo)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(
        cpu_config("pytest-bench", repo, SUBJECT, control="none", trials=3, max_trials=6, reps=7, min_step_pct=30.0)
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "run",
            "--config",
            str(cfg),
            "--good",
            shas[1],
            "--bad",
            "main",
            "--store",
            str(tmp_path / "s.sqlite"),
            "--work-dir",
            str(tmp_path / "work"),
            "--report-dir",
            str(tmp_path / "report"),
            "--json",
            "--no-hunks",
            "--no-fixes",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    (step,) = result["steps"]
    assert step["commit"] == shas[4] and step["pr"] == 5
    assert step["change_pct"]["ops/work20k"] < -60  # eight times the work: its speed falls by ~85%
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        rows = db.execute("SELECT status, subject_ms, protocol FROM trials WHERE shape = 'ops/work20k'").fetchall()
    assert rows and all(status == "ok" for status, _, _ in rows)
    for _, ms, protocol in rows:  # the benchmark's raw rounds, as a trial's repetitions
        assert len(json.loads(ms)) == 7
        assert json.loads(protocol)["benchmark"] == "benchmarks/test_ops.py::test_work[20000]"
    assert not (repo / ".pytest_cache").exists()
    report = (tmp_path / "report" / "report.md").read_text()
    assert shas[4][:7] in report

"""The correctness check runs once per commit and shape: later trials of a build whose output
passed skip it (device time goes to timed work), a wrong output keeps being checked, and a changed
tolerance checks again. Real trial processes on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

from bisector.model import TrialStatus
from bisector.runner import run_trial
from tests.test_runner import build_of, make_config, upstream  # noqa: F401 - the fixture


def test_a_later_trial_of_a_checked_commit_skips_the_check(tmp_path: Path, upstream: Path) -> None:  # noqa: F811
    cfg = make_config(tmp_path)
    work = tmp_path / "work"
    first = run_trial(cfg, build_of(upstream), "gemm", work=work, first=True)
    assert all(r.status is TrialStatus.OK and r.max_abs_err is not None for r in first)
    assert {r.protocol["check"] for r in first} == {"done"}
    noted = json.loads(next((work / "checked").glob("*.json")).read_text())
    assert set(noted) == {"gemm/a", "gemm/b"}

    later = run_trial(cfg, build_of(upstream), "gemm", work=work, trial_index=1)
    assert all(r.status is TrialStatus.OK and r.subject_ms for r in later)
    assert all(r.max_abs_err is None and r.protocol["check"].startswith("skipped") for r in later)

    other = run_trial(cfg, build_of(upstream, "b" * 40), "gemm", work=work)  # another commit: its own check
    assert {r.protocol["check"] for r in other} == {"done"}


def test_a_wrong_output_is_checked_in_every_trial(tmp_path: Path, upstream: Path) -> None:  # noqa: F811
    cfg = make_config(tmp_path, gemm_entry="mykern:wrong")
    work = tmp_path / "work"
    for index in range(2):
        recs = run_trial(cfg, build_of(upstream), "gemm", work=work, trial_index=index)
        assert all(r.status is TrialStatus.WRONG and r.max_abs_err >= 90 for r in recs)
    assert not (work / "checked").exists() or not any((work / "checked").iterdir())


def test_a_changed_tolerance_checks_again(tmp_path: Path, upstream: Path) -> None:  # noqa: F811
    work = tmp_path / "work"
    run_trial(make_config(tmp_path), build_of(upstream), "gemm", work=work)
    path = next((work / "checked").glob("*.json"))
    path.write_text(json.dumps({k: [9.0, 9.0] for k in json.loads(path.read_text())}))
    recs = run_trial(make_config(tmp_path), build_of(upstream), "gemm", work=work, trial_index=1)
    assert {r.protocol["check"] for r in recs} == {"done"}

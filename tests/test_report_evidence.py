"""What the report shows as evidence, computed from stored trials and a search result
(bisector/search/evidence.py), and where the report and `store info` say things are."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bisector.commands.store_cmd import command as store_command
from bisector.errors import EXIT_BAD_INPUT
from bisector.model import Measurement, ProbeStatus, SearchResult, TrialRecord, TrialStatus, Uncertain
from bisector.paths import shown
from bisector.report.assemble import shown_upstream
from bisector.search import evidence
from bisector.search.stats import compare
from bisector.store import Store
from bisector.store import last_used as laststore


def trial(
    shape: str, ms: tuple[float, ...], tflops: float, ratio: float, status: TrialStatus = TrialStatus.OK
) -> TrialRecord:
    return TrialRecord(sha="a" * 40, shape=shape, status=status, subject_ms=ms, subject_tflops=tflops, ratio=ratio)


def test_the_metric_per_trial_is_the_ratio_or_the_full_clock_speed_in_tflops() -> None:
    # Five repetitions, the last two throttled by 20%: full clock 1.0 ms, median 1.0 ms.
    steady = trial("fa/s4096", (1.0, 1.0, 1.0, 1.2, 1.2), 400.0, 0.6)
    assert evidence.metric_value(steady, "ratio") == 0.6
    assert evidence.metric_value(steady, "speed") == pytest.approx(400.0)
    # Throttled for most repetitions: the median time is 1.2 ms, the full-clock time 1.0 ms, so the
    # full-clock speed is 20% above the median speed (the same change the search's 1/time sees).
    throttled = trial("fa/s4096", (1.0, 1.0, 1.0, 1.2, 1.2, 1.2, 1.2), 1000.0 / 1.2, 0.6)
    assert evidence.metric_value(throttled, "speed") == pytest.approx(1000.0)
    assert evidence.metric_value(trial("fa/s4096", (), 1.0, 0.5, TrialStatus.WRONG), "ratio") is None
    samples = evidence.metric_samples(
        [steady, throttled, trial("gemm/m8192", (1.0,), 5.0, 0.9)],
        ["fa/s4096", "gemm/m8192"],
        {"fa/s4096": "speed", "gemm/m8192": "ratio"}.get,
    )
    assert samples == {"fa/s4096": (pytest.approx(400.0), pytest.approx(1000.0)), "gemm/m8192": (0.9,)}


def test_an_unsure_pair_is_compared_on_the_samples_the_search_had_at_its_cap() -> None:
    a, b = "a" * 40, "b" * 40
    before, after = (1.0, 1.02, 0.98, 1.01, 5.0), (1.03, 0.99, 1.05, 1.0, 5.0)  # the fifth: after the cap
    result = SearchResult(
        steps=(),
        dropped=(),
        probes=(),
        skipped=(),
        wrong={},
        measurements={
            a: Measurement(a, ProbeStatus.OK, {"s": before}),
            b: Measurement(b, ProbeStatus.OK, {"s": after}),
        },
        uncertain=(Uncertain(a, b, ("s", "gone")),),
    )
    (pair,) = evidence.unsure_pairs(result, max_trials=4, min_step=lambda _: 3.0)
    assert (pair.before, pair.after, pair.shapes) == (a, b, ("s", "gone"))
    (c,) = pair.comparisons  # "gone" has no samples: named, not compared
    expected = compare(before[:4], after[:4], 3.0, 1.0, "s")
    assert (c.n_before, c.n_after) == (4, 4)
    assert c.change_pct == pytest.approx(expected.change_pct) and c.ci95 == pytest.approx(expected.ci95)


def test_paths_in_a_report_are_relative_to_it_or_just_a_name() -> None:
    assert shown("/tmp/x/d/upstream", "/tmp/x/d/report") == "../upstream"
    assert shown("/tmp/x/d/report/logs/a.log", "/tmp/x/d/report") == "logs/a.log"
    assert shown("/tmp/d/upstream", "/work/bisector/reports/2026-12-01-h200-demo") == "upstream"
    assert shown_upstream("/tmp/x/d/upstream", Path("/tmp/x/d/report")) == "../upstream"
    assert shown_upstream("https://user:ghp_secret@github.com/o/r.git", Path("/r")) == "https://github.com/o/r.git"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user cache dir and a current directory of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("BISECTOR_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_store_info_reads_the_store_the_last_run_used_and_says_so(cache: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(store_command, ["info"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "no store found; looked at no store recorded in" in result.output
    assert str(cache / "bisector-demo" / "results.sqlite") in result.output and "(pass --store)" in result.output

    demo = cache / "bisector-demo" / "results.sqlite"
    Store(demo).close()
    result = runner.invoke(store_command, ["info"])
    assert result.exit_code == 0, result.output
    assert f"store: {demo} (the demo's store in the current directory)" in result.output

    elsewhere = cache / "runs" / "s.sqlite"
    Store(elsewhere).close()
    laststore.remember(elsewhere)  # what `run` and `demo` do before they measure
    result = runner.invoke(store_command, ["info"])
    assert f"store: {elsewhere} (the store the last `bisector run` or `demo` used)" in result.output
    result = runner.invoke(store_command, ["export", "--format", "json"])
    assert result.exit_code == 0 and f"store: {elsewhere} (the store the last" in result.stderr
    assert result.stdout.strip() == "[]"

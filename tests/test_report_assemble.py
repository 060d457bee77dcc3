"""The report is assembled in bisector/report/assemble.py from the stages' results alone: the
pipeline hands them over and fills no report field itself. Checked on the CPU demo replayed
offline from its committed store (tests/fixtures/cpu-demo.sqlite.gz): the results the pipeline
handed over make the same report again with the store gone, and what each stage made is on it."""

from __future__ import annotations

import gzip
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from bisector import pipeline
from bisector.demo import write_demo_repo
from bisector.demo.demo_config import demo_config
from bisector.report import assemble
from bisector.report.assemble import OFFLINE_NOTE, RunFacts, StageResults

STORE = Path(__file__).parent / "fixtures" / "cpu-demo.sqlite.gz"


@pytest.fixture(scope="module")
def handed(tmp_path_factory: pytest.TempPathFactory) -> tuple[StageResults, RunFacts, pipeline.RunOutcome]:
    """What the pipeline handed to report_data in the CPU demo's offline replay, and its outcome."""
    tmp = tmp_path_factory.mktemp("demo")
    manifest = write_demo_repo(tmp / "upstream")
    store = tmp / "results.sqlite"
    with gzip.open(STORE) as src, open(store, "wb") as dst:
        shutil.copyfileobj(src, dst)
    seen: list[tuple[StageResults, RunFacts]] = []

    def recording(stages: StageResults, run: RunFacts):  # the real function, its arguments kept
        seen.append((stages, run))
        return assemble.report_data(stages, run)

    config = demo_config("cpu", tmp / "upstream")
    options = pipeline.RunOptions(
        good=manifest.good,
        bad=manifest.bad,
        store=str(store),
        work_dir=str(tmp / "work"),
        report_dir=str(tmp / "report"),
        offline=True,
        notes=("a caller's note",),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "report_data", recording)
        outcome = pipeline.bisect(config, options)
    store.unlink()  # nothing below may read it
    assert len(seen) == 1
    return seen[0][0], seen[0][1], outcome


def test_the_report_is_made_from_the_handed_results_alone(handed) -> None:
    stages, run, outcome = handed
    assert assemble.report_data(stages, run) == outcome.report


def test_what_each_stage_made_is_on_the_report(handed) -> None:
    stages, run, outcome = handed
    data = outcome.report
    assert data.steps and len(data.steps) == len(stages.result.steps)
    assert [s.commit for s in data.steps] == [s.commit for s in stages.result.steps]
    assert data.fixes == stages.fixes and data.hunks == stages.hunks and data.interactions == stages.interactions
    assert data.kernels == stages.kernels and data.causes == stages.causes
    assert data.throughput is stages.throughput and data.isolation == run.isolation
    assert data.wrong_windows == stages.windows
    assert data.notes[:2] == ("a caller's note", OFFLINE_NOTE)
    assert data.range_commits == stages.commits and data.good == stages.commits[0]


def test_the_run_facts_change_only_what_they_say(handed) -> None:
    stages, run, _ = handed
    before = assemble.report_data(stages, run)
    after = assemble.report_data(
        stages, replace(run, offline=False, notes=(), wall_s=run.wall_s + 60, command="bisector demo", isolation="none")
    )
    assert OFFLINE_NOTE not in after.notes and "a caller's note" not in after.notes
    assert after.wall_s == before.wall_s + 60 and after.isolation == "none"
    assert after.reproduce != before.reproduce and "bisector demo" in after.reproduce[0]
    assert after.steps == before.steps and after.rows == before.rows


def test_a_steps_trials_from_a_fresh_lineage_are_said(handed) -> None:
    """The demo verified its steps on a fresh worker lineage; with no trial of a fresh one, no."""
    stages, run, _ = handed
    assert assemble.report_data(stages, run).fresh_lineage
    steps = {s.commit for s in stages.result.steps}
    one_lineage = tuple(
        replace(t, protocol={**t.protocol, "worker": {"lineage": 0}}) if t.sha in steps else t for t in stages.stored
    )
    assert not assemble.report_data(replace(stages, stored=one_lineage), run).fresh_lineage

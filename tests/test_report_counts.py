"""One meaning of "trials" (issue 61): trial processes, in the report's header, `--json` and
`store info`; the rows each process stores, one per shape, are "measurements".

A demo-sized store written through the real Store: 42 commits, 31 measured, processes measuring two
shapes or only the shapes a split left open, patched builds, a crash, a resumed call."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from bisector.commands.run_job import outcome_json
from bisector.commands.store_cmd import command as store_command
from bisector.model import SearchResult, TrialRecord, TrialStatus
from bisector.pipeline import RunOutcome
from bisector.report import markdown
from bisector.store import Store
from bisector.store.totals import CallTotals, run_totals
from tests.report_fixtures import full_report, sha

CAMPAIGN = "cpu-demo:../upstream"
SHAPES = ("fa/s1024", "gemm/tall")


def demo_sized_store(path: Path) -> tuple[int, int]:
    """(trial processes, measurements) written: the CPU demo's counts, roughly (~340 processes)."""
    rng = random.Random(61)
    records: list[TrialRecord] = []
    processes = 0

    def process(
        commit: str, slot: int, shapes: tuple[str, ...], patch: str | None = None, status: TrialStatus = TrialStatus.OK
    ) -> None:
        nonlocal processes
        processes += 1
        minute = processes // 60
        for shape in shapes:
            records.append(
                TrialRecord(
                    commit,
                    shape,
                    status,
                    subject_ms=(1.0, 1.1),
                    control_ms=(0.9, 0.95),
                    subject_tflops=0.02,
                    control_tflops=0.05,
                    ratio=0.4 * rng.gauss(1, 0.05),
                    patch_hash=patch,
                    slot=slot,
                    started_at=f"2026-12-02T10:{minute:02d}:{processes % 60:02d}+00:00",
                    finished_at=f"2026-12-02T10:{minute:02d}:{processes % 60:02d}+00:00",
                )
            )

    measured = [i for i in range(42) if i % 4 != 3][:31]
    for i in measured:
        for slot in range(rng.randint(3, 12)):
            # a split point measured on the shapes still open: some processes time one shape only
            process(sha(i), slot, SHAPES if slot < 3 or rng.random() < 0.5 else SHAPES[:1])
    process(sha(7), 99, SHAPES, status=TrialStatus.CRASH)
    for k in range(6):  # reverts and hunk subsets
        for slot in range(15):
            process(sha(41), slot, SHAPES[k % 2 : k % 2 + 1], patch=f"patch{k}")
    with Store(path) as store:
        store.add_trials(CAMPAIGN, records)
    return processes, len(records)


def test_trials_are_trial_processes_in_the_header_json_and_store_info(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    processes, rows = demo_sized_store(path)
    assert rows > processes > 300

    info = CliRunner().invoke(store_command, ["info", "--store", str(path), "--json"])
    assert info.exit_code == 0, info.output
    (campaign,) = json.loads(info.output)["campaigns"]
    assert (campaign["trials"], campaign["measurements"]) == (processes, rows)
    table = CliRunner().invoke(store_command, ["info", "--store", str(path)]).output
    assert "trials" in table and "measurements" in table
    assert next(x for x in table.splitlines() if x.startswith(CAMPAIGN)).split()[3:5] == [str(processes), str(rows)]

    with Store(path, readonly=True) as store:
        every = store.trials(CAMPAIGN)
    totals = run_totals(every, [sha(i) for i in range(42)], SHAPES, 0, CallTotals(processes - 40, 300.0))
    data = replace(full_report(), totals=totals)
    header = "\n".join(markdown.header(data))
    assert re.search(rf"; {processes} trials \(", header), header

    # the search's own share is not the run's trials
    search = SearchResult(steps=(), dropped=(), probes=(), measurements={}, skipped=(), wrong={}, processes=180)
    printed = outcome_json(RunOutcome(search, tmp_path, data, data.range_commits))
    assert printed["trials"] == printed["totals"]["trials"] == processes
    assert printed["search_trials"] == 180

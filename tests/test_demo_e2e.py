"""`bisector demo --device cpu`, end to end and for real: 40 commits, trial processes, the store.

In the default run (`python -m pytest -m demo_e2e` for it alone). It was opt-in for most of 2026-12-02: in some
fresh clones on the 2-core CI VM a build read a shape up to 4x slower over all its trials, faulting
thousands of pages per timed call. The cause (studies/results/cpu-slow-builds.txt, part 10): dask's
Nanny writes MALLOC_TRIM_THRESHOLD_=65536 into the environment of the process that starts a
LocalCluster; the xdist worker that had run the dask test passed it on to this test's bot, whose CPU
trials then ran in glibc's history-dependent trim regime (on the VM of 2026-12-02 it hid the planted
#115 in 3 of 5 clones). The runner's thresholds now override what the bot inherits, and the test
asserts every trial ran with them.
It asserts on what the run found, never on its speed: on a busy 2-core machine the search buys more
trials, or reports a pair unsure, rather than miss a step. Each CPU trial records the page faults of
its timed calls (`timed_faults`), where its inputs lay in a page (`input_page_offsets`) and its
worker lineage; a failure's message prints them per commit. The search's side (what it does with
the noise it gets) is covered without a clock by studies/demo_replay.py and tests/test_search.py.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bisector.demo import write_demo_repo
from bisector.demo.demo_config import demo_config

pytestmark = [pytest.mark.slow, pytest.mark.demo_e2e]


# Two shapes that every plant moves (the attention one: dropped remap, dropped fast math, the smaller
# key blocks of the sliding-window commit; the tall
# GEMM: the retune, GROUP_M, num_stages, the wrong-result window), at half a trial's cost.
SHAPES = ("fa/s1024", "gemm/tall")


def demo(tmp: Path) -> tuple[dict, float]:
    started = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "demo",
            "--device",
            "cpu",
            "--dir",
            str(tmp / "d"),
            "--report-dir",
            str(tmp / "report"),
            "--shapes",
            ",".join(SHAPES),
            "--no-fixes",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), time.monotonic() - started


def trial_count(tmp: Path) -> int:
    with sqlite3.connect(tmp / "d" / "results.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


def measured(tmp: Path, commits: list[str]) -> str:
    """What the search saw, for a failure's message: per commit probed, each shape's trials, median
    ratio, median page faults per timed subject call, its first input's page offsets and the median
    per worker lineage (a step missed on a noisy machine shows here as two levels too close to call;
    a build slowed by faulting calls, as thousands of faults; one whose inputs lay elsewhere than its
    neighbours', as other offsets; one slow in one lineage only, as lineages that disagree)."""
    with sqlite3.connect(tmp / "d" / "results.sqlite") as db:
        rows = db.execute(
            "SELECT sha, shape, ratio, protocol FROM trials WHERE status = 'ok' AND ratio IS NOT NULL "
            "AND (patch_hash IS NULL OR patch_hash = '')"
        ).fetchall()
    per: dict[tuple[int, str], list[tuple[float, float, int, int]]] = {}
    for sha, shape, ratio, protocol in rows:
        record = json.loads(protocol)
        faults = (record.get("timed_faults") or [0])[0] or 0
        per.setdefault((commits.index(sha), shape), []).append(
            (
                ratio,
                faults,
                next(iter((record.get("input_page_offsets") or {}).values()), -1),
                int((record.get("worker") or {}).get("lineage") or 0),
            )
        )

    def lineages(v: list[tuple[float, float, int, int]]) -> str:
        return ", ".join(
            f"{k}: {statistics.median(r for r, _, _, q in v if q == k):.3f}" for k in sorted({q for *_, q in v})
        )

    return "; ".join(
        f"{i}:{shape} n={len(v)} {statistics.median(r for r, *_ in v):.3f} "
        f"({statistics.median(f for _, f, _, _ in v):.0f} faults, "
        f"1st input at {sorted({a for _, _, a, _ in v})}, by lineage {lineages(v)})"
        for (i, shape), v in sorted(per.items())
    )


def test_cpu_demo_finds_every_planted_step_flags_wrong_results_and_skips(tmp_path: Path) -> None:
    result, seconds = demo(tmp_path)
    manifest = write_demo_repo(Path(result["repo"]))
    commits = list(manifest.commits)
    found = {s["commit"]: s for s in result["steps"]}
    seen = measured(tmp_path, commits)
    planted = {p.sha for p in manifest.steps("cpu")}
    assert set(found) <= planted, f"steps not planted: {sorted(set(found) - planted)}; measured: {seen}"
    # Every planted step is found, or lies in a pair the run reports as unsure on a shape it moves: on
    # a noisy machine the tool may say "more trials needed here" (replays of real stores: 96-100%
    # found, 99.5-100% found or reported unsure; python -m studies.demo_replay), never nothing.
    unsure = [(commits.index(u["before"]), commits.index(u["after"]), set(u["shapes"])) for u in result["uncertain"]]
    for plant in manifest.steps("cpu"):
        k = commits.index(plant.sha)
        assert plant.sha in found or any(a < k <= b and shapes & set(plant.moves["cpu"]) for a, b, shapes in unsure), (
            f"planted {plant.role} (#{plant.pr}) neither found nor reported unsure; measured: {seen}"
        )
    for plant in (p for p in manifest.steps("cpu") if p.sha in found):
        step = found[plant.sha]
        assert step["pr"] == plant.pr
        # Shapes planted at 28% or more must be named; at 24-27%, two to three times the 12% floor,
        # a step may be confirmed on part of its shapes when trials fall on the two noise levels.
        moved = {k for k, v in plant.moves["cpu"].items() if v is not None and abs(v) >= 28 and k in SHAPES}
        assert moved <= set(step["shapes"]), (plant.role, step["shapes"])
        sign = -1 if plant.kind == "regression" else 1
        assert all(sign * step["change_pct"][k] > 0 for k in moved)
    # Down to the hunk: every plant edits the CPU kernel and its Triton twin; on the CPU the CPU hunk
    # carries the step (fast-math's two hunks only together: a defaulted flag and the call dropping it;
    # the sliding-window commit's key block, not the plumbing that threads `window` through every caller).
    hunks = {h["commit"]: h for h in result["hunks"]}
    assert set(hunks) == set(found)
    misread = []
    for plant in (p for p in manifest.steps("cpu") if p.sha in found):
        h = hunks[plant.sha]
        # On a busy machine a hunk search may keep a Triton hunk beside the CPU one, never lose the CPU hunk
        assert any(label.startswith("demolib/cpu_") for label in h["hunks"]), (plant.role, h)
        if h["unsettled"]:
            # A subset still unclear after its rounds was placed by its point estimate, and the finding
            # says so (seen once: the carrying hunk read -7.4% over 12 trials where its step read -25%).
            assert "stayed unclear after" in h["summary"], h
            continue
        exact = (
            all(label.startswith("demolib/cpu_") for label in h["hunks"])
            and h["alone"] == (plant.role != "fastmath_dropped")
            and len(h["hunks"]) == (1 if h["alone"] else 2)
        )
        if not exact:
            misread.append((plant.role, h))
        elif plant.role == "fa_window":
            assert len(h["plumbing"]) >= 5 and not set(h["hunks"]) & set(h["plumbing"]), h
            assert h["hunks"][0].startswith("demolib/cpu_fa.py @@ -12,") and "on top of" in h["summary"], h
    # "The CPU hunk alone does not carry it", read twice (or two of three looks) on trials with both
    # cores spun: one such pair of misreads in a run, not a search that keeps inert hunks everywhere
    # (seen once, on #131: the CPU hunk and its Triton twin reported as carrying the step only together).
    assert len(misread) <= 1, misread
    assert manifest.sha("broken_import") in result["skipped"]
    (window,) = result["wrong_windows"]
    assert window["first"] == manifest.sha("wrong_result")
    assert window["fixed"] == manifest.sha("wrong_result_fixed")
    assert set(window["shapes"]) == {"gemm/tall"}

    report = (tmp_path / "report" / "report.md").read_text()
    assert "| cpu-demo" not in report and "torch (control)" in report
    for plant in (p for p in manifest.steps("cpu") if p.sha in found):
        assert f"#{plant.pr}" in report
    assert f"wrong from `{manifest.sha('wrong_result')[:7]}` (#{manifest.pr('wrong_result')})" in report
    assert len(list((tmp_path / "report").glob("tflops-*.png"))) == len(SHAPES)
    assert (tmp_path / "report" / "trials.csv.gz").stat().st_size > 0
    # Its cost, counted rather than timed: at most the trial cap for every commit probed; for each
    # step's verification two looks at most (the second from another lineage, before a step is
    # dropped), each of fresh trials a side that double up to the cap, each round taking new ones
    # (2 + 4 + ... + cap: under twice the cap a side); and the whole-change check's fresh trials of
    # GOOD and BAD on each of its passes. Over that, the search probes more than its own rules allow.
    protocol = demo_config("cpu", Path(result["repo"])).protocol
    most = max(protocol.max_trials, 2 * protocol.trials)
    cap = (
        protocol.max_trials * result["probes"]
        + 2 * 4 * most * (len(result["steps"]) + len(result["dropped"]))
        + 2 * protocol.trials * (1 + 2)
    )  # rechecks: bisector.search.Settings.rechecks (2)
    assert result["search_trials"] <= cap, (
        f"the CPU demo's search took {result['search_trials']} trials ({seconds:.0f} s)"
    )
    # One meaning of "trials": trial processes, the same count in --json, the header and `store info`.
    header = next(line for line in report.splitlines() if line.startswith("Upstream "))
    info = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "store",
            "info",
            "--json",
            "--store",
            str(tmp_path / "d" / "results.sqlite"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (campaign,) = json.loads(info.stdout)["campaigns"]
    assert result["trials"] == result["totals"]["trials"] == campaign["trials"], (result["totals"], campaign)
    assert f"; {campaign['trials']} trials" in header, header
    before = trial_count(tmp_path)
    # Every CPU trial ran with the runner's malloc thresholds, whatever this process's environment
    # held (a dask LocalCluster started by an earlier test in it leaves a 64 KiB trim threshold).
    with sqlite3.connect(tmp_path / "d" / "results.sqlite") as db:
        pinned = {row[0] for row in db.execute("SELECT json_extract(protocol, '$.malloc_pinned') FROM trials")}
    assert {json.loads(p)["MALLOC_TRIM_THRESHOLD_"] for p in pinned if p} == {64 << 20}, pinned

    # Resumable: the same command again measures nothing new and finds the same steps.
    again, _ = demo(tmp_path)
    assert trial_count(tmp_path) == before
    assert [s["commit"] for s in again["steps"]] == [s["commit"] for s in result["steps"]]

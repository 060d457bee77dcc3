"""Reports that agree with themselves (issue 21): the action summary first in report.md and in the
PR comment, p-values and PR lists written as they are, the steps that hide a revert named, one set
of counts (bisector/store/totals.py) from stored trials."""

from __future__ import annotations

from dataclasses import replace

from bisector.model import Comparison, TrialRecord, TrialStatus, Verdict
from bisector.publish import messages
from bisector.report import markdown
from bisector.report.action_summary import summary_lines
from bisector.report.figures import p_value
from bisector.search.wrong_results import WrongResult
from bisector.store.totals import CallTotals, run_totals
from bisector.triggers.outcome_plan import build
from bisector.why.facts import actions
from bisector.why.fixes import FixResult
from bisector.why.interactions import Interaction, PairEffect
from tests.report_fixtures import full_report, sha


def test_p_values_below_the_floor_and_above() -> None:
    assert [p_value(p) for p in (0.0, 5e-210, 9.9e-13, 4e-9, 0.00049, 0.0123, 0.2)] == [
        "< 1e-12",
        "< 1e-12",
        "< 1e-12",
        "4e-9",
        "5e-4",
        "0.012",
        "0.2",
    ]
    steps = "\n".join(markdown.steps_section(full_report()))
    assert "| < 1e-12 |" in steps and "e-30" not in steps and "| 0 |" not in steps


def test_the_action_summary_opens_the_report_and_the_pr_comment() -> None:
    data = full_report()
    text = markdown.render(data).splitlines()
    opening = summary_lines(data)
    assert text[0] == f"# {data.title}" and text[2 : 2 + len(opening)] == opening
    first = next(i for i, line in enumerate(text) if line.startswith("1. "))
    # the largest gain first: the fix by hand of #1008 (+4.1% to give back) before the revert of
    # #1004 (+9.7% on one shape, -4.8% on the other: +2.5% over its shapes)
    assert first < 15 and "`0008ccc` (#1008)" in text[first] and "+4.1%" in text[first]
    assert "`0004ccc` (#1004)" in text[first + 1] and "**restored**" in text[first + 1]
    assert text.index(next(line for line in text if line.startswith("## Steps"))) > first

    plan = build(data, "run-1", "ada/lib", "\n".join(text))
    # The PR that asked for the run reads the run's list; a culprit's comment opens with its own step
    # (issue 64): the run's list is not in it.
    lines = messages.requester_body(replace(plan, requester_pr=7)).splitlines()
    start = lines.index(opening[0])
    assert start < 8 and lines[start : start + len(opening)] == opening, lines[:8]
    culprit = messages.culprit_body(plan, plan.culprits[0]).splitlines()
    assert culprit[3].startswith("regression at `0004ccc` (#1004)") and opening[0] not in culprit


def test_a_wrong_window_lists_its_prs_not_a_numeric_range() -> None:
    data = full_report()
    cs = data.range_commits
    # PRs out of numeric order, as merges land: #1006 .. #1003 would claim #1004 and #1005.
    shuffled = tuple(replace(c, pr={5: 1006, 6: 1002, 7: 1003}.get(i, c.pr)) for i, c in enumerate(cs))
    wrong = tuple(WrongResult(c.sha, "gemm/m8192", 18.0, 0.0352) for c in cs[5:8])
    rows = markdown.wrong_rows(replace(data, range_commits=shuffled, wrong=wrong))
    assert rows[0][1] == "#1006, #1002, #1003" and ".." not in rows[0][1]


def test_a_revert_hidden_by_another_step_says_so_first() -> None:
    data = full_report()
    cs = data.range_commits
    late = next(s for s in data.steps if s.commit == cs[8].sha)
    fa = data.steps[0]

    def c(lo: float, hi: float) -> Comparison:
        return Comparison(
            "fa/s4096", Verdict.DIFFERENT if lo > 0 or hi < 0 else Verdict.UNKNOWN, (lo + hi) / 2, (lo, hi), 1e-3, 4, 4
        )

    hidden = FixResult(
        late.commit,
        "revert.patch",
        True,
        shapes=("fa/s4096",),
        vs_parent={"fa/s4096": c(-14.0, -12.0)},
        vs_tip={"fa/s4096": c(-0.4, 0.4)},
        own_pct=dict(late.change_pct),
        min_step_pct=3.0,
    )
    pair = PairEffect(fa.commit, late.commit, "fa/s4096", 9.7, 14.0, 0.0, 4.1, 4.0, (2.0, 6.0), "hide")
    inter = Interaction((fa.commit, late.commit), ("fa/s4096",), pairs=(pair,))
    fixes = (data.fixes[0], hidden)
    data = replace(data, fixes=fixes, interactions=(inter,), actions=actions(data.steps, fixes, (inter,)))
    lines = summary_lines(data)
    item = next(line for line in lines if "Revert `0008ccc` (#1008)" in line)
    assert "s4096 +0.0% [-0.4, +0.4] **not restored**" in item and "undoing its own step should give +4.1%" in item
    # its numbers with the other reverted are the interactions' (a pair's line), not this item's
    assert "`0004ccc` (#1004) hides part of it or is hidden by it (see the steps that interact)" in item
    cell = "\n".join(markdown.fixes_section(data))
    assert "with `0004ccc` (#1004) reverted too it gains +4.1% (hidden in part by it)" in cell


def trial(
    sha_: str,
    slot: int,
    start: int,
    end: int,
    status: TrialStatus = TrialStatus.OK,
    patch: str | None = None,
    shape: str = "gemm/m8192",
) -> TrialRecord:
    return TrialRecord(
        sha_,
        shape,
        status,
        slot=slot,
        patch_hash=patch,
        started_at=f"2026-12-01T10:{start:02d}:00+00:00",
        finished_at=f"2026-12-01T10:{end:02d}:00+00:00",
    )


def test_totals_count_processes_commits_and_the_time_anything_ran() -> None:
    shas = [sha(i) for i in range(5)]
    records = [
        trial(shas[0], 0, 0, 2),
        trial(shas[0], 0, 0, 2, shape="fa/s4096"),  # one process, two shapes
        trial(shas[0], 1, 1, 3),
        trial(shas[4], 0, 10, 11, TrialStatus.WRONG),
        trial(shas[4], 0, 12, 13, patch="p"),
        trial(shas[2], 0, 20, 21, TrialStatus.CRASH),
        trial(sha(9), 0, 30, 40),
    ]  # outside the range
    totals = run_totals(records, shas, ("gemm/m8192", "fa/s4096"), skipped=1, this_call=CallTotals(2, 600.0))
    assert (totals.range_commits, totals.measured, totals.trials, totals.commit_trials, totals.patched_trials) == (
        5,
        2,
        5,
        4,
        1,
    )
    assert totals.measuring_s == 6 * 60 and totals.trial_s == 7 * 60 and totals.resumed
    assert totals.counts() == (
        "5 commits (GOOD and BAD included), 2 measured, 1 skipped (did not build or run); "
        "5 trials (4 on the commits, 1 on patched builds)"
    )
    assert "this call: 2 trials, 10.0 min" in totals.times() and "over every call" in totals.times()


def test_a_commit_wrong_in_every_shape_is_measured_and_has_its_row() -> None:
    data = full_report()
    assert data.totals is not None and data.totals.measured == len(data.rows)
    table = "\n".join(markdown.commits_section(data))
    assert all(f"`{r.commit.short}`" in table for r in data.rows)


def test_steps_show_the_subjects_tflops_and_a_control_that_moved() -> None:
    steps = "\n".join(markdown.steps_section(full_report()))
    # the control moved with the commit: the subject's own change is the headline, the ratio beside it
    assert "| 0.8301 → 0.5902 | -28.9% | [-29.3, -28.5] | **-20.0%** (control +12.6% ⚠) |" in steps
    assert "moves with the machine (clocks, load) and also with the commit" in steps
    assert "not with the commit" not in steps
    assert "control +12.6% on this commit against its parent (the step's noise: ±1.5%)" in steps
    header = "\n".join(markdown.header(full_report()))
    assert "torch 2.11.0 (CUDA 13.0), triton 3.6.0" in header
    assert "ratio = subject TFLOP/s / control TFLOP/s" in header and "full-clock TFLOP/s = " in header


def test_no_regression_says_there_is_nothing_to_do() -> None:
    data = full_report()
    quiet = replace(data, steps=(), fixes=(), actions=())
    assert summary_lines(quiet) == ["**What to do**: nothing; no verified regression in this range."]


def test_a_pair_slower_past_the_step_but_unsure_at_the_cap_asks_for_more_trials() -> None:
    """A 4x slowdown left unsure at a low trial cap (its interval wholly past the minimum step, its
    p-value not at the test's level) is not "nothing to do": the summary names it and the cap."""
    from bisector.search.evidence import UnsurePair

    data = full_report()
    quiet = replace(data, steps=(), fixes=(), actions=())
    a, b = data.rows[1].commit, data.rows[2].commit
    slower = Comparison("gemm/a", Verdict.UNKNOWN, -93.8, (-98.5, -74.0), 0.02, 4, 4)
    within = Comparison("gemm/b", Verdict.UNKNOWN, -20.0, (-60.0, +30.0), 0.3, 4, 4)
    (line,) = summary_lines(replace(quiet, unsure=(UnsurePair(a.sha, b.sha, ("gemm/a", "gemm/b"), (slower, within)),)))
    assert "raise `protocol.max_trials` (now 8)" in line
    assert f"`{a.short}`" in line and "gemm/a -93.8% [-98.5, -74.0]" in line and "gemm/b" not in line

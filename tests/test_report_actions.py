"""Reports whose numbers agree (issue 61): one estimator for a revert's gain wherever it is named,
"What to do" ranked by the gain measured on the tip with every number found in the table it comes
from, reverts that apply only together, fixes by hand with their size, and three reverts read together."""

from __future__ import annotations

import re

from bisector.config import Thresholds
from bisector.model import Step
from bisector.report import markdown
from bisector.report.action_summary import summary_lines
from bisector.search.samples import PooledNoise
from bisector.why import interactions
from tests.report_fixtures import interacting_report

PCT = re.compile(r"[+-]\d+\.\d%")


def _tables(text: str) -> str:
    """Every table row of the report below its action summary."""
    body = text.split("\n## ", 1)[1]
    return "\n".join(line for line in body.splitlines() if line.lstrip().startswith("|"))


def test_every_percentage_in_what_to_do_is_in_the_table_it_comes_from() -> None:
    data = interacting_report()
    text = markdown.render(data)
    tables = _tables(text)
    items = [line for line in summary_lines(data) if re.match(r"\d+\. ", line)]
    assert len(items) == 5
    for item in items:
        found = PCT.findall(item)
        assert found, item  # each item has its number
        missing = [p for p in found if p not in tables]
        assert not missing, (missing, item)


def test_what_to_do_is_ranked_by_gain_with_reverts_together_and_the_fix_by_hand() -> None:
    data = interacting_report()
    items = [line for line in summary_lines(data) if re.match(r"\d+\. ", line)]
    firsts = [float(PCT.search(item).group(0)[:-1]) for item in items]  # type: ignore[union-attr]
    assert firsts == sorted(firsts, reverse=True) == [579.7, 357.0, 173.8, 161.8, 59.2]
    assert items[0].startswith("1. Revert `0003ccc` (#1003), `0006ccc` (#1006) and `0009ccc` (#1009) together")
    assert "`0006ccc` (#1006): its revert applies only with the others" in items[1]
    assert items[4].startswith("5. Fix `0006ccc` (#1006)") and "by hand" in items[4] and "+59.2%" in items[4]


def test_three_reverts_are_read_together_not_in_pairs_only() -> None:
    text = "\n".join(markdown.why.interactions_section(interacting_report()))
    assert (
        "reverting `0003ccc` (#1003) (its step -39.9%) once `0006ccc` (#1006) + `0009ccc` (#1009) are "
        "reverted adds +48.7% (all 3 +579.7% against +357.0% without it)"
    ) in text


def test_a_pairs_line_reads_the_gains_its_table_shows() -> None:
    """A wild trial of one revert: its row (compare_pooled leaves it out) and the pair's line agree."""

    def build(level: float) -> tuple[float, ...]:
        return tuple(level * (1 + 0.004 * ((i * 7) % 5 - 2)) for i in range(6))

    tip, a, b, ab = build(1.0), list(build(1.5)), build(1.2), build(1.5 * 1.2)
    a[2] *= 1.6  # a disturbed trial
    steps = [Step(c, "p", ("fa/s",), {"fa/s": -30.0}, {"fa/s": (-31.0, -29.0)}, {"fa/s": 1e-9}) for c in "ab"]
    plan = interactions.Plan(tuple(steps), ("fa/s",), "", {}, {})
    samples = {(): {"fa/s": tip}, ("a",): {"fa/s": tuple(a)}, ("b",): {"fa/s": b}, ("a", "b"): {"fa/s": ab}}
    noise = {"fa/s": PooledNoise(0.004, 0.05, 200.0)}
    inter = interactions.result(plan, samples, {}, {}, 6, Thresholds(min_step_pct=3.0), noise)
    rows = {c.reverted: c.gain_pct["fa/s"] for c in inter.combos if c.reverted}
    (pair,) = inter.pairs
    assert pair.alone_pct == rows[("a",)] and pair.other_alone_pct == rows[("b",)]
    assert abs((1 + pair.with_other_pct / 100) - (1 + rows[("a", "b")] / 100) / (1 + rows[("b",)] / 100)) < 1e-9
    assert abs(rows[("a",)] - 50.0) < 1.0  # the wild trial left out of both
    # the interval is the samples' spread around that point (finite: the spread is the samples' own)
    lo, hi = pair.ci95
    assert -50.0 < lo < pair.interaction_pct < hi < 50.0, pair


def test_the_steps_change_is_recomputable_from_the_levels_it_shows() -> None:
    """A real search on noisy trials (a wild one among them): the Steps table shows the parent's and
    the culprit's levels its change was read from, and the change is their ratio to the rounding."""
    from dataclasses import replace as with_

    from bisector.search import SearchSettings, localize
    from bisector.search.simulate import SimStep, SimulatedProbe, StepModel
    from tests.report_fixtures import full_report

    commits = [f"{i:040x}" for i in range(60)]
    model = StepModel({"gemm/m8192": 1.0}, (SimStep(commits[23], {"gemm/m8192": 0.62}),), frozenset())
    result = localize(commits, SimulatedProbe(commits, model, noise_cv=0.05, seed=3), SearchSettings(min_step_pct=5.0))
    (step,) = result.steps
    data = with_(full_report(), steps=result.steps, moves=(), metric={"gemm": "ratio"})
    (row,) = [line for line in markdown.steps_table(data)[2:]]
    cells = [c.strip() for c in row.strip("|").split("|")]
    before, after = (float(x) for x in cells[5].split(" → "))
    shown = float(cells[6].rstrip("%"))
    assert shown == round(step.change_pct["gemm/m8192"], 1)
    assert abs(100 * (after / before - 1) - shown) < 0.1, (cells[5], shown)


def test_where_the_control_moves_with_the_revert_the_subjects_own_speed_is_the_headline() -> None:
    """A power-bound GEMM (an H200 demo): the revert's ratio gained +69.1% on the tip while the
    subject's own TFLOP/s gained +39.3% (630.9 against 453.0): the control fell with the revert."""
    from dataclasses import replace as with_

    from bisector.model import Comparison, Verdict
    from bisector.why.facts import actions
    from bisector.why.fixes import FixResult
    from tests.report_fixtures import series

    data = series(10, list(range(11)), {4: -40.9}, ("gemm/m54560",), trials=6)
    (step,) = data.steps
    k = "gemm/m54560"
    fix = FixResult(
        step.commit,
        "/abs/revert.patch",
        True,
        shapes=(k,),
        baseline={k: 660.8},
        tip={k: 453.0},
        restored={k: 630.9},
        vs_parent={k: Comparison(k, Verdict.SAME, -0.0, (-0.6, 0.5), 0.9, 4, 4)},
        vs_tip={k: Comparison(k, Verdict.DIFFERENT, 69.1, (68.3, 69.9), 1e-9, 4, 4)},
        trials=4,
        own_pct=dict(step.change_pct),
        min_step_pct=3.0,
    )
    data = with_(data, fixes=(fix,), actions=actions(data.steps, (fix,), ()))
    (item,) = [line for line in summary_lines(data) if line.startswith("1. ")]
    assert (
        "m54560 +39.3% of the subject's own TFLOP/s (ratio +69.1% [+68.3, +69.9]: the control moved -17.6% "
        "with the revert) **restored**" in item
    )
    text = markdown.render(data)
    assert "TFLOP/s **+39.3%**; ratio +69.1% [+68.3, +69.9] (control -17.6% ⚠)" in text
    assert all(p in _tables(text) for p in PCT.findall(item))
    from bisector.report import summary

    line = next(x for x in summary.lines(data, "report.md") if "revert of" in x)
    assert "m54560 restored (the subject's own TFLOP/s +39.3%, ratio +69.1% [+68.3, +69.9] on the tip)" in line


def test_the_kernel_section_is_a_quarter_of_the_report_at_most_and_links_nothing_unshipped(tmp_path) -> None:
    """The demo's compiled kernels of three steps beside the golden report: details folded, only what
    the first line did not say, signatures only where they changed, no link into kernels/ (not shipped)."""
    import json
    import shutil
    from dataclasses import replace as with_
    from pathlib import Path

    from bisector.why.kernel_diff.collect import KERNELS_DIR, compare_dirs
    from tests.report_fixtures import full_report

    fixtures = Path(__file__).parent / "fixtures" / "kernels"
    index = json.loads((fixtures / "index.json").read_text())["steps"]
    shutil.copytree(fixtures, tmp_path / KERNELS_DIR)
    data = full_report()
    kernels = [
        with_(compare_dirs(tmp_path, st["parent"], st["culprit"]), step_commit=step.commit)
        for st, step in zip(index.values(), data.steps)
    ]
    text = markdown.render(with_(data, kernels=tuple(kernels)))
    section = text.split("## What changed in the compiled kernel", 1)[1].split("\n## ", 1)[0]
    assert section.count("<details>") >= 3 and len(section) <= len(text) / 4, (len(section), len(text))
    assert "(*bf16, *bf16" not in section  # no signature changed in these three steps
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links and not [x for x in links if x.startswith("kernels/")], links


def test_a_written_report_links_only_files_its_folder_holds(tmp_path) -> None:
    from pathlib import Path

    from bisector.report.render import write_report
    from tests.report_fixtures import full_report

    out = tmp_path / "report"
    out.mkdir()
    (out / "hunk-0004ccc.patch").write_text("--- a\n+++ b\n")  # the pipeline writes the patches it links
    text = write_report(full_report(), out).read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert "hunk-0004ccc.patch" in links and "tflops-fa_s4096.png" in links
    assert all((out / x).is_file() for x in links if "://" not in x), links
    assert "[log](../work/logs/0001ccc.log)" not in text and "log (`../work/logs/0001ccc.log`)" in text
    assert "revert-0004ccc.patch" in text and "(revert-0004ccc.patch)" not in text  # not written here: no link
    assert Path(out / "report.md").is_file()


def test_the_title_names_the_device_measured_and_the_header_one_run_time() -> None:
    from pathlib import Path

    from bisector.config import load
    from bisector.report.assemble import report_title
    from bisector.store.totals import CallTotals, RunTotals
    from tests.report_fixtures import commits

    cfg = load(Path(__file__).parents[1] / "configs" / "h200-demo.toml")
    cs = commits(3)
    assert (
        report_title(cfg, cs, {"device_name": "NVIDIA H100 80GB HBM3"})
        == f"bisector: {cfg.name}, {cs[0].short}..{cs[-1].short} on NVIDIA H100 80GB HBM3"
    )
    assert report_title(cfg, cs, {}).endswith(" on cuda")
    one = RunTotals(42, 35, 1, 461, 371, 90, 3931.0, 473.0, CallTotals(461, 474.9))
    assert one.times() == "ran 7.9 min" and one.line().count(" min") == 1


def test_a_speed_steps_levels_are_shown_as_full_clock_tflops() -> None:
    """The search reads a speed as 1 / full-clock time; the report shows it as full-clock TFLOP/s:
    the levels are scaled by the parent's trials, the change stays the same."""
    from bisector.model import Step, TrialRecord, TrialStatus
    from bisector.report.assemble import _levels_as_shown

    k = "fa/s16384"
    trial = TrialRecord(
        "p" * 40,
        k,
        TrialStatus.OK,
        subject_ms=(2.0, 2.0, 2.02),
        control_ms=(1.0, 1.0, 1.0),
        subject_tflops=400.0,
        ratio=0.5,
    )
    step = Step("c" * 40, "p" * 40, (k,), {k: -60.0}, {k: (-61.0, -59.0)}, {k: 1e-9}, levels={k: (0.5, 0.2)})
    shown = _levels_as_shown(step, {"p" * 40: [trial]}, {k: "speed"})
    before, after = shown.levels[k]
    assert abs(before - 400.0) < 1.0 and abs(after / before - 0.4) < 1e-9
    assert _levels_as_shown(step, {"p" * 40: [trial]}, {k: "ratio"}).levels[k] == (0.5, 0.2)


def test_a_revert_that_did_not_build_is_a_fix_by_hand_with_its_size_in_the_fixes_section() -> None:
    from dataclasses import replace as with_

    from bisector.why.facts import actions

    data = interacting_report()
    broken = with_(data.fixes[1], applied=True, conflict="", error="step 1: make failed: exit 2")
    fixes = (data.fixes[0], broken, data.fixes[2])
    data = with_(data, fixes=fixes, actions=actions(data.steps, fixes, data.interactions))
    text = markdown.render(data)
    item = next(line for line in summary_lines(data) if line[:1].isdigit() and "by hand" in line)
    assert "could not be measured on the tip (step 1: make failed: exit 2)" in item
    assert all(p in _tables(text) for p in PCT.findall(item)), item

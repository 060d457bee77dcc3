"""The candidate fixes section of report.md: each regression's revert measured on the tip beside the
tip and the step's parent, its verdict and what decided it; a revert that does not apply, with what
a fix by hand should give back."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bisector.model import Verdict
from bisector.report.action_summary import undo_pct
from bisector.report.control_moves import revert_move
from bisector.report.data import METRIC_SHORT, ReportData
from bisector.report.figures import change, commit_ref, tflops
from bisector.report.figures import md_table as _table
from bisector.report.figures import short_shape as _short_shape
from bisector.search.evidence import CommitRow
from bisector.why.fixes import FixResult


def _hidden(fix: FixResult, shape: str, data: ReportData) -> str:
    """What the combined reverts said about this revert on this shape: hidden or overlapped by another step."""
    action = next((a for a in data.actions if a.step.commit == fix.step_commit), None)
    found = [o for o in (action.overlaps if action else ()) if o.shape == shape]
    return "".join(
        f"; with {commit_ref(o.other, data)} reverted too it gains {o.with_other_pct:+.1f}% "
        f"({'hidden in part by it' if o.verdict == 'hide' else 'overlapping it'})"
        for o in found
    )


def _verdict_cell(fix: FixResult, shape: str, data: ReportData) -> str:
    """The verdict and what decided it: the gain on the tip against what undoing the step should give;
    what is still missing against the parent, and whose it is."""
    verdict = fix.verdict(shape)
    if verdict == "not measured":
        return "not measured"
    if verdict == "slower than the tip":
        return "⚠ **slower than the tip**"
    tip, par = fix.vs_tip[shape], fix.vs_parent[shape]
    want = fix.expected_pct(shape)
    text = f"**{verdict}**"
    if verdict != "restored":
        text += f": {tip.change_pct:+.1f}% on the tip" + (
            f" where undoing its step should give {want:+.1f}%" if want is not None else ""
        )
    later = fix.later.get(shape, ())
    if par.verdict is not Verdict.SAME and par.ci95[1] < -data.min_step(shape):
        whose = ", ".join(f"{commit_ref(sha, data)} {change_pct:+.1f}%" for sha, change_pct in later)
        if verdict == "restored":
            owner = "later steps'" if len(later) > 1 else "later step's"
            text += (
                f"; the {-par.change_pct:.1f}% still missing against the parent is the {owner} loss: {whose}"
                if whose
                else f"; {-par.change_pct:.1f}% still missing against the parent (no later step found on this shape)"
            )
        elif whose:
            text += f"; the tip also carries {whose}"
    return text + _hidden(fix, shape, data)


def _vs_tip(fix: FixResult, shape: str, data: ReportData) -> str:
    """The revert's gain on the tip; where the control moved with it, the subject's own TFLOP/s first."""
    tip = fix.vs_tip.get(shape)
    if tip is None:
        return ""
    move = revert_move(fix, shape, data)
    if move is None:
        return change(tip)
    return f"TFLOP/s **{move.subject_pct:+.1f}%**; ratio {change(tip)} (control {move.control_pct:+.1f}% ⚠)"


def _parent_of(fix: FixResult, data: ReportData) -> str | None:
    step = next((s for s in data.steps if s.commit == fix.step_commit), None)
    return step.parent if step else None


def _tf(values: Mapping[str, float], shape: str) -> str:
    return tflops(values[shape]) if shape in values else ""


def _all_trials(row: CommitRow | None, shape: str) -> str:
    """A commit's median TFLOP/s over all its trials, as its row shows it, and how many."""
    if row is None or shape not in row.subject_tflops:
        return ""
    return f"{tflops(row.subject_tflops[shape])} ({row.trials.get(shape, 0)})"


def _undo_table(fix: FixResult, data: ReportData) -> list[str]:
    """A revert that does not apply: per shape, its step and what undoing it should give on the tip."""
    step = next((s for s in data.steps if s.commit == fix.step_commit), None)
    if step is None:
        return []
    rows = [
        [
            _short_shape(k),
            f"{step.change_pct[k]:+.1f}%",
            f"{w:+.1f}%" if (w := undo_pct(step.change_pct[k])) is not None else "?",
        ]
        for k in step.shapes
        if k in step.change_pct
    ]
    return _table(["shape", "its step", "undoing it should give on the tip"], rows, ["---", "---:", "---:"])


def fix_lines(fix: FixResult, data: ReportData) -> list[str]:
    """One revert: a line saying what was measured, a table per shape, a warning where it hurts."""
    name = commit_ref(fix.step_commit, data)
    if not fix.applied:
        return [
            f"- revert of {name}: does not apply on the tip: {fix.conflict}; a fix by hand would have "
            f"to give back its step's loss:",
            "",
            *("  " + line for line in _undo_table(fix, data)),
            "",
        ]
    if fix.error:
        if fix.error.startswith("not measured"):
            return [f"- revert of {name} (`{Path(fix.patch_path).name if fix.patch_path else ''}`): {fix.error}"]
        return [
            f"- revert of {name} (`{Path(fix.patch_path).name if fix.patch_path else ''}`): could not be "
            f"measured: {fix.error}; a fix by hand would have to give back its step's loss:",
            "",
            *("  " + line for line in _undo_table(fix, data)),
            "",
        ]
    parent = _parent_of(fix, data)
    prow, trow = data.row(parent) if parent else None, data.row(data.bad.sha)
    patch = Path(fix.patch_path).name if fix.patch_path else ""
    of_parent = f" and the step's parent {commit_ref(parent, data)}" if parent else " and the step's parent"
    lines = [
        f"- revert of {name} on the tip ([{patch}]({patch})): {fix.trials} rounds, one trial each of the "
        f"tip with the revert, the tip{of_parent}:",
        "",
    ]
    lines += ["  " + line for line in _fix_table(fix, data, prow, trow)]
    slower = [s for s in fix.shapes if fix.verdict(s) == "slower than the tip"]
    if slower:
        lines += [
            "",
            "  > ⚠ **The revert makes the tip slower** in "
            + ", ".join(f"{_short_shape(s)} ({change(fix.vs_tip[s])} against the tip)" for s in slower)
            + ": do not apply it as it is.",
        ]
    if not fix.correct:
        lines += ["", "  > ⚠ **WRONG RESULTS with the patch**: the tip with the revert disagrees with the control."]
    return [*lines, ""]


_FIX_COLUMNS = [
    "shape",
    "verdict",
    "revert vs parent",
    "revert vs tip",
    "revert TFLOP/s",
    "parent TFLOP/s",
    "tip TFLOP/s",
    "parent, all trials",
    "tip, all trials",
]


def _fix_table(fix: FixResult, data: ReportData, prow: CommitRow | None, trow: CommitRow | None) -> list[str]:
    """The revert's table: a row per shape, its verdict, its changes and the TFLOP/s it was judged on."""
    rows = []
    for shape in fix.shapes:
        metric = METRIC_SHORT.get(data.metric_of(shape), data.metric_of(shape))
        par = fix.vs_parent.get(shape)
        rows.append(
            [
                _short_shape(shape),
                _verdict_cell(fix, shape, data),
                f"{metric} {change(par)}" if par else "",
                _vs_tip(fix, shape, data),
                *(_tf(v, shape) for v in (fix.restored, fix.baseline, fix.tip)),
                _all_trials(prow, shape),
                _all_trials(trow, shape),
            ]
        )
    return _table(_FIX_COLUMNS, rows, ["---", "---", "---", "---", "---:", "---:", "---:", "---:", "---:"])


def fixes_section(data: ReportData) -> list[str]:
    if not data.fixes:
        return []
    lines = [
        "## Candidate fixes, verified on the tip",
        "",
        "Each regression's revert, applied to the tip, built, and measured side by side with the tip and "
        "the step's parent. The verdict and both changes are on the metric the step was found on, over "
        "those rounds, judged on the tip against what undoing the step's own change should give there: "
        f"**restored** when the interval's lower end is within {data.min_step_text} of that (or the "
        "revert is back within the threshold of the parent), **partly restored** when it gains above zero "
        "and short of that, **not restored** when it gains nothing beyond the threshold, and "
        "**undecided** when the interval allows more than one of these. A later step's loss on the same "
        "shape is named as that step's. The next three columns are median TFLOP/s of the same rounds. "
        "The last two are "
        "the medians over all of the parent's and the tip's trials (their rows below, with the number "
        "of trials), taken at other times, so they may differ from the rounds' figures.",
        "",
    ]
    for fix in data.fixes:
        lines += fix_lines(fix, data)
    return lines

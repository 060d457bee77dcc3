"""The lines `run` and `demo` print when they finish: one line for each step, wrong-result window,
hunk finding, revert (with its verdict per shape), dropped step and skipped commit, then where the
report is. Pure: it reads ReportData only, so what the terminal says is what the report says."""

from __future__ import annotations

from collections.abc import Sequence

from bisector.report.control_moves import revert_move
from bisector.report.data import ReportData
from bisector.report.figures import change
from bisector.report.markdown import counts, step_summary
from bisector.why.fixes import FixResult

SHOWN_SKIPS = 5  # skipped commits listed one a line; the rest counted


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no reason recorded"


def _short(shape: str) -> str:
    return shape.split("/", 1)[-1]


def fix_line(fix: FixResult, data: ReportData | None = None) -> str:
    """`revert of 36a4b95: s16384 not restored (+0.1% [-0.4, +0.6] on the tip, undoing its step should give
    +6.2%), ...`."""
    head = f"revert of {fix.step_commit[:7]}"
    if not fix.applied:
        return f"{head}: does not apply on the tip: {last_line(fix.conflict)}"
    if fix.error:
        error = last_line(fix.error)
        return f"{head}: {error if error.startswith('not measured') else 'could not be measured: ' + error}"
    parts = []
    for shape in fix.shapes:
        verdict, want = fix.verdict(shape), fix.expected_pct(shape)
        should = f", undoing its step should give {want:+.1f}%" if want is not None and verdict != "restored" else ""
        move = revert_move(fix, shape, data) if data is not None else None
        own = f"the subject's own TFLOP/s {move.subject_pct:+.1f}%, ratio " if move is not None else ""
        against = f" ({own}{change(fix.vs_tip[shape])} on the tip{should})" if shape in fix.vs_tip else ""
        parts.append(f"{_short(shape)} {verdict}{against}")
    warn = (
        "WARNING, the revert makes the tip slower: "
        if any(fix.verdict(s) == "slower than the tip" for s in fix.shapes)
        else ""
    )
    wrong = "; WRONG RESULTS with the revert" if not fix.correct else ""
    return f"{head}: {warn}{', '.join(parts)}{wrong}"


def lines(data: ReportData, report: str) -> Sequence[str]:
    out = [f"{len(data.steps)} step(s); {counts(data)}"]
    out += ["  " + step_summary(step, data) for step in data.steps]
    for w in data.wrong_windows:
        out.append(
            f"  wrong results in {', '.join(w.shapes)} from {w.first[:7]}"
            + (f" until {w.fixed[:7]}" if w.fixed else " to the tip")
        )
    out += [f"  {h.step_commit[:7]}: {h.summary}: {'; '.join(h.hunks)}" for h in data.hunks]
    out += ["  " + fix_line(fix, data) for fix in data.fixes]
    out += ["  dropped (did not hold against its parent): " + step_summary(s, data) for s in data.dropped]
    out += ["  " + line for line in data.decided]
    pairs = data.unsure or data.uncertain
    if pairs:
        out.append(f"  {len(pairs)} pair(s) still unsure at the trial cap, taken as no step (see the report)")
    skipped = list(data.skipped.items())
    out += [f"  skipped {sha[:7]}: {last_line(reason)}" for sha, reason in skipped[:SHOWN_SKIPS]]
    if len(skipped) > SHOWN_SKIPS:
        out.append(f"  ... and {len(skipped) - SHOWN_SKIPS} more skipped (see the report)")
    out.append(f"report: {report}")
    return out

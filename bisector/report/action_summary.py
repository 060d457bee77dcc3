"""The action summary: what to do first, opening both report.md and the PR comment (one builder).

Per verified regression, largest gain on the tip first: the revert to apply, what it measured on
the tip per shape (gain, 95% interval, verdict) and the steps that hide or overlap it. Pure: it
renders ReportData.actions (bisector/why/facts.py)."""

from __future__ import annotations

from bisector.why.facts import Action
from bisector.report.data import ReportData
from bisector.report.figures import change, commit_ref

SHOWN = 8  # actions listed; the rest counted


def _shape(key: str) -> str:
    return key.split("/", 1)[-1]


def _measured(action: Action, data: ReportData) -> str:
    fix = action.fix
    if fix is None:
        return "its revert was not measured (the run skipped the reverts)"
    if not fix.applied:
        return f"its revert does not apply on the tip ({fix.conflict.strip().splitlines()[-1] if fix.conflict.strip() else 'conflict'}): a fix by hand"
    if fix.error:
        return f"its revert could not be measured: {fix.error.strip().splitlines()[-1][:160]}"
    parts = []
    for shape in fix.shapes:
        tip = fix.vs_tip.get(shape)
        if tip is None:
            parts.append(f"{_shape(shape)} not measured")
            continue
        verdict = fix.verdict(shape)
        want = fix.expected_pct(shape)
        should = f", undoing its own step should give {want:+.1f}%" if want is not None and verdict != "restored" else ""
        parts.append(f"{_shape(shape)} {change(tip)} **{verdict}**{should}")
    return "on the tip " + "; ".join(parts)


def _overlaps(action: Action, data: ReportData) -> str:
    by_other: dict[str, list[str]] = {}
    for o in action.overlaps:
        by_other.setdefault(o.other, []).append(
            f"{_shape(o.shape)} {o.alone_pct:+.1f}% alone, {o.with_other_pct:+.1f}% with it reverted too")
    words = {"hide": "hides part of it or is hidden by it", "overlap": "overlaps it"}
    out = []
    for other, shapes in by_other.items():
        verdict = next(o.verdict for o in action.overlaps if o.other == other)
        out.append(f"{commit_ref(other, data)} {words.get(verdict, verdict)} ({'; '.join(shapes)})")
    return (" Interacts: " + "; ".join(out) + ".") if out else ""


def _verb(action: Action) -> str:
    """Revert it; do not apply it (it slows the tip or gives wrong results); or fix it by hand."""
    fix = action.fix
    if fix is None or not fix.applied or fix.error:
        return "Fix"
    if not fix.correct or any(fix.verdict(s) == "slower than the tip" for s in fix.shapes):
        return "⚠ Do not apply the revert of"
    return "Revert"


def item(action: Action, data: ReportData) -> str:
    step = action.step
    commit = data.commit(step.commit)
    subject = f" \"{commit.subject}\"" if commit else ""
    wrong = " (WRONG RESULTS with the revert)" if action.fix is not None and not action.fix.correct else ""
    return (f"{_verb(action)} {commit_ref(step.commit, data)}{subject}: {_measured(action, data)}{wrong}."
            f"{_overlaps(action, data)}")


def summary_lines(data: ReportData) -> list[str]:
    """The opening lines: a heading, one sentence on what was measured, one item per regression."""
    if not data.actions:
        if any(s.is_regression for s in data.steps):
            return ["**What to do**: no regression here is verified (see the steps); nothing to revert yet."]
        return ["**What to do**: nothing; no verified regression in this range."]
    lines = [f"**What to do**, largest gain first: each verified regression's revert, applied to the tip "
             f"`{data.bad.short}` and measured there side by side with it (change of the step's metric on the "
             f"tip, 95% interval, verdict):", ""]
    lines += [f"{i}. {item(a, data)}" for i, a in enumerate(data.actions[:SHOWN], 1)]
    if len(data.actions) > SHOWN:
        lines.append(f"{SHOWN + 1}. ... and {len(data.actions) - SHOWN} more (see the candidate fixes below).")
    return lines

"""Pure: what a culprit PR's author should read about their own step, from ReportData.

A PR comment speaks to its PR (bisector/publish/messages.py renders it): what to do about *this*
step (its revert measured on the tip, a revert that applies only together with another PR's, or a
fix by hand and what it should buy), what the step's numbers mean beside the other steps that move
the same shapes, why it happened where the run says, and only the missing data that could hide or
move it. Everything here is a sentence built from what the why-stages measured; nothing is guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bisector.model import Step
from bisector.report.data import METRIC_SHORT, ReportData
from bisector.report.figures import change, commit_ref
from bisector.report.markdown import step_summary
from bisector.why.fixes import FixResult
from bisector.why.interactions import ComboResult, Interaction
from bisector.why.kernel_diff import speed

Combo = tuple[str, ...]


@dataclass(frozen=True)
class Combined:
    """A revert that applies only with other PRs' reverts: the combination measured on the tip."""

    combo: Combo  # culprit SHAs whose reverts it holds, this step's among them
    result: ComboResult
    others_alone: ComboResult | None  # the same combination without this step's revert, where measured


def _shape(key: str) -> str:
    return key.split("/", 1)[-1]


def give_back(pct: float) -> float | None:
    """The gain that undoes a change: +59.2% for a -37.2% step."""
    return None if pct <= -100 else 100.0 * (100.0 / (100.0 + pct) - 1.0)


def by_hand(step: Step) -> str:
    """What a fix by hand should restore on each shape: the step's own size, undone."""
    parts = [
        f"{_shape(k)} {g:+.0f}%"
        for k in step.shapes
        if (g := give_back(step.change_pct[k])) is not None and math.isfinite(g)
    ]
    return (
        "a fix by hand restores about " + ", ".join(parts) + " (the step's own size, undone)"
        if parts
        else "a fix by hand"
    )


def combined_for(step: Step, fix: FixResult | None, interactions: Sequence[Interaction]) -> Combined | None:
    """The smallest measured combination of reverts that holds this step's and applied, where its own
    revert does not apply alone; None otherwise."""
    if fix is None or fix.applied:
        return None
    best: Combined | None = None
    for inter in interactions:
        results = {c.reverted: c for c in inter.combos}
        for combo, res in results.items():
            if step.commit not in combo or len(combo) < 2 or res.error or not res.gain_pct:
                continue
            if best is None or len(combo) < len(best.combo):
                rest = tuple(c for c in combo if c != step.commit)
                others = results.get(rest)
                best = Combined(combo, res, others if others is not None and not others.error else None)
    return best


def _gain(res: ComboResult, shape: str) -> str:
    lo, hi = res.ci95.get(shape, (-math.inf, math.inf))
    return f"{_shape(shape)} {res.gain_pct[shape]:+.1f}% [{lo:+.1f}, {hi:+.1f}]"


def _combined_text(step: Step, comb: Combined, data: ReportData) -> str:
    others = " and ".join(_pr_ref(c, data) for c in comb.combo if c != step.commit)
    shapes = [k for k in comb.result.gain_pct]
    text = (
        f"Together with the revert of {others} it applies (combined patch below): "
        + ", ".join(_gain(comb.result, k) for k in shapes)
        + f" on the tip `{data.bad.short}`"
    )
    if comb.others_alone is not None and comb.others_alone.gain_pct:
        mine = [
            f"{_shape(k)} about {100.0 * ((1 + comb.result.gain_pct[k] / 100) / (1 + o / 100) - 1):+.0f}%"
            for k, o in comb.others_alone.gain_pct.items()
            if k in comb.result.gain_pct and o > -100
        ]
        alone = ", ".join(f"{v:+.1f}%" for v in comb.others_alone.gain_pct.values())
        text += f", against {alone} for that revert alone: this PR's part is " + ", ".join(mine)
    return text


def _pr_ref(sha: str, data: ReportData) -> str:
    c = data.commit(sha)
    return f"#{c.pr} (`{sha[:7]}`)" if c and c.pr else f"`{sha[:7]}`"


def _overlap_text(step: Step, data: ReportData) -> str:
    """What the other steps on the same shapes mean for this revert, in words."""
    out = []
    for inter in data.interactions:
        for p in inter.pairs:
            if step.commit not in (p.a, p.b) or p.verdict not in ("overlap", "hide"):
                continue
            mine_a = p.a == step.commit
            other = p.b if mine_a else p.a
            alone, with_other = (p.alone_pct, p.with_other_pct) if mine_a else (p.other_alone_pct, p.other_with_pct)
            both = next((c for c in inter.combos if set(c.reverted) == {p.a, p.b} and not c.error), None)
            ref = _pr_ref(other, data)
            text = (
                f"This loss overlaps that of {ref} on {_shape(p.shape)} (part of the two is one loss)"
                if p.verdict == "overlap"
                else f"This loss and that of {ref} hide each other in part on {_shape(p.shape)}"
            )
            text += f": with that one reverted too, this revert adds {with_other:+.1f}%, not {alone:+.1f}%"
            if both is not None and p.shape in both.gain_pct:
                text += f"; both reverts together {both.gain_pct[p.shape]:+.1f}%"
            out.append(text)
    return ". ".join(out)


def good_fix(fix: FixResult | None) -> bool:
    """A revert worth proposing: it applied, gave right results and restored every shape, at least partly."""
    return (
        fix is not None
        and fix.applied
        and fix.correct
        and not fix.error
        and bool(fix.restored)
        and all(fix.verdict(s) in ("restored", "partly restored") for s in fix.vs_parent)
    )


def todo(step: Step, data: ReportData) -> str:
    """One paragraph: what to do about this step."""
    fix = next((f for f in data.fixes if f.step_commit == step.commit), None)
    if not step.is_regression:
        return ""  # an improvement: thanked, nothing to do (bisector/publish/messages.py)
    if not step.verified or step.candidates:
        return (
            "Not verified yet (it did not hold, or was not re-measured, against its parent in fresh trials): "
            f"check before acting; if it holds, {by_hand(step)}."
        )
    tip = f"`{data.bad.short}`"
    if fix is None or fix.error:
        why = f" ({fix.error.strip().splitlines()[-1][:160]})" if fix is not None and fix.error.strip() else ""
        return f"Its revert was not measured on the tip{why}; {by_hand(step)}."
    if not fix.applied:
        conflict = fix.conflict.strip().splitlines()[-1] if fix.conflict.strip() else "it conflicts"
        comb = combined_for(step, fix, data.interactions)
        head = f"Its revert does not apply on the tip {tip} alone ({conflict})"
        if comb is not None:
            return f"{head}. {_combined_text(step, comb, data)}. Otherwise {by_hand(step)}."
        return f"{head}: {by_hand(step)}."
    measured = "; ".join(
        f"{_shape(k)} {change(fix.vs_tip[k])} **{fix.verdict(k)}**" for k in fix.shapes if k in fix.vs_tip
    )
    if not fix.correct or any(fix.verdict(k) == "slower than the tip" for k in fix.shapes):
        bad = "gives wrong results" if not fix.correct else "is slower"
        return f"Do not apply its plain revert: on the tip {tip} it {bad} ({measured}); {by_hand(step)}."
    if not good_fix(fix):
        return (
            f"Its revert, measured on the tip {tip} side by side with it: {measured}: not a fix yet; {by_hand(step)}."
        )
    text = f"Revert it (patch below): on the tip {tip}, side by side with it, {measured}."
    overlap = _overlap_text(step, data)
    return text + (f" {overlap}." if overlap else "")


def cause(step: Step, data: ReportData) -> str:
    """The compiled kernel's lead fact across the step, where the run compared kernels; "" otherwise."""
    sk = next((k for k in data.kernels if k.step_commit == step.commit), None)
    if sk is None or not sk.kernels:
        return ""
    changed = sk.changed
    if not changed:
        return "no compiled kernel changed: the cause is outside the kernels (launch, host code)"
    d = changed[0]
    facts = speed.headline(d.before, d.after, limit=4)
    return f"`{d.name}`: {facts}" if facts else f"`{d.name}` changed, but nothing that explains speed moved"


def _bracket(step: Step, data: ReportData) -> tuple[int, int]:
    """Range indexes of the measured commits just outside the step: its neighbours lie between."""
    order = {c.sha: i for i, c in enumerate(data.range_commits)}
    measured = sorted(order[r.commit.sha] for r in data.rows if r.commit.sha in order)
    lo, hi = order.get(step.parent, 0), order.get(step.candidates[-1] if step.candidates else step.commit, 0)
    before = [i for i in measured if i < lo]
    after = [i for i in measured if i > hi]
    return (before[-1] if before else 0), (after[0] if after else len(data.range_commits) - 1)


def nearby(step: Step, data: ReportData) -> tuple[str, ...]:
    """Missing data that could hide or move this step: commits that did not run, or gave wrong results on
    its shapes, between the measured commits that bracket it."""
    lo, hi = _bracket(step, data)
    near = {c.sha for c in data.range_commits[lo : hi + 1]}
    out = []
    for sha, reason in data.skipped.items():
        if sha in near:
            last = reason.strip().splitlines()[-1][:160] if reason.strip() else "?"
            out.append(f"{commit_ref(sha, data)} did not build or run: {last}")
    wrong: dict[str, list[str]] = {}
    for w in data.wrong:
        if w.sha in near and w.shape in step.shapes:
            wrong.setdefault(w.sha, []).append(w.shape)
    out += [f"{commit_ref(sha, data)} gave wrong results on {', '.join(shapes)}" for sha, shapes in wrong.items()]
    return tuple(out)


def missing_lines(data: ReportData) -> tuple[str, ...]:
    """The run's missing data, one line per commit (a commit wrong on several shapes is one line)."""
    out = [
        f"`{sha[:7]}` did not build or run: {reason.strip().splitlines()[-1][:160] if reason.strip() else '?'}"
        for sha, reason in data.skipped.items()
    ]
    wrong: dict[str, list[str]] = {}
    for w in data.wrong:
        wrong.setdefault(w.sha, []).append(w.shape)
    out += [f"`{sha[:7]}` gave wrong results on {', '.join(shapes)}" for sha, shapes in wrong.items()]
    return tuple(out)


def summary_line(step: Step, data: ReportData) -> str:
    """The report's one line for the step, its subject without the "(#N)" the PR reference already says."""
    line = step_summary(step, data)
    return line.replace(f" (#{step.pr}) — ", " — ", 1) if step.pr else line


def decided_on(step: Step, data: ReportData) -> Mapping[str, str]:
    """Per shape, what the step was decided on, in the report's short words ("ratio", "latency ratio")."""
    return {k: METRIC_SHORT.get(data.metric_of(k), data.metric_of(k)) for k in step.shapes}


__all__ = [
    "Combined",
    "by_hand",
    "cause",
    "combined_for",
    "decided_on",
    "give_back",
    "good_fix",
    "missing_lines",
    "nearby",
    "summary_line",
    "todo",
]

"""The action summary: what to do first, opening both report.md and the PR comment (one builder).

One ranked list, largest gain on the tip first, each item with its number as the table it comes
from prints it: a verified regression's revert (the candidate fixes' table), reverts that were
measured together on the tip (the interactions' table: the group's largest combination, and the
smallest one that carries a revert that does not apply alone), and a regression whose revert does
not apply, to fix by hand, ranked by what undoing its step should give on the tip (the candidate
fixes' table too). Pure: it renders ReportData.actions and ReportData.interactions."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bisector.report.control_moves import revert_move
from bisector.report.data import ReportData
from bisector.report.figures import change, commit_ref
from bisector.why.facts import Action
from bisector.why.interactions import ComboResult, Interaction

SHOWN = 8  # items listed; the rest counted


def _shape(key: str) -> str:
    return key.split("/", 1)[-1]


def undo_pct(own_pct: float) -> float | None:
    """The gain on the tip that undoes a step of `own_pct`: +5.6% for a -5.3% step."""
    return None if own_pct <= -100 else 100.0 * (100.0 / (100.0 + own_pct) - 1.0)


@dataclass(frozen=True)
class Item:
    gain: float  # the order: the median over its shapes of what it gains on the tip
    text: str


def _by_hand(action: Action) -> bool:
    fix = action.fix
    return fix is not None and (not fix.applied or (bool(fix.error) and not fix.error.startswith("not measured")))


def _measured(action: Action, data: ReportData) -> str:
    fix = action.fix
    assert fix is not None
    parts = []
    for shape in fix.shapes:
        tip = fix.vs_tip.get(shape)
        if tip is None:
            parts.append(f"{_shape(shape)} not measured")
            continue
        verdict = fix.verdict(shape)
        want = fix.expected_pct(shape)
        should = (
            f", undoing its own step should give {want:+.1f}%" if want is not None and verdict != "restored" else ""
        )
        move = revert_move(fix, shape, data)
        gain = (
            change(tip)
            if move is None
            else (
                f"{move.subject_pct:+.1f}% of the subject's own TFLOP/s (ratio {change(tip)}: the control moved "
                f"{move.control_pct:+.1f}% with the revert)"
            )
        )
        parts.append(f"{_shape(shape)} {gain} **{verdict}**{should}")
    return "on the tip " + "; ".join(parts)


def _verb(action: Action) -> str:
    """Revert it, or do not apply it (it slows the tip or gives wrong results)."""
    fix = action.fix
    assert fix is not None
    if not fix.correct or any(fix.verdict(s) == "slower than the tip" for s in fix.shapes):
        return "⚠ Do not apply the revert of"
    return "Revert"


def _subject(sha: str, data: ReportData) -> str:
    commit = data.commit(sha)
    return f' "{commit.subject}"' if commit else ""


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("-inf")


def _revert_item(action: Action, data: ReportData) -> Item:
    fix, sha = action.fix, action.step.commit
    ref = commit_ref(sha, data)
    if fix is None:
        return Item(
            float("-inf"),
            f"Revert {ref}{_subject(sha, data)}: its revert was not measured (the run skipped the reverts).",
        )
    if fix.error:
        return Item(
            float("-inf"),
            f"Revert {ref}{_subject(sha, data)}: its revert could not be measured: "
            f"{fix.error.strip().splitlines()[-1][:160]}.",
        )
    wrong = " (WRONG RESULTS with the revert)" if not fix.correct else ""
    others = []
    for o in action.overlaps:
        words = "hides part of it or is hidden by it" if o.verdict == "hide" else "overlaps it"
        if f"{commit_ref(o.other, data)} {words}" not in others:
            others.append(f"{commit_ref(o.other, data)} {words}")
    both = " Interacts: " + "; ".join(others) + " (see the steps that interact)." if others else ""
    verb = _verb(action)
    own = {s: m.subject_pct for s in fix.vs_tip if (m := revert_move(fix, s, data)) is not None}
    gain = _median([own.get(s, c.change_pct) for s, c in fix.vs_tip.items()]) if verb == "Revert" else float("-inf")
    return Item(gain, f"{verb} {ref}{_subject(sha, data)}: {_measured(action, data)}{wrong}.{both}")


def _hand_item(action: Action, data: ReportData) -> Item:
    fix, step = action.fix, action.step
    assert fix is not None
    why = (fix.conflict or fix.error).strip()
    why = why.splitlines()[-1][:160] if why else "conflict"
    what = "does not apply on the tip" if not fix.applied else "could not be measured on the tip"
    wants = {s: undo_pct(step.change_pct[s]) for s in step.shapes if s in step.change_pct}
    sizes = "; ".join(f"{_shape(s)} {w:+.1f}%" for s, w in wants.items() if w is not None)
    return Item(
        _median([w for w in wants.values() if w is not None]),
        f"Fix {commit_ref(step.commit, data)}{_subject(step.commit, data)} by hand: its revert {what} "
        f"({why}); undoing its step should give on the tip {sizes or 'an unknown gain'}"
        f" (its step: {', '.join(f'{_shape(s)} {step.change_pct[s]:+.1f}%' for s in step.shapes)}).",
    )


def together_combos(inter: Interaction) -> list[ComboResult]:
    """The combinations of two or more reverts worth a line: the largest measured, and for each step
    whose revert was not measured alone the smallest measured combination that carries it."""
    measured = [c for c in inter.combos if len(c.reverted) >= 2 and not c.error and c.gain_pct]
    if not measured:
        return []

    def gain(c: ComboResult) -> float:
        return _median(list(c.gain_pct.values()))

    chosen = [max(measured, key=lambda c: (len(c.reverted), gain(c)))]
    alone_failed = {c.reverted[0] for c in inter.combos if len(c.reverted) == 1 and (c.error or not c.gain_pct)}
    for sha in inter.steps:
        if sha in alone_failed:
            carrying = [c for c in measured if sha in c.reverted]
            if carrying:
                best = min(carrying, key=lambda c: (len(c.reverted), -gain(c)))
                chosen += [best] if best not in chosen else []
    return chosen


def _names(shas: tuple[str, ...], data: ReportData) -> str:
    refs = [commit_ref(s, data) for s in shas]
    return refs[0] if len(refs) == 1 else ", ".join(refs[:-1]) + " and " + refs[-1]


def _together_item(combo: ComboResult, inter: Interaction, data: ReportData) -> Item:
    alone_failed = [
        c.reverted[0]
        for c in inter.combos
        if len(c.reverted) == 1 and c.reverted[0] in combo.reverted and (c.error or not c.gain_pct)
    ]
    only = f" ({_names(tuple(alone_failed), data)}: its revert applies only with the others)" if alone_failed else ""
    parts = [
        f"{_shape(s)} {g:+.1f}% [{combo.ci95[s][0]:+.1f}, {combo.ci95[s][1]:+.1f}]"
        for s, g in combo.gain_pct.items()
        if s in combo.ci95
    ]
    return Item(
        _median(list(combo.gain_pct.values())),
        f"Revert {_names(combo.reverted, data)} together: on the tip {'; '.join(parts)}, measured side by "
        f"side with the tip in the interactions{only}.",
    )


def items(data: ReportData) -> list[Item]:
    """Every action, the largest gain on the tip first."""
    pairs = [(c, i) for i in data.interactions for c in together_combos(i)]
    out = [_hand_item(a, data) if _by_hand(a) else _revert_item(a, data) for a in data.actions]
    out += [_together_item(c, i, data) for c, i in pairs]
    return sorted(out, key=lambda item: -item.gain)


def _slower_at_cap(data: ReportData) -> list[str]:
    """The unsure pairs' shapes whose whole interval lies past the minimum step on the slow side:
    a regression the trial cap stopped short of deciding, which "nothing to do" would hide."""
    return [
        f"{commit_ref(p.before, data)}..{commit_ref(p.after, data)} {c.shape} {change(c)}"
        for p in data.unsure
        for c in p.comparisons
        if c.ci95[1] <= -data.min_step(c.shape)
    ]


def summary_lines(data: ReportData) -> list[str]:
    """The opening lines: a heading, one sentence on what was measured, one item per action."""
    if not data.actions:
        if any(s.is_regression for s in data.steps):
            return ["**What to do**: no regression here is verified (see the steps); nothing to revert yet."]
        slower = _slower_at_cap(data)
        if slower:
            return [
                f"**What to do**: raise `protocol.max_trials` (now {data.protocol.get('max_trials', '?')}) and "
                f"run again; the store keeps every trial. Nothing is verified, but at the trial cap "
                f"{'; '.join(slower[:3])}{' and more' if len(slower) > 3 else ''}: slower past the minimum "
                f"step, not yet at the test's level."
            ]
        return ["**What to do**: nothing; no verified regression in this range."]
    lines = [
        f"**What to do**, largest gain first: each verified regression's revert, and reverts measured "
        f"together, applied to the tip `{data.bad.short}` and measured there side by side with it (change "
        f"of the step's metric on the tip, 95% interval, verdict); a revert that does not apply is a fix by "
        f"hand, placed by what undoing its step should give on the tip:",
        "",
    ]
    found = items(data)
    lines += [f"{i}. {item.text}" for i, item in enumerate(found[:SHOWN], 1)]
    if len(found) > SHOWN:
        lines.append(f"{SHOWN + 1}. ... and {len(found) - SHOWN} more (see the candidate fixes below).")
    return lines

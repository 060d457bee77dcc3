"""The report's sections on why each step happened (issue #14), from ReportData only: what changed
in the compiled kernel (bisector/report/kernel_section.py), the hunks that had to travel together, and
how steps on the same shapes combine. markdown.render calls `sections` once."""

from __future__ import annotations

from bisector.report import kernel_section as kernels
from bisector.report.data import METRIC_UNIT, ReportData
from bisector.report.figures import commit_ref
from bisector.report.hunk_names import compact, subset_name
from bisector.report.hunks_section import TRIES_OPEN
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.interactions import ComboResult, Interaction

__all__ = ["sections", "cause_section", "cause_lines", "groups_section", "interactions_section", "interaction_lines"]

VERDICT_WORDS = {
    "add": "add (each revert gains the same with the other in or out)",
    "overlap": "overlap (the two reverts alone add up to more than both together: part of the loss is one loss)",
    "hide": "hide (both reverts together gain more than the two alone add up to: one step hides part of the "
    "other's loss)",
    "unclear": "unclear at these trials",
}


def _shape(key: str) -> str:
    return key.split("/", 1)[-1]


def sections(data: ReportData) -> list[str]:
    """Every section that has something to say, each starting with a blank line and its heading."""
    return [*cause_section(data), *kernels.section(data), *groups_section(data), *interactions_section(data)]


def cause_lines(data: ReportData) -> list[str]:
    """Per step: its cause in one sentence (bisector/why/cause.py), then which lines carry it and what
    the rest of the commit is (the hunk search's finding)."""
    lines = []
    findings = {f.step_commit: f for f in data.hunks}
    causes = {c.step_commit: c for c in data.causes}
    for sha in dict.fromkeys([*causes, *findings]):
        c, f = causes.get(sha), findings.get(sha)
        if c is None and (f is None or not (f.rest or f.cannot_split)):
            continue
        lines.append(f"- {commit_ref(sha, data)}: {c.sentence if c else 'no compiled kernels compared'}")
        if f is not None and f.hunks and not f.cannot_split:
            lines.append(f"  - carried by: {compact(f.hunks)}")
        if f is not None and f.cannot_split:
            lines.append(f"  - cannot split: {f.cannot_split}")
        if f is not None and f.rest:
            lines.append(f"  - the rest: {f.rest}")
    return lines


def cause_section(data: ReportData) -> list[str]:
    body = cause_lines(data)
    if not body:
        return []
    return [
        "",
        "## The cause of each step, in one line",
        "",
        "Drawn from the compiled kernels and the hunks that carry the step: what the commit changed that a "
        "kernel's speed turns on (a specialization, a launch option, a constant), ranked by the facts it "
        'explains, then those facts; "unclear" where nothing that explains speed moved.',
        "",
        *body,
    ]


def _group_lines(finding: HunkFinding, data: ReportData) -> list[str]:
    lines = []
    for g in finding.groups:
        lines.append(
            f"- {commit_ref(finding.step_commit, data)}: hunks {', '.join(str(i + 1) for i in g.members)} "
            f"of {finding.n_hunks} searched as one:"
        )
        lines += [f"  - {why}" for why in g.reasons]
    unresolved = [t for t in finding.tries if t.carries is None]
    if unresolved:
        lines.append(
            f"- {commit_ref(finding.step_commit, data)}: {len(unresolved)} subset(s) unresolved (they neither "
            f"carry nor clear the step):"
        )
        listed = [f"  - parent + {subset_name(t)}: {t.error or 'did not run'}" for t in unresolved]
        if len(listed) > TRIES_OPEN:  # the hunk section groups their reasons; the list is there to look up
            listed = [
                "",
                f"<details><summary>The {len(listed)} unresolved subsets</summary>",
                "",
                *listed,
                "",
                "</details>",
            ]
        lines += listed
    return lines


def groups_section(data: ReportData) -> list[str]:
    body = [ln for f in data.hunks for ln in _group_lines(f, data)]
    if not body:
        return []
    return [
        "",
        "## Hunks that must travel together",
        "",
        "Before a culprit is split, a changed `def` (a `@triton.jit` kernel too), parameter list or "
        "`__slots__`, or a name added or removed, is grouped with the hunks that use its names (Python read "
        "with `ast` at the parent and the culprit, other files by name): a subset that splits them does not "
        "import or compile. A subset that does not build, run or give right results is unresolved, not "
        '"no step".',
        "",
        *body,
    ]


def _cell(c: ComboResult, shape: str) -> str:
    if c.error:
        return "—"
    tf = c.tflops.get(shape)
    gain = c.gain_pct.get(shape)
    text = f"{tf:.4g}" if tf is not None else "?"
    if gain is not None:
        lo, hi = c.ci95.get(shape, (gain, gain))
        text += f" ({gain:+.1f}% [{lo:+.1f}, {hi:+.1f}])"
    return text


def _own(sha: str, shape: str, data: ReportData) -> str:
    """` (its step -5.3%)`: what reverting it alone should give back, to read its gains against."""
    step = next((s for s in data.steps if s.commit == sha and shape in s.change_pct), None)
    return f" (its step {step.change_pct[shape]:+.1f}%)" if step else ""


def _metric(inter: Interaction, data: ReportData) -> str:
    names = dict.fromkeys(METRIC_UNIT.get(data.metric_of(s), data.metric_of(s)) for s in inter.shapes)
    return ", ".join(names)


def interaction_lines(inter: Interaction, data: ReportData) -> list[str]:
    names = [commit_ref(s, data) for s in inter.steps]
    lines = [f"### {' + '.join(names)} on {', '.join(_shape(s) for s in inter.shapes)}", ""]
    if inter.note:
        lines += [f"Note: {inter.note}.", ""]
    lines += [
        f"The tip with every combination of their reverts, {inter.trials} trials of each side by side; "
        f"TFLOP/s (change of the {_metric(inter, data)} against the tip, 95% interval):",
        "",
    ]
    lines.append("| reverted | " + " | ".join(_shape(s) for s in inter.shapes) + " |")
    lines.append("|---|" + "---:|" * len(inter.shapes))
    for c in inter.combos:
        label = " + ".join(commit_ref(s, data) for s in c.reverted) if c.reverted else "none (the tip)"
        if c.error:
            lines.append(f"| {label} | " + " | ".join("—" for _ in inter.shapes) + " |")
            continue
        lines.append(f"| {label} | " + " | ".join(_cell(c, s) for s in inter.shapes) + " |")
    errors = [(c, c.error) for c in inter.combos if c.error]
    if errors:
        lines += [
            "",
            *(f"- {' + '.join(commit_ref(s, data) for s in c.reverted) or 'the tip'}: {e}" for c, e in errors),
        ]
    if inter.pairs:
        lines.append("")
    for p in inter.pairs:
        a, b = commit_ref(p.a, data), commit_ref(p.b, data)
        lo, hi = p.ci95
        lines.append(
            f"- {_shape(p.shape)}: reverting {a}{_own(p.a, p.shape, data)} gains {p.alone_pct:+.1f}% "
            f"with {b} in, {p.with_other_pct:+.1f}% with {b} reverted; reverting "
            f"{b}{_own(p.b, p.shape, data)} gains {p.other_alone_pct:+.1f}% "
            f"with {a} in, {p.other_with_pct:+.1f}% with {a} reverted. Interaction {p.interaction_pct:+.1f}% "
            f"[{lo:+.1f}, {hi:+.1f}]: the effects **{p.verdict}**"
            f"{VERDICT_WORDS.get(p.verdict, '').removeprefix(p.verdict)}."
        )
    return lines + _last_reverted(inter, data) + [""]


def _last_reverted(inter: Interaction, data: ReportData) -> list[str]:
    """Three reverts or more: what each adds once every other one is reverted (pairs alone miss it:
    a revert "not restored" with one other step in can gain once two are out)."""
    if len(inter.steps) < 3:
        return []
    by = {frozenset(c.reverted): c for c in inter.combos if not c.error}
    every = by.get(frozenset(inter.steps))
    if every is None:
        return []
    out = []
    for sha in inter.steps:
        rest = by.get(frozenset(inter.steps) - {sha})
        for shape in inter.shapes:
            if rest is None or shape not in every.gain_pct or shape not in rest.gain_pct:
                continue
            adds = 100.0 * ((1 + every.gain_pct[shape] / 100) / (1 + rest.gain_pct[shape] / 100) - 1)
            others = " + ".join(commit_ref(s, data) for s in rest.reverted)
            out.append(
                f"- {_shape(shape)}: reverting {commit_ref(sha, data)}{_own(sha, shape, data)} once {others} "
                f"are reverted adds {adds:+.1f}% (all {len(inter.steps)} {every.gain_pct[shape]:+.1f}% against "
                f"{rest.gain_pct[shape]:+.1f}% without it)."
            )
    return ([""] if out else []) + out


def interactions_section(data: ReportData) -> list[str]:
    if not data.interactions:
        return []
    lines = [
        "",
        "## Steps that interact",
        "",
        "Verified regressions that move the same shapes, their reverts applied to the tip in every combination "
        "(the reverts in turn, one patched build each) and measured side by side with the tip. Interaction = "
        "gain(both reverted) - gain(one) - gain(the other), in log terms: near zero the effects add; below, "
        "they overlap; above, one hides the other.",
        "",
    ]
    for inter in data.interactions:
        lines += interaction_lines(inter, data)
    return lines

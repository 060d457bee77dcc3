"""report.md's "The hunks that carry each step": per culprit, the finding first (which lines carry
the step, what the rest of the commit is, why the search stopped), then what was measured, the
reasons the unresolved subsets did not run with identical reasons counted once, and every subset
tried folded into <details>. A real culprit's search tries dozens of subsets of dozens of statement
pieces; listed one a line with every label in full, nobody reads it."""

from __future__ import annotations

import re
from pathlib import Path

from bisector.report.data import ReportData
from bisector.report.figures import commit_ref, short_shape
from bisector.report.hunk_names import (
    compact,
    counted,
    group_line,
    on_base,
    reason_groups,
    refused,
    single_reasons,
    subset_name,
)
from bisector.why.culprit_hunks import MAX_ROUNDS, HunkFinding, HunkTry

#: more tries than this fold the full list into <details>; fewer are listed as they are
TRIES_OPEN = 6
#: measured subsets and grouped reasons shown outside <details> at most
MEASURED_OPEN = 8
REASONS_OPEN = 5
#: characters of a reason outside <details> at most, and of a subset's line (its indent aside)
LINE_OPEN = 300
LINE_ALL = 380

# A subset's outcome in the hunk search; None: it did not build, run or give right results (unresolved).
OUTCOME = {
    True: "reproduces the step",
    False: "does not reproduce the step",
    None: "unresolved (does not build, run or give right results)",
}

STOPPED = {
    "builds": "its budget of patched builds (`build.max_hunk_builds`) was spent",
    "trials": "its budget of trials (`build.max_hunk_trials`) was spent",
    "offline": "the recorded run ended before the next round was measured (replayed offline)",
    "base": "the threading base could not be measured",
}


def diff_block(diff: str) -> list[str]:
    """A fenced diff, the fence longer than any run of backticks inside it."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", diff)), default=0))
    return [f"{fence}diff", diff.rstrip("\n"), fence]


def cut(text: str, limit: int = LINE_OPEN) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _moved(t: HunkTry) -> str:
    changes = ", ".join(f"{short_shape(s)} {v:+.1f}%" for s, v in t.change_pct.items())
    return "; ".join(filter(None, [changes, t.error])) or "not measured"


def try_line(t: HunkTry, limit: int | None = LINE_ALL) -> str:
    """ "parent + base + `k.py` @@-43 +51: s1024 -50.0% (3 trials) — reproduces the step"; with a
    `limit`, the subset's names are cut first, so the line always ends with what the subset did."""
    trials = f" ({t.trials} trials{f', look {t.look}, on fresh trials' if t.look > 1 else ''})" if t.trials else ""
    outcome = f" — {OUTCOME[t.carries]}" + ("" if t.settled else " (still unclear: by its point estimate)")
    moved = _moved(t) if limit is None else cut(_moved(t), limit // 3)
    rest = f": {moved}{trials}{outcome}"
    name = subset_name(t)
    if limit is not None:
        name = cut(name, max(80, limit - len("parent + ") - len(rest)))
    return f"parent + {name}{rest}"


def _tally(f: HunkFinding) -> str:
    """ "98 subsets: 9 measured (8 reproduce the step, 1 does not), 89 unresolved (87 never built: ...)"."""
    tries = f.tries
    measured = [t for t in tries if t.carries is not None]
    unresolved = [t for t in tries if t.carries is None]
    never = sum(refused(t) for t in unresolved)
    yes = sum(bool(t.carries) for t in measured)
    no = len(measured) - yes
    parts = [f"{len(measured)} measured ({yes} reproduce{'s' * (yes == 1)} the step, {no} do{'es' * (no == 1)} not)"]
    if unresolved:
        parts.append(
            f"{len(unresolved)} unresolved"
            + (f" ({never} never built: their Python would not compile or run)" if never else "")
        )
    return f"{counted(len(tries), 'subset')}: {', '.join(parts)}"


def lead_lines(f: HunkFinding, data: ReportData) -> list[str]:
    """The finding: what carries the step, the lines, the rest, why the search stopped."""
    link = Path(f.patch_path).name if f.patch_path else ""
    lines = [f"- {commit_ref(f.step_commit, data)}: {f.finding}" + (f" ([{link}]({link}))" if link else "")]
    if f.hunks and not f.cannot_split:  # cannot split: the lead says why, and nothing carries it
        lines.append(f"  - the lines that carry it: {compact(f.hunks)}")
    if f.rest:
        lines.append(f"  - the rest: {f.rest}")
    if f.base_failed:
        lines.append(f"  - the threading base {f.base_failed}; whole hunks were searched instead")
    if f.unsettled:
        n = len(f.unsettled)
        lines.append(
            f"  - {counted(n, 'subset')} stayed unclear after {MAX_ROUNDS} rounds and {'was' if n == 1 else 'were'} "
            "placed by point estimate: the finding rests on it, a likely answer, not a measured one"
        )
    if not f.complete and f.stopped_at in STOPPED and not f.cannot_split:
        built = sum(not refused(t) for t in f.tries)
        lines.append(f"  - why it stopped: {STOPPED[f.stopped_at]} ({counted(built, 'subset')} built and run)")
    if f.n_behaviour:
        base = Path(f.base_patch_path).name if f.base_patch_path else ""
        head = (
            f"  - plumbing (only threads a new name through; applied to the parent as the base of every "
            f"subset{f', [{base}]({base})' if base else ''}): "
        )
        named = compact(f.plumbing) if f.plumbing else "lines inside the other hunks"
        lines.append(head + cut(named, max(80, LINE_ALL - len(head))))
    return lines


def tried_lines(f: HunkFinding) -> list[str]:
    """What was measured and why the rest said nothing, short; the full list in <details>."""
    if not f.tries:
        return []
    if len(f.tries) <= TRIES_OPEN:
        return [f"  - {try_line(t)}" for t in f.tries]
    lines = [f"  - tried: {_tally(f)}"]
    measured = [t for t in f.tries if t.carries is not None]
    lines += [f"    - {try_line(t)}" for t in measured[:MEASURED_OPEN]]
    if len(measured) > MEASURED_OPEN:
        lines.append(f"    - {len(measured) - MEASURED_OPEN} more measured: in the full list below")
    groups = reason_groups(f.tries)
    if groups:
        lines.append("  - why the unresolved did not run (identical reasons counted once):")
        lines += [f"    - {cut(group_line(e, n))}" for e, n in groups[:REASONS_OPEN]]
        rest = groups[REASONS_OPEN:]
        if rest:
            lines.append(
                f"    - {counted(len(rest), 'other reason')} ({counted(sum(n for _, n in rest), 'subset')}): "
                "in the full list below"
            )
    singles = single_reasons(f.tries)
    shown = sum(n for _, n in groups[:REASONS_OPEN])
    if singles and 2 * shown < sum(n for _, n in groups):  # the groups shown say too little alone
        lines.append(
            cut(
                "  - the single reasons given most, the names that tie statements together (a subset may give "
                "several): " + "; ".join(f"{e} ({n})" for e, n in singles[:REASONS_OPEN]),
                LINE_ALL,
            )
        )
    on = any(on_base(t)[0] for t in f.tries)
    full = [f"{i}. {try_line(t, None)}" for i, t in enumerate(f.tries, 1)]
    return [
        *lines,
        "",
        f"<details><summary>All {len(f.tries)} subsets tried, in order{', each on the threading base' if on else ''}, "
        "and every reason</summary>",
        "",
        *[f"- {group_line(e, n)}" for e, n in groups],
        *([""] if groups else []),
        *full,
        "",
        "</details>",
    ]


def hunk_lines(finding: HunkFinding, data: ReportData) -> list[str]:
    """What narrowed a culprit to its hunks: the finding, what was tried, then the hunks found as a diff."""
    diff = (
        finding.diff if len(finding.diff) <= 4000 else finding.diff[:4000] + "\n... (cut; the patch file has it all)\n"
    )
    return [*lead_lines(finding, data), *tried_lines(finding), "", *diff_block(diff), ""]


def hunks_section(data: ReportData) -> list[str]:
    if not data.hunks:
        return []
    lines = [
        "## The hunks that carry each step",
        "",
        "Each culprit's parent, rebuilt with part of the culprit's hunks applied and measured side by "
        "side with fresh trials of the parent on the step's shapes (the change shown is against those; "
        "a part whose place stays unclear gets more rounds): a part that sits nearer the culprit than "
        "the parent, by the median over the step's shapes, is split again (delta debugging).",
        "",
        "Hunks are named by their old first line (`@@-81`), statements of a hunk by their lines (`-84-85` "
        "removed, `+109-164` added).",
        "",
    ]
    for finding in data.hunks:
        lines += hunk_lines(finding, data)
    return lines

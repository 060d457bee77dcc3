"""Pure message builder: a PublishPlan in, markdown bodies and status text out. No I/O.

Like Apache Otava's report/slack split, everything a human reads is built here and tested
against golden files; the sender only moves these strings. Two rules hold for every text:
each comment carries a hidden marker so a rerun edits it instead of adding a second one, and a
run with missing data never claims "no change".
"""

from __future__ import annotations

from bisector.publish.publish_plan import CulpritPost, PublishPlan, RunVerdict
from bisector.report.markdown import diff_block

GITHUB_BODY_LIMIT = 65536  # characters GitHub accepts in one comment or PR body
STATUS_CONTEXT = "bisector"
_STATUS_LIMIT = 140  # GitHub truncates longer commit status descriptions

_HEADLINES = {
    RunVerdict.REGRESSION: "performance regression",
    RunVerdict.IMPROVEMENT: "performance improvement",
    RunVerdict.NO_CHANGE: "no change",
    RunVerdict.INCOMPLETE: "incomplete run",
}


def marker(run_id: str, pr: int) -> str:
    """The hidden tag that identifies the one comment of (run, PR)."""
    return f"<!-- bisector:run={run_id}:pr={pr} -->"


def draft_marker(run_id: str, pr: int) -> str:
    return f"<!-- bisector:run={run_id}:fix-for={pr} -->"


def headline(plan: PublishPlan) -> str:
    """The verdict as shown; a run with missing data is incomplete whatever the search said."""
    if plan.verdict is RunVerdict.NO_CHANGE and not plan.complete:
        return _HEADLINES[RunVerdict.INCOMPLETE]
    return _HEADLINES[plan.verdict]


UNTRUSTED = "Measured in the pull request's own process; not independently verified."
CONFIRM = "A maintainer's `/perf` on the merged commit is the way to confirm."
_TITLES = {
    ("regression", True): "a performance regression starts at this PR",
    ("regression", False): "a possible performance regression starts at this PR (not verified)",
    ("improvement", True): "a speed-up starts at this PR: thank you",
    ("improvement", False): "a possible speed-up starts at this PR (not verified)",
}
_CHANGED_LINES = 8  # the carrying hunks' changed lines shown in the first screen; the whole diff is folded


def tally(plan: PublishPlan) -> tuple[int, int]:
    """(verified regressions, verified improvements) of the run: the plan's counts, else its culprits'."""
    if plan.regressions or plan.improvements:
        return plan.regressions, plan.improvements
    return (
        sum(1 for c in plan.culprits if c.kind == "regression" and c.verified),
        sum(1 for c in plan.culprits if c.kind == "improvement" and c.verified),
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _prs(plan: PublishPlan, kind: str) -> str:
    prs = [f"#{c.pr}" for c in plan.culprits if c.kind == kind and c.verified]
    return f" ({', '.join(prs)})" if prs else ""


def counted(plan: PublishPlan, prs: bool = True) -> str:
    """ "2 regressions (#115, #122), 1 improvement (#108)": the run's steps, each kind apart."""
    regressions, improvements = tally(plan)
    parts = []
    if regressions:
        parts.append(_plural(regressions, "regression") + (_prs(plan, "regression") if prs else ""))
    if improvements:
        parts.append(_plural(improvements, "improvement") + (_prs(plan, "improvement") if prs else ""))
    return ", ".join(parts)


def _verdict_sentence(plan: PublishPlan) -> str:
    found = counted(plan)
    if found:
        text = f"This run found {found}."
    elif plan.verdict is RunVerdict.INCOMPLETE and plan.culprits:
        text = "This run found steps it could not verify (see below): none is counted as a regression yet."
    elif plan.complete:
        text = "No step over the threshold was found in the range, on every configured shape."
    else:
        text = "This run could not measure everything it was asked to, so it cannot say that nothing changed."
    if plan.missing and found:
        text += " Some data is missing (below): other steps may hide there."
    return text


def _summary(plan: PublishPlan) -> list[str]:
    """The report's action summary, the same lines as report.md opens with."""
    return [*plan.summary.strip().splitlines(), ""] if plan.summary.strip() else []


def _untrusted(plan: PublishPlan) -> list[str]:
    return [f"> **{UNTRUSTED}** {CONFIRM}", ""] if plan.untrusted else []


def _missing_section(plan: PublishPlan) -> list[str]:
    if not plan.missing:
        return []
    return ["#### Missing data", "", *(f"- {line}" for line in plan.missing), ""]


def _details(summary: str, diff: str) -> list[str]:
    """A diff folded under its summary line."""
    return [f"<details><summary>{summary}</summary>", "", *diff_block(diff), "", "</details>", ""]


def changed_lines(diff: str, limit: int = _CHANGED_LINES) -> str:
    """The lines a diff removes and adds (no headers, no context), cut to `limit`."""
    body = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    more = len(body) - limit
    return "\n".join(
        body[:limit] + ([f"... {more} more changed lines (the whole diff is folded below)"] if more > 0 else [])
    )


def _todo(plan: PublishPlan, c: CulpritPost) -> list[str]:
    """What to do about this PR: its revert and what it buys, a combined revert, or a fix by hand."""
    if plan.untrusted:
        return [f"**What to do**: nothing yet. {CONFIRM} No patch is proposed on a result measured this way.", ""]
    if c.kind == "improvement":
        return ["**What to do**: nothing; thank you for the speed-up.", ""]
    todo = c.todo.strip() or (f"Revert it: {c.restore.strip()}." if c.patch is not None and c.restore.strip() else "")
    return [f"**What to do**: {todo}", ""] if todo else []


def _own_step(plan: PublishPlan, c: CulpritPost, draft_url: str | None) -> list[str]:
    """This PR's step and what to do about it: the first screen of its comment."""
    lines = [c.step_summary.strip(), ""]
    if c.table.strip():
        lines += [c.table.strip(), ""]
    lines += _todo(plan, c)
    if c.hunk.strip():
        lines += [f"**The lines that carry it**: {c.hunk.strip()}", ""]
        shown = changed_lines(c.hunk_diff) if c.hunk_diff.strip() else ""
        if shown:
            lines += [*diff_block(shown), ""]
    if c.cause.strip():
        lines += [f"**Cause**: {c.cause.strip()}", ""]
    if plan.untrusted or c.kind != "regression":
        return lines
    onto = f"`{c.patch_base[:7]}`, the tip measured" if c.patch_base else f"`{plan.base_branch}`"
    if c.patch is not None:
        if draft_url:
            lines += [f"Draft PR with this revert: {draft_url}", ""]
        lines += _details(f"the revert (patch, {len(c.patch.splitlines())} lines; `git apply` it on {onto})", c.patch)
    elif c.combined_patch:
        lines += _details(
            f"the combined revert (patch, {len(c.combined_patch.splitlines())} lines; `git apply` it on {onto})",
            c.combined_patch,
        )
    return lines


def _evidence(c: CulpritPost) -> list[str]:
    """What backs the first screen, folded: the carrying hunks whole, the compiled kernels."""
    lines = []
    if c.hunk_diff.strip():
        lines += _details("the hunks that carry the step, whole", c.hunk_diff)
    if c.kernel.strip():
        lines += [
            "<details><summary>What changed in the compiled kernel</summary>",
            "",
            c.kernel.strip(),
            "",
            "</details>",
            "",
        ]
    if c.plots:
        lines += ["Plots: " + " · ".join(f"[{p.label}]({p.url})" for p in c.plots), ""]
    return lines


def _nearby(plan: PublishPlan, c: CulpritPost) -> list[str]:
    """Missing data that could hide or move this step; the rest of the run's only counted."""
    rest = len(plan.missing) - len(c.nearby)
    where = f" ([full report]({plan.report_url}))" if plan.report_url else " (the run's report lists them)"
    lines = []
    if c.nearby:
        lines += [
            "**Missing data next to this step** (it could hide or move it):",
            "",
            *(f"- {line}" for line in c.nearby),
            "",
        ]
    if rest > 0:
        lines += [f"Elsewhere in the range: {_plural(rest, 'more item')} of missing data{where}.", ""]
    return lines


def _others(plan: PublishPlan, c: CulpritPost) -> list[str]:
    """The run's other PRs' steps, one line each, folded."""
    others = [o for o in plan.culprits if o.pr != c.pr]
    if not others:
        return []
    found = counted(plan, prs=False)
    return [
        f"<details><summary>This run's other steps{f' (the run: {found})' if found else ''}</summary>",
        "",
        *(f"- {o.step_summary.strip()}" for o in others),
        "",
        "</details>",
        "",
    ]


def _footer(plan: PublishPlan) -> list[str]:
    return [
        f"<sub>bisector run `{plan.run_id}` · this comment is updated in place by later posts of the same run</sub>"
    ]


def culprit_body(plan: PublishPlan, culprit: CulpritPost, draft_url: str | None = None) -> str:
    """The comment on a culprit PR: its own step and what to do about it first; the evidence, the other
    PRs' steps and the run's missing data after it, folded or counted."""
    title = _TITLES.get((culprit.kind, culprit.verified), _TITLES[("regression", True)])
    if plan.untrusted:
        title = f"a {'speed-up' if culprit.kind == 'improvement' else 'performance regression'} measured at this PR"
    lines = [marker(plan.run_id, culprit.pr), f"### bisector: {title}", "", *_untrusted(plan)]
    lines += _own_step(plan, culprit, draft_url)
    lines += _nearby(plan, culprit)
    lines += _evidence(culprit)
    lines += _others(plan, culprit)
    if plan.report_url:
        lines += [f"Full report: {plan.report_url}", ""]
    return _fit("\n".join(lines + _footer(plan)) + "\n", "")


def requester_body(plan: PublishPlan, draft_urls: dict[int, str] | None = None) -> str:
    """The answer on the PR that asked for the run; holds the culprit section too if it is one."""
    assert plan.requester_pr is not None
    draft_urls = draft_urls or {}
    found = counted(plan, prs=False)
    lines = [
        marker(plan.run_id, plan.requester_pr),
        f"### bisector: {found or headline(plan)} (run `{plan.run_id}`)",
        "",
        *_untrusted(plan),
        _verdict_sentence(plan),
        "",
    ]
    for c in plan.culprits:
        if c.pr == plan.requester_pr:
            lines += ["#### This PR is a culprit", "", *_own_step(plan, c, draft_urls.get(c.pr)), *_evidence(c)]
    lines += ([] if plan.untrusted else _summary(plan)) + _missing_section(plan)
    if plan.report_url:
        lines += [f"Full report: {plan.report_url}", ""]
    head = "\n".join(lines) + "\n"
    tail = "\n" + "\n".join(_footer(plan)) + "\n"
    return _fit(head, plan.report.strip(), tail)


def answer_body(plan: PublishPlan) -> str:
    """The requester comment of a plan that carries a finished answer (`/perf`, a failure); a result
    measured on untrusted code labelled under its first line."""
    assert plan.requester_pr is not None
    answer = plan.answer.strip()
    if plan.untrusted and UNTRUSTED not in answer:
        first, _, rest = answer.partition("\n")
        answer = "\n".join([first, "", *_untrusted(plan), rest.strip()]).strip()
    return _fit(f"{marker(plan.run_id, plan.requester_pr)}\n{answer}\n", "")


def _fit(head: str, report: str, tail: str = "") -> str:
    """Join, cutting the report (never the marker, verdict or missing list) to GitHub's size limit."""
    if not report:
        body = head + tail
        return body if len(body) <= GITHUB_BODY_LIMIT else body[: GITHUB_BODY_LIMIT - 40] + "\n\n(comment truncated)\n"
    open_, close = "<details><summary>Full report</summary>\n\n", "\n\n</details>\n"
    room = GITHUB_BODY_LIMIT - len(head) - len(tail) - len(open_) - len(close) - 120
    if len(report) > room:
        cut = len(report) - max(room, 0)
        report = report[: max(room, 0)] + f"\n\n(report truncated: {cut} more characters; see the full report)"
    return head + open_ + report + close + tail


def draft_title(culprit: CulpritPost) -> str:
    what = f" {culprit.commit[:7]}" if culprit.commit else ""
    return f"[bisector] Fix the performance step from #{culprit.pr}{what}"


def draft_body(plan: PublishPlan, culprit: CulpritPost) -> str:
    lines = [
        draft_marker(plan.run_id, culprit.pr),
        f"Draft fix for the performance step that starts at #{culprit.pr}, found and verified by bisector "
        f"run `{plan.run_id}`.",
        "",
    ]
    if culprit.restore.strip():
        lines += [f"Verified: {culprit.restore.strip()}", ""]
    lines += [culprit.step_summary.strip(), ""]
    if culprit.table.strip():
        lines += [culprit.table.strip(), ""]
    lines += _missing_section(plan)
    return _fit("\n".join(lines), "")


def commit_message(plan: PublishPlan, culprit: CulpritPost) -> str:
    body = f"Verified by bisector run {plan.run_id}."
    if culprit.restore.strip():
        body += f"\n\n{culprit.restore.strip()}"
    return f"Fix the performance step from #{culprit.pr}\n\n{body}\n"


def status_state(plan: PublishPlan) -> str:
    """GitHub commit status state: `failure` only for a verified regression, measured on trusted code;
    missing data is an error; a result measured on untrusted code never succeeds nor fails (pending:
    a maintainer's `/perf` on the merged commit decides)."""
    if plan.untrusted:
        return "pending"
    if plan.verdict is RunVerdict.REGRESSION:  # a plan's REGRESSION is a verified one (outcome_plan.verdict)
        return "failure"
    if not plan.complete:
        return "error"
    return "success"


def status_description(plan: PublishPlan) -> str:
    found = counted(plan) or (
        plan.verdict.value if plan.verdict in (RunVerdict.REGRESSION, RunVerdict.IMPROVEMENT) else ""
    )
    unverified = [f"#{c.pr}" for c in plan.culprits if not c.verified]
    if unverified:
        found = ", ".join(
            p for p in (found, f"{_plural(len(unverified), 'unverified step')} ({', '.join(unverified)})") if p
        )
    missing = f"{_plural(len(plan.missing), 'item')} of data missing" if plan.missing else ""
    if found:
        text = found + (f"; {missing}" if missing else "")
    elif plan.complete:
        text = "no change: no step over the threshold"
    else:
        text = f"incomplete: {missing}" if missing else "incomplete run"
    if plan.untrusted:
        text = "not independently verified: " + text
    return text if len(text) <= _STATUS_LIMIT else text[: _STATUS_LIMIT - 1] + "…"

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


def _verdict_sentence(plan: PublishPlan) -> str:
    culprits = ", ".join(f"#{c.pr}" for c in plan.culprits)
    where = ("; the step starts at " if len(plan.culprits) == 1 else "; the steps start at ") + culprits
    if plan.verdict is RunVerdict.REGRESSION:
        text = f"Performance regressed{where if culprits else ''}."
    elif plan.verdict is RunVerdict.IMPROVEMENT:
        text = f"Performance improved{where if culprits else ''}."
    elif plan.complete:
        text = "No step over the threshold was found in the range, on every configured shape."
    else:
        text = "This run could not measure everything it was asked to, so it cannot say that nothing changed."
    if plan.missing and plan.verdict in (RunVerdict.REGRESSION, RunVerdict.IMPROVEMENT):
        text += " Some data is missing (below): other steps may hide there."
    return text


def _summary(plan: PublishPlan) -> list[str]:
    """The report's action summary, the same lines as report.md opens with."""
    return [*plan.summary.strip().splitlines(), ""] if plan.summary.strip() else []


def _missing_section(plan: PublishPlan) -> list[str]:
    if not plan.missing:
        return []
    return ["#### Missing data", "", *(f"- {line}" for line in plan.missing), ""]


def _details(summary: str, diff: str) -> list[str]:
    """A diff folded under its summary line."""
    return [f"<details><summary>{summary}</summary>", "", *diff_block(diff), "", "</details>", ""]


def _culprit_section(plan: PublishPlan, c: CulpritPost, draft_url: str | None) -> list[str]:
    lines = [c.step_summary.strip(), ""]
    if c.table.strip():
        lines += [c.table.strip(), ""]
    if c.plots:
        lines += ["Plots: " + " · ".join(f"[{p.label}]({p.url})" for p in c.plots), ""]
    if c.hunk.strip():
        lines += [f"**Where in the commit**: {c.hunk.strip()}", ""]
        if c.hunk_diff.strip():
            lines += _details("the hunk", c.hunk_diff)
    if c.kernel.strip():
        lines += ["<details><summary>What changed in the compiled kernel</summary>", "", c.kernel.strip(), "",
                  "</details>", ""]
    if c.patch is not None:
        lines.append("**Verified fix**" + (f": {c.restore.strip()}" if c.restore.strip() else "."))
        if draft_url:
            lines += ["", f"Draft PR with this patch: {draft_url}"]
        lines += ["", *_details(f"patch ({len(c.patch.splitlines())} lines)", c.patch)]
    elif c.restore.strip():
        lines += [c.restore.strip(), ""]
    return lines


def _footer(plan: PublishPlan) -> list[str]:
    return [f"<sub>bisector run `{plan.run_id}` · this comment is updated in place by later posts of the same run"
            "</sub>"]


def culprit_body(plan: PublishPlan, culprit: CulpritPost, draft_url: str | None = None) -> str:
    """The comment on a culprit PR: its step, table, plots and verified patch."""
    lines = [marker(plan.run_id, culprit.pr),
             f"### bisector: a performance step starts at this PR (run `{plan.run_id}`)", "", *_summary(plan),
             f"Run verdict: **{headline(plan)}**. {_verdict_sentence(plan)}", ""]
    lines += _culprit_section(plan, culprit, draft_url)
    lines += _missing_section(plan)
    if plan.report_url:
        lines += [f"Full report: {plan.report_url}", ""]
    return _fit("\n".join(lines + _footer(plan)) + "\n", "")


def requester_body(plan: PublishPlan, draft_urls: dict[int, str] | None = None) -> str:
    """The answer on the PR that asked for the run; holds the culprit section too if it is one."""
    assert plan.requester_pr is not None
    draft_urls = draft_urls or {}
    lines = [marker(plan.run_id, plan.requester_pr), f"### bisector: {headline(plan)} (run `{plan.run_id}`)", "",
             *_summary(plan), _verdict_sentence(plan), ""]
    for c in plan.culprits:
        if c.pr == plan.requester_pr:
            lines += ["#### This PR is a culprit", ""] + _culprit_section(plan, c, draft_urls.get(c.pr))
    lines += _missing_section(plan)
    if plan.report_url:
        lines += [f"Full report: {plan.report_url}", ""]
    head = "\n".join(lines) + "\n"
    tail = "\n" + "\n".join(_footer(plan)) + "\n"
    return _fit(head, plan.report.strip(), tail)


def answer_body(plan: PublishPlan) -> str:
    """The requester comment of a plan that carries a finished answer (`/perf`, a failure)."""
    assert plan.requester_pr is not None
    return _fit(f"{marker(plan.run_id, plan.requester_pr)}\n{plan.answer.strip()}\n", "")


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
    lines = [draft_marker(plan.run_id, culprit.pr),
             f"Draft fix for the performance step that starts at #{culprit.pr}, found and verified by bisector "
             f"run `{plan.run_id}`.", ""]
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
    """GitHub commit status state: a regression fails, missing data is an error, else success."""
    if plan.verdict is RunVerdict.REGRESSION:
        return "failure"
    if not plan.complete:
        return "error"
    return "success"


def status_description(plan: PublishPlan) -> str:
    culprits = ", ".join(f"#{c.pr}" for c in plan.culprits)
    if plan.verdict in (RunVerdict.REGRESSION, RunVerdict.IMPROVEMENT):
        text = f"{plan.verdict.value}" + (f" at {culprits}" if culprits else "")
        if plan.missing:
            text += f"; {len(plan.missing)} item(s) of data missing"
    elif plan.complete:
        text = "no change: no step over the threshold"
    else:
        text = f"incomplete: {len(plan.missing)} item(s) of data missing" if plan.missing else "incomplete run"
    return text if len(text) <= _STATUS_LIMIT else text[: _STATUS_LIMIT - 1] + "…"

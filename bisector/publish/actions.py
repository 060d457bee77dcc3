"""Pure: a plan and the publish config in, the list of GitHub writes out, each with its exact payload.

The sender executes these actions and the dry run writes them to files, so both read the same
bodies. Comment bodies of culprit PRs may link to the draft PR, so `comments` takes the draft
PR URLs known so far (none in a dry run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bisector.config import Publish
from bisector.publish import messages
from bisector.publish.publish_plan import PublishPlan


@dataclass(frozen=True)
class CommentAction:
    """One comment per (PR, run): edited in place when a comment with `marker` exists."""

    issue: int
    marker: str
    body: str

    def payload(self, repo: str) -> dict[str, Any]:
        return {
            "method": "POST",
            "path": f"/repos/{repo}/issues/{self.issue}/comments",
            "body": {"body": self.body},
            "marker": self.marker,
            "update": f"PATCH /repos/{repo}/issues/comments/{{id}} with the same body when a comment "
            f"of issue {self.issue} holds the marker",
        }


@dataclass(frozen=True)
class DraftPullAction:
    """A draft PR holding a verified patch, on a branch of its own made from `patch_base`."""

    culprit_pr: int
    branch: str
    base_branch: str
    patch_base: str
    patch: str
    title: str
    body: str
    message: str

    def payload(self, repo: str) -> dict[str, Any]:
        return {
            "method": "POST",
            "path": f"/repos/{repo}/pulls",
            "body": {
                "base": self.base_branch,
                "head": self.branch,
                "title": self.title,
                "body": self.body,
                "draft": True,
            },
            "branch": {
                "method": "POST",
                "path": f"/repos/{repo}/git/refs",
                "body": {"ref": f"refs/heads/{self.branch}", "sha": f"<commit of the patch on {self.patch_base}>"},
            },
            "commit_message": self.message,
            "patch_base": self.patch_base,
            "patch": self.patch,
        }


@dataclass(frozen=True)
class StatusAction:
    sha: str
    state: str
    description: str
    context: str
    target_url: str | None

    def body(self) -> dict[str, str]:
        data = {"state": self.state, "description": self.description, "context": self.context}
        if self.target_url:
            data["target_url"] = self.target_url
        return data

    def payload(self, repo: str) -> dict[str, Any]:
        return {"method": "POST", "path": f"/repos/{repo}/statuses/{self.sha}", "body": self.body()}


Action = CommentAction | DraftPullAction | StatusAction


def branch_name(plan: PublishPlan, pr: int) -> str:
    return f"bisector/{plan.run_id}/fix-{pr}"


def drafts(plan: PublishPlan, cfg: Publish) -> tuple[tuple[DraftPullAction, ...], tuple[str, ...]]:
    """Draft PR actions, and a note for each verified patch that cannot get one."""
    if not cfg.draft_pr:
        return (), ()
    if plan.untrusted:
        proposed = [f"#{c.pr}" for c in plan.culprits if c.patch is not None]
        return (), ((f"{', '.join(proposed)}: measured on untrusted code: no draft PR",) if proposed else ())
    out, notes = [], []
    for c in plan.culprits:
        if c.patch is None:
            continue
        base = c.patch_base or plan.head_sha
        if not c.patch.strip():
            notes.append(f"#{c.pr}: the verified patch is empty; no draft PR")
            continue
        if base is None:
            notes.append(f"#{c.pr}: no commit to apply the patch to (patch_base and head_sha unset); no draft PR")
            continue
        out.append(
            DraftPullAction(
                culprit_pr=c.pr,
                branch=branch_name(plan, c.pr),
                base_branch=plan.base_branch,
                patch_base=base,
                patch=c.patch,
                title=messages.draft_title(c),
                body=messages.draft_body(plan, c),
                message=messages.commit_message(plan, c),
            )
        )
    return tuple(out), tuple(notes)


def comments(plan: PublishPlan, cfg: Publish, draft_urls: Mapping[int, str] | None = None) -> tuple[CommentAction, ...]:
    """One comment per PR: culprits (if configured), then the requester (merged if it is a culprit too)."""
    urls = dict(draft_urls or {})
    out: list[CommentAction] = []
    # A finished answer is what the requester asked for: posted even when the summary is not.
    requester = plan.requester_pr if (cfg.comment_on_requester or plan.answer) else None
    if cfg.comment_on_culprit:
        for c in plan.culprits:
            if c.pr == requester or any(a.issue == c.pr for a in out):
                continue
            out.append(
                CommentAction(c.pr, messages.marker(plan.run_id, c.pr), messages.culprit_body(plan, c, urls.get(c.pr)))
            )
    if requester is not None:
        body = messages.answer_body(plan) if plan.answer else messages.requester_body(plan, urls)
        out.append(CommentAction(requester, messages.marker(plan.run_id, requester), body))
    return tuple(out)


def status(plan: PublishPlan, cfg: Publish) -> StatusAction | None:
    """None where the config posts none, the plan names no commit, or its results were measured on
    untrusted code (which could have written them: it never sets a status, neither way)."""
    if not cfg.commit_status or plan.head_sha is None or plan.untrusted:
        return None
    return StatusAction(
        sha=plan.head_sha,
        state=messages.status_state(plan),
        description=messages.status_description(plan),
        context=messages.STATUS_CONTEXT,
        target_url=plan.report_url,
    )

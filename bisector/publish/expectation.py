"""What a plan may post, recorded by a trusted stage, checked before `publish` sends anything.

A plan file is written on the GPU runner, beside code under test: a forged one could ask for a
comment on any PR or a success status on any SHA, or say anything there. `publish` therefore takes
what the trusted side authorized (the authorize job's outputs for a PR comment, the config for the
nightly) and refuses the whole plan, naming the first action outside it or the first text the bot
would not have written (bisector/publish/plan_text.py), before any HTTP call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bisector.errors import BadInput
from bisector.publish import actions, plan_text
from bisector.publish.publish_plan import PublishPlan

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class Expectation:
    """For a PR comment: the repository, the requesting PR and its pinned head (None: nightly)."""

    repo: str
    pr: int | None = None
    sha: str | None = None
    base_branch: str = "main"  # the only branch a draft PR may target
    # The authorized command measured code that is not the upstream's own (`/perf` on a PR head, a fork's
    # code): whatever the plan says, its results are labelled, set no status and propose no patch.
    untrusted: bool = False

    def __post_init__(self) -> None:
        if self.repo.count("/") != 1 or not all(self.repo.split("/")):
            raise BadInput(f"--expect-repo: must be 'owner/name', got {self.repo!r}")
        if (self.pr is None) != (self.sha is None):
            raise BadInput("--expect-pr and --expect-sha go together: the PR and the head the authorize job pinned")
        if self.pr is not None and self.pr <= 0:
            raise BadInput(f"--expect-pr: must be a positive PR number, got {self.pr}")
        if self.sha is not None and not _SHA.fullmatch(self.sha):
            raise BadInput(f"--expect-sha: not a full commit SHA: {self.sha[:80]!r}")

    @property
    def from_comment(self) -> bool:
        return self.pr is not None


def check(
    plan: PublishPlan, expected: Expectation, todo: tuple[actions.Action, ...], web: str = "https://github.com"
) -> None:
    """Raise BadInput naming the first action (or plan field) the expectation does not allow, or the
    first text the bot would not have written (bisector/publish/plan_text.py; `web`: where the
    repository's pages live)."""
    if plan.repo != expected.repo:
        raise BadInput(f"plan: repo is {plan.repo!r}, not {expected.repo!r} as authorized: nothing posted")
    if expected.from_comment:
        run_id = re.compile(rf"pr{expected.pr}-c\d+")
        if not run_id.fullmatch(plan.run_id):
            raise BadInput(f"plan: run_id {plan.run_id!r} is not a run of a comment on #{expected.pr}: nothing posted")
    elif plan.requester_pr is not None or plan.answer:
        raise BadInput(
            f"plan: a nightly plan answers no PR, but it names requester_pr #{plan.requester_pr}: nothing posted"
        )
    for action in todo:
        problem = _problem(action, expected)
        if problem:
            raise BadInput(f"plan: {describe(action)}: {problem}: nothing posted")
    said = plan_text.problems(plan, web)
    if said:
        more = f" (and {len(said) - 1} more)" if len(said) > 1 else ""
        raise BadInput(f"plan: {said[0]}{more}: not what the bot writes: nothing posted")


def _problem(action: actions.Action, expected: Expectation) -> str:
    if isinstance(action, actions.CommentAction):
        if expected.from_comment and action.issue != expected.pr:
            return f"only #{expected.pr} (the PR whose comment was authorized) may be commented on"
    elif isinstance(action, actions.StatusAction):
        if expected.from_comment and action.sha != expected.sha:
            return f"a status may go only on the pinned head {expected.sha}"
    elif isinstance(action, actions.DraftPullAction):
        if expected.from_comment and action.culprit_pr != expected.pr:
            return f"a draft PR may fix only #{expected.pr}"
        if action.base_branch != expected.base_branch:
            return f"a draft PR may target only {expected.base_branch!r}"
    return ""


def describe(action: actions.Action) -> str:
    if isinstance(action, actions.CommentAction):
        return f"comment on #{action.issue}"
    if isinstance(action, actions.StatusAction):
        return f"status {action.state!r} on {action.sha[:40]}"
    return f"draft PR {action.branch!r} into {action.base_branch!r} for #{action.culprit_pr}"


__all__ = ["Expectation", "check", "describe"]

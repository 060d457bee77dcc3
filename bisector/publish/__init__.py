"""Publishing a run to the upstream's GitHub repository: comments, draft PRs, a commit status.

    outcome = publish(plan, config.publish, vault.publishing_env(), dry_run_dir=None)

The token is read here, from `env[cfg.token_env]` (the CLI passes the in-memory vault, never
`os.environ`), and only here; a dry run needs none and makes no HTTP call: it writes the exact
payloads (method, path, JSON body) to files instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bisector.config import Publish
from bisector.errors import BadInput
from bisector.publish import actions
from bisector.publish.expectation import Expectation, check
from bisector.publish.github import (
    CommentResult,
    DraftResult,
    RetryPolicy,
    StatusResult,
    connect,
    guard,
    open_draft_pull,
    own_login,
    post_status,
    upsert_comment,
)
from bisector.publish.plan_text import web_base
from bisector.publish.publish_plan import CulpritPost, PlotLink, PublishPlan, RunVerdict, dump_plan, load_plan

__all__ = [
    "CulpritPost",
    "Expectation",
    "PlotLink",
    "PublishOutcome",
    "PublishPlan",
    "RetryPolicy",
    "RunVerdict",
    "dump_plan",
    "load_plan",
    "publish",
]


@dataclass(frozen=True)
class PublishOutcome:
    comments: tuple[CommentResult, ...] = ()
    drafts: tuple[DraftResult, ...] = ()
    status: StatusResult | None = None
    notes: tuple[str, ...] = ()  # what was not done, and why
    dry_run_files: tuple[str, ...] = ()


def resolve_config(plan: PublishPlan, cfg: Publish) -> Publish:
    """The plan names the target; a config that names another repository is a mistake, not a choice."""
    if cfg.repo is not None and cfg.repo != plan.repo:
        raise BadInput(f"publish.repo is {cfg.repo!r} but the plan targets {plan.repo!r}")
    return replace(cfg, repo=plan.repo)


def publish(
    plan: PublishPlan,
    cfg: Publish,
    env: Mapping[str, str],
    dry_run_dir: Path | None = None,
    policy: RetryPolicy = RetryPolicy(),
    expected: Expectation | None = None,
) -> PublishOutcome:
    """`expected`: what the trusted side authorized; a plan asking for anything else posts nothing."""
    cfg = resolve_config(plan, cfg)
    if expected is not None and expected.untrusted and not plan.untrusted:
        plan = replace(plan, untrusted=True)  # the trusted side's word: a plan can add distrust, never remove it
    draft_actions, notes = actions.drafts(plan, cfg)
    status_action = actions.status(plan, cfg)
    if expected is not None:
        check(
            plan,
            expected,
            (*draft_actions, *actions.comments(plan, cfg), *((status_action,) if status_action else ())),
            web_base(cfg.base_url),
        )
    if cfg.commit_status and status_action is None:
        notes += (
            "measured on untrusted code: no commit status"
            if plan.untrusted and plan.head_sha
            else "no head_sha in the plan: no commit status",
        )
    if dry_run_dir is not None:
        return _dry_run(plan, cfg, draft_actions, status_action, notes, dry_run_dir)

    token = env.get(cfg.token_env, "")
    if not token.strip():
        raise BadInput(
            f"environment variable {cfg.token_env} (publish.token_env) is not set: it must hold the GitHub token"
        )
    gh = connect(token, cfg.base_url, policy)
    try:
        with guard(f"reading repository {plan.repo}", token):
            repo = gh.get_repo(plan.repo)
        with guard("reading the token's own login", token):
            login = own_login(gh, cfg.bot_login)
        drafts = []
        for d in draft_actions:
            with guard(f"opening a draft PR for #{d.culprit_pr}", token):
                drafts.append(open_draft_pull(repo, d))
        urls = {d.culprit_pr: d.url for d in drafts}
        comments = []
        for c in actions.comments(plan, cfg, urls):
            with guard(f"commenting on #{c.issue}", token):
                comments.append(upsert_comment(repo, c, login))
        status = None
        if status_action is not None:
            with guard(f"posting the commit status on {status_action.sha[:12]}", token):
                status = post_status(repo, status_action)
    finally:
        gh.close()
    return PublishOutcome(comments=tuple(comments), drafts=tuple(drafts), status=status, notes=notes)


def _dry_run(
    plan: PublishPlan,
    cfg: Publish,
    draft_actions: tuple[actions.DraftPullAction, ...],
    status_action: actions.StatusAction | None,
    notes: tuple[str, ...],
    out: Path,
) -> PublishOutcome:
    """Write each payload as it would be sent, numbered in sending order; no token, no network."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{out}: cannot create the dry-run directory: {exc.strerror}") from None
    todo: list[tuple[str, Any]] = [(f"draft-pr-{d.culprit_pr}", d) for d in draft_actions]
    todo += [(f"comment-pr-{c.issue}", c) for c in actions.comments(plan, cfg)]
    if status_action is not None:
        todo.append((f"status-{status_action.sha[:12]}", status_action))
    written = []
    for i, (name, action) in enumerate(todo, 1):
        path = out / f"{i:02d}-{name}.json"
        payload = {"base_url": cfg.base_url, **action.payload(plan.repo)}
        path.write_text(json.dumps(payload, indent=2) + "\n")
        written.append(str(path))
        if isinstance(action, actions.CommentAction):  # the body as GitHub would render it, for review
            md = path.with_suffix(".md")
            md.write_text(action.body)
            written.append(str(md))
    if notes:
        (out / "notes.txt").write_text("".join(f"{n}\n" for n in notes))
        written.append(str(out / "notes.txt"))
    return PublishOutcome(notes=notes, dry_run_files=tuple(written))

"""`bisector publish --plan PLAN.json [--config CONFIG.toml] [--dry-run DIR]`: post a run to GitHub.

In a workflow the plan comes from a job that ran code under test, so it is checked against what a
trusted job authorized: `--expect-repo R --expect-pr N --expect-sha SHA` (a PR comment: the
authorize job's outputs) or `--nightly` (the nightly: the config's repository, no requester, culprits as
the config allows). A plan asking for anything else posts nothing and exits 2.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from bisector import config as config_mod
from bisector.commands.common import USER_PATH, fail_on_error, print_json
from bisector.errors import BadInput
from bisector.publish import Expectation, load_plan, publish
from bisector.trust import vault


@click.command("publish")
@click.option(
    "--plan",
    "plan_path",
    required=True,
    type=click.Path(path_type=Path),
    help="PublishPlan JSON written next to the report.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Config whose [publish] table says what to post where (default: everything but draft PRs).",
)
@click.option(
    "--dry-run",
    "dry_run",
    type=USER_PATH,
    default=None,
    help="Write the exact payloads to this directory instead of calling GitHub (no token needed).",
)
@click.option(
    "--expect-repo",
    "expect_repo",
    default=None,
    help="Refuse a plan for any other repository (owner/name, as authorized).",
)
@click.option(
    "--expect-pr",
    "expect_pr",
    type=int,
    default=None,
    help="A PR comment's run: post only on this PR (the authorize job's `pr` output).",
)
@click.option(
    "--expect-sha",
    "expect_sha",
    default=None,
    help="A PR comment's run: a status only on this commit (the authorize job's `head_sha` output).",
)
@click.option("--nightly", is_flag=True, help="A nightly's plan: it answers no PR; refuse one that does.")
@click.option(
    "--expect-untrusted",
    "expect_untrusted",
    is_flag=True,
    help="A PR comment's run measured the PR's own code (`/perf`, a fork's head): its results are "
    "labelled, set no status and propose no patch, whatever the plan says.",
)
@fail_on_error
def command(
    plan_path: Path,
    config_path: Path | None,
    dry_run: str | None,
    expect_repo: str | None,
    expect_pr: int | None,
    expect_sha: str | None,
    nightly: bool,
    expect_untrusted: bool,
) -> None:
    """Comment on the culprit and requesting PRs, open draft fix PRs, and post a commit status."""
    full = config_mod.load(config_path) if config_path else None
    expected = _expectation(expect_repo, expect_pr, expect_sha, nightly, full)
    if expect_untrusted:
        if expected is None or not expected.from_comment:
            raise BadInput("--expect-untrusted goes with --expect-repo/--expect-pr/--expect-sha (a PR comment's run)")
        expected = replace(expected, untrusted=True)
    plan = load_plan(plan_path)
    cfg = full.publish if full else config_mod.Publish(repo=plan.repo)
    outcome = publish(
        plan, cfg, vault.publishing_env(), dry_run_dir=Path(dry_run) if dry_run else None, expected=expected
    )
    print_json(
        {
            "comments": [{"issue": c.issue, "url": c.url, "created": c.created} for c in outcome.comments],
            "draft_prs": [
                {"for": d.culprit_pr, "number": d.number, "url": d.url, "branch": d.branch, "created": d.created}
                for d in outcome.drafts
            ],
            "status": None
            if outcome.status is None
            else {"sha": outcome.status.sha, "state": outcome.status.state, "description": outcome.status.description},
            "notes": list(outcome.notes),
            "dry_run_files": list(outcome.dry_run_files),
        }
    )


def _expectation(
    repo: str | None, pr: int | None, sha: str | None, nightly: bool, full: config_mod.Config | None
) -> Expectation | None:
    """Settled before the plan file is read: the flags come from the trusted job, the config from git."""
    if nightly:
        if pr is not None or sha is not None:
            raise BadInput("--nightly answers no PR: drop --expect-pr/--expect-sha")
        if full is None or not full.publish.repo:
            raise BadInput("--nightly needs --config with publish.repo: the only repository a nightly posts to")
        if repo is not None and repo != full.publish.repo:
            raise BadInput(f"--expect-repo {repo!r} but {full.path} publishes to {full.publish.repo!r}")
        return Expectation(repo=full.publish.repo, base_branch=full.upstream.branch)
    if repo is None:
        if pr is not None or sha is not None:
            raise BadInput("--expect-pr and --expect-sha need --expect-repo (the authorized repository)")
        return None
    if pr is None:
        raise BadInput("--expect-repo needs --expect-pr and --expect-sha (a PR comment) or --nightly")
    return Expectation(repo=repo, pr=pr, sha=sha, base_branch=full.upstream.branch if full else "main")

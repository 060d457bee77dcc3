"""`bisector publish --plan PLAN.json [--config CONFIG.toml] [--dry-run DIR]`: post a run to GitHub."""

from __future__ import annotations

from pathlib import Path

import click

from bisector import config as config_mod
from bisector.commands.common import USER_PATH, fail_on_error, print_json
from bisector.publish import load_plan, publish
from bisector.trust import vault


@click.command("publish")
@click.option("--plan", "plan_path", required=True, type=click.Path(path_type=Path),
              help="PublishPlan JSON written next to the report.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
              help="Config whose [publish] table says what to post where (default: everything but draft PRs).")
@click.option("--dry-run", "dry_run", type=USER_PATH, default=None,
              help="Write the exact payloads to this directory instead of calling GitHub (no token needed).")
@fail_on_error
def command(plan_path: Path, config_path: Path | None, dry_run: str | None) -> None:
    """Comment on the culprit and requesting PRs, open draft fix PRs, and post a commit status."""
    plan = load_plan(plan_path)
    cfg = config_mod.load(config_path).publish if config_path else config_mod.Publish(repo=plan.repo)
    outcome = publish(plan, cfg, vault.publishing_env(), dry_run_dir=Path(dry_run) if dry_run else None)
    print_json({
        "comments": [{"issue": c.issue, "url": c.url, "created": c.created} for c in outcome.comments],
        "draft_prs": [{"for": d.culprit_pr, "number": d.number, "url": d.url, "branch": d.branch,
                       "created": d.created} for d in outcome.drafts],
        "status": None if outcome.status is None else {"sha": outcome.status.sha, "state": outcome.status.state,
                                                       "description": outcome.status.description},
        "notes": list(outcome.notes),
        "dry_run_files": list(outcome.dry_run_files),
    })

"""`bisector handle-comment --event PATH --config X`: answer a /bisect or /perf PR comment."""

from __future__ import annotations

import os
from pathlib import Path

import click

from bisector import config as config_mod
from bisector.commands.common import USER_PATH, fail_on_error
from bisector.triggers.comment import Job, handle


@click.command("handle-comment")
@click.option("--event", "event_path", required=True, type=click.Path(dir_okay=False),
              help="The issue_comment event JSON (GITHUB_EVENT_PATH in a workflow).")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--store", type=USER_PATH, default=None,
              help="SQLite store (default: the config's, else $BISECTOR_STORE / cache).")
@click.option("--work-dir", type=USER_PATH, default=None, help="Builds, JIT caches and trial logs.")
@click.option("--report-dir", type=USER_PATH, default=None, help="Default: <report dir>/pr/<N>/<run id>/.")
@click.option("--dry-run", "dry_run", default=None, type=USER_PATH,
              help="Write every GitHub payload to this directory instead of sending it.")
@fail_on_error
def command(event_path: str, config_path: str, store: str | None, work_dir: str | None, report_dir: str | None,
            dry_run: str | None) -> None:
    """Read a GitHub issue_comment event and run the command it holds, answering in the PR."""
    cfg = config_mod.load(config_path)
    result = handle(event_path, Job(cfg, store, work_dir, report_dir), os.environ,
                    Path(dry_run) if dry_run else None, say=lambda s: click.echo(s, err=True))
    click.echo(f"{result.action}: {result.message}" + (f" -> {result.answer}" if result.answer else ""))

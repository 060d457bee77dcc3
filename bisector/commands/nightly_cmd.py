"""`bisector nightly --config X`: the newest upstream commit against the last good night."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from bisector import config as config_mod
from bisector.commands.common import USER_PATH, check_upstream, fail_on_error
from bisector.commands.progress import ProgressLine
from bisector.errors import BadInput
from bisector.runner import lock
from bisector.triggers.nightly import run_night
from bisector.trust import vault


def _date(value: str | None) -> str:
    if value is None:
        return dt.datetime.now(dt.UTC).date().isoformat()
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        raise BadInput(f"--date: not a date YYYY-MM-DD: {value!r}") from None


@click.command("nightly")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--store", type=USER_PATH, default=None, help="SQLite store (default: the config's, else $BISECTOR_STORE / cache)."
)
@click.option("--date", default=None, help="The night's date, YYYY-MM-DD (default: today, UTC).")
@click.option("--work-dir", type=USER_PATH, default=None, help="Builds, JIT caches and trial logs.")
@click.option(
    "--dry-run",
    "dry_run",
    default=None,
    type=USER_PATH,
    help="Write the GitHub payloads of a bisection to this directory instead of sending them.",
)
@click.option("--no-fixes", is_flag=True, help="Do not build and measure reverts of the culprits on the tip.")
@click.option(
    "--plan-out",
    "plan_out",
    default=None,
    type=click.Path(dir_okay=False),
    help="Measure only: write a bisection's publish plan here and post nothing (no token needed).",
)
@fail_on_error
def command(
    config_path: str,
    store: str | None,
    date: str | None,
    work_dir: str | None,
    dry_run: str | None,
    no_fixes: bool,
    plan_out: str | None,
) -> None:
    """Measure the newest commit against the last good night; bisect and publish any regression.

    Running it again the same night measures nothing new and rewrites the report."""
    if plan_out and dry_run:
        raise BadInput("--plan-out posts nothing already: drop --dry-run")
    cfg = config_mod.load(config_path)
    check_upstream(cfg)
    night = _date(date)

    def say(s: str) -> None:
        click.echo(s, err=True)

    if plan_out:
        Path(plan_out).unlink(missing_ok=True)  # never post a plan left by an earlier night
    # The A/B of two commits first; a bisection, when the night regressed, extends the estimate.
    with (
        lock.config_lock(cfg, on_wait=lambda p: say(f"waiting for {p} (another job holds the GPU)")),
        ProgressLine(2, cfg.protocol.trials) as progress,
    ):
        out = run_night(
            cfg,
            night,
            store,
            work_dir,
            Path(dry_run) if dry_run else None,
            vault.publishing_env(),
            verify_fixes=not no_fixes,
            say=say,
            plan_out=Path(plan_out) if plan_out else None,
            observer=progress,
            on_range=progress.expect_range,
        )
    if not out.measured:
        click.echo(f"night {out.date} already measured {out.sha[:12]}: nothing measured, report rewritten")
    state = "good" if out.good else "not good"
    click.echo(
        f"night {out.date}: {out.sha[:12]} is {state}"
        + (f" against {out.baseline[:12]}" if out.baseline else " (first night)")
    )
    if out.bisect_report:
        click.echo(f"bisection: {out.bisect_report}")
    for item in out.published:
        click.echo(f"published: {item}")
    if out.plan_file:
        click.echo(f"publish plan: {out.plan_file}")
    click.echo(f"report: {out.report}")

"""`bisector run --config X --good G --bad B`: the main job, resumable."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bisector import config as config_mod
from bisector.commands.common import (
    USER_PATH,
    check_upstream,
    checked_shapes,
    fail_on_error,
    range_order,
    run_options,
    shape_list,
    with_cli_overrides,
)
from bisector.errors import BadInput
from bisector.isolation import sandbox
from bisector.paths import work_dir_for
from bisector.runner.launch import start_workers


@click.command("run")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--good", required=True, help="A commit without the regression (ref or SHA).")
@click.option("--bad", required=True, help="A commit with it (ref or SHA).")
@click.option(
    "--store", type=USER_PATH, default=None, help="SQLite store (default: the config's, else the user cache dir)."
)
@click.option("--work-dir", type=USER_PATH, default=None, help="Builds, JIT caches and trial logs.")
@run_options
@click.option("--offline", is_flag=True, help="Replay the search on stored trials only (no build, no GPU).")
@click.option("--publish", is_flag=True, help="Post the results to the PRs of the config's publish.repo.")
@click.option(
    "--dry-run", "dry_run", type=USER_PATH, default=None, help="With --publish: write the payloads to DIR instead."
)
@fail_on_error
def command(
    config_path: str,
    good: str,
    bad: str,
    store: str | None,
    work_dir: str | None,
    report_dir: str | None,
    shapes: str,
    no_fixes: bool,
    no_hunks: bool,
    offline: bool,
    publish: bool,
    dry_run: str | None,
    as_json: bool,
    executor_kind: str | None,
    executor_address: str | None,
    visible: str | None,
) -> None:
    """Localize every TFLOP/s step between GOOD and BAD and write a report. Re-run to resume."""
    cfg = with_cli_overrides(config_mod.load(config_path), executor_kind, executor_address, visible)
    check_upstream(cfg)  # bad input is refused before anything is started or written
    cfg = checked_shapes(cfg, shapes)
    order = range_order(cfg, good, bad, offline)
    if not offline:
        sandbox.prepare(cfg)  # [sandbox] require: one line and exit 3 here, before any process starts
        start_workers(cfg, work_dir_for(cfg.name, work_dir))
    from bisector import pipeline
    from bisector.commands.run_job import run_and_print
    from bisector.triggers import outcome_plan as plan_mod
    from bisector.triggers import plan_file

    options = pipeline.RunOptions(
        good=good,
        bad=bad,
        store=store,
        work_dir=work_dir,
        report_dir=report_dir,
        shapes=shape_list(shapes),
        verify_fixes=not no_fixes,
        find_hunks=not no_hunks,
        offline=offline,
        command=" ".join(["bisector", *sys.argv[1:]]),
    )
    outcome = run_and_print(cfg, options, as_json, order=order)
    plan = plan_mod.from_outcome(cfg, outcome, f"run-{cfg.name}-{outcome.commits[0].short}-{outcome.commits[-1].short}")
    if plan is None:
        if publish:
            raise BadInput(f"{cfg.path}: publish.repo: not set, nothing to publish to")
        return
    # `bisector publish --plan` posts it later; written (and posted) once nothing of the code under test runs
    plan = plan_file.write(plan, outcome.report_dir / "publish-plan.json", cfg.publish)
    if publish:
        from bisector import publish as publish_mod
        from bisector.trust import vault

        result = publish_mod.publish(plan, cfg.publish, vault.publishing_env(), Path(dry_run) if dry_run else None)
        for line in (*(c.url for c in result.comments), *result.dry_run_files):
            click.echo(f"published: {line}", err=as_json)

"""`bisector plan`: how many builds, trials and GPU hours a bisection of GOOD..BAD will take.

With `--config`, also each build step's builds over the range, from the commits' files (nothing is
built): a keyed step (an LLVM pin) costs one build per distinct key, and a commit whose key files
match nothing is named, since that step would fail there.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import click

from bisector import config, gitrepo
from bisector.build.dryrun import step_builds
from bisector.commands.common import USER_PATH, devices_option, echo_devices, fail_on_error, print_json
from bisector.commands.simulate_cmd import make_settings, settings_options
from bisector.errors import BadInput
from bisector.search.cost import Plan, estimate, noise_from_rows


@click.command("plan")
@click.option("--repo", required=True, help="path or URL of the upstream repository")
@click.option(
    "--config",
    "config_path",
    default=None,
    help="a config: also count each build step's builds from the commits' files (no build)",
)
@click.option("--good", required=True)
@click.option("--bad", required=True)
@click.option("--noise-cv", type=float, default=None, help="per-trial coefficient of variation, e.g. 0.01")
@click.option(
    "--from-store", "store_path", type=USER_PATH, default=None, help="estimate the noise from a result store (SQLite)"
)
@click.option(
    "--from-csv", "csv_path", type=USER_PATH, default=None, help="estimate the noise from a trials CSV export"
)
@click.option("--campaign", default=None, help="campaign in the store or CSV")
@click.option("--steps", type=int, default=1, show_default=True, help="steps expected in the range")
@click.option("--step-pct", type=float, default=5.0, show_default=True, help="their size, in %")
@click.option("--shapes", type=int, default=3, show_default=True)
@click.option("--fail-rate", type=float, default=0.0, show_default=True, help="share of commits that do not build")
@click.option("--trial-seconds", type=float, default=60.0, show_default=True, help="GPU seconds per trial")
@click.option("--build-seconds", type=float, default=0.0, show_default=True, help="seconds per build")
@click.option("--runs", type=int, default=40, show_default=True, help="simulated ranges")
@settings_options
@devices_option
@click.option("--json", "as_json", is_flag=True)
@fail_on_error
def command(
    repo: str,
    config_path: str | None,
    good: str,
    bad: str,
    noise_cv: float | None,
    store_path: str | None,
    csv_path: str | None,
    campaign: str | None,
    steps: int,
    step_pct: float,
    shapes: int,
    fail_rate: float,
    trial_seconds: float,
    build_seconds: float,
    runs: int,
    min_step: float,
    alpha: float,
    trials: int,
    max_trials: int,
    devices: int,
    as_json: bool,
) -> None:
    """Estimate probes, trials and GPU time for a bisection, from the measured noise; with --config,
    also the builds of each build step over the range (without --noise-cv etc.: only those)."""
    sources = sum(x is not None for x in (noise_cv, store_path, csv_path))
    if sources > 1 or (sources == 0 and config_path is None):
        raise BadInput("give exactly one of --noise-cv, --from-store, --from-csv (or only --config)")
    cfg = config.load(config_path) if config_path else None
    git_repo = gitrepo.open_repo(repo)
    shas = [c.sha for c in gitrepo.commit_range(git_repo, good, bad)]
    builds = [b.as_dict() for b in step_builds(git_repo, shas, cfg.build)] if cfg else None
    if sources == 0:
        _print_builds(len(shas), builds or [], as_json)
        return
    settings = make_settings(min_step, alpha, trials, max_trials)
    noise_cv, source = _noise(noise_cv, store_path, csv_path, campaign)
    if not 0 <= noise_cv < 1 or not 0 <= fail_rate < 1 or runs < 1:
        raise BadInput("--noise-cv and --fail-rate must be in [0, 1), --runs >= 1")
    n = len(shas)
    plan_on = functools.partial(
        estimate, n, noise_cv, steps, step_pct, shapes, fail_rate, trial_seconds, build_seconds, settings, runs
    )
    plan = plan_on()
    wide = [plan, plan_on(devices=devices)] if devices > 1 else [plan]
    rows = [_by_devices(p) for p in wide]
    if as_json:
        print_json(
            {
                **plan.as_dict(),
                "noise_source": source,
                "by_devices": rows,
                **({"builds": builds} if builds is not None else {}),
            }
        )
        return
    click.echo(f"{n} commits, {steps} step(s) of {step_pct:g}% expected, noise CV {noise_cv:.2%} from {source}")
    _print_plan(plan, wide, rows, runs, trial_seconds, build_seconds)
    if builds is not None:
        _print_builds(n, builds, False)


def _by_devices(p: Plan) -> dict[str, Any]:
    """The plan's figures on its number of devices: a row of `by_devices`."""
    return {
        "devices": p.devices,
        "rounds": p.rounds_mean,
        "trials": p.trials_mean,
        "wall_s": p.wall_s_mean,
        "found_rate": p.found_rate,
    }


def _noise(
    noise_cv: float | None, store_path: str | None, csv_path: str | None, campaign: str | None
) -> tuple[float, str]:
    """The noise CV the plan assumes, and where it came from: as given, or measured from a store or CSV."""
    if noise_cv is not None:
        return noise_cv, "--noise-cv"
    measured, groups = noise_from_rows(_rows(store_path, csv_path, campaign))
    if math.isnan(measured):
        raise BadInput(f"{store_path or csv_path}: no commit/shape with two or more OK trials")
    return measured, f"{store_path or csv_path} ({groups} commit/shape groups with repeats)"


def _print_plan(
    plan: Plan, wide: list[Plan], rows: list[dict[str, Any]], runs: int, trial_seconds: float, build_seconds: float
) -> None:
    """The plan as text: builds, trials and GPU time, and with more devices what they change."""
    click.echo(
        f"builds (distinct commits): {plan.probes_mean:.1f} on average, {plan.probes_p90:.0f} at p90 "
        f"(bound k*ceil(log2 N)+4 = {plan.as_dict()['probes_bound']})"
    )
    click.echo(f"trials: {plan.trials_mean:.0f} on average, {plan.trials_p90:.0f} at p90")
    click.echo(
        f"GPU time: {plan.gpu_hours_mean:.2f} h on average, {plan.gpu_hours_p90:.2f} h at p90 "
        f"({trial_seconds:g} s per trial)"
    )
    if build_seconds:
        click.echo(f"build time: {plan.build_hours_mean:.2f} h on average")
    click.echo(f"simulated steps found at the exact commit: {plan.found_rate:.0%} of {runs} runs")
    if len(wide) > 1:
        echo_devices(rows)
        click.echo(f"with {wide[-1].devices} devices, steps found at the exact commit: {wide[-1].found_rate:.0%}")


def _print_builds(n: int, builds: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json({"commits": n, "builds": builds})
        return
    for b in builds:
        what = "distinct keys" if b["keyed"] else "distinct trees"
        missing = (
            f", key files missing in {len(b['missing'])}: {' '.join(s[:8] for s in b['missing'])}"
            if b["missing"]
            else ""
        )
        click.echo(
            f"build step {b['step']} ({b['run'][:60]}): at most {b['distinct_keys']} builds "
            f"({what} over {n} commits){missing}"
        )


def _rows(store_path: str | None, csv_path: str | None, campaign: str | None) -> list[dict[str, object]]:
    if csv_path:
        from bisector.search.analyze import load_csv

        series = load_csv(csv_path, campaign)
        return [
            {"sha": sha, "shape": shape, "value": v}
            for sha, per in series.samples.items()
            for shape, vals in per.items()
            for v in vals
        ]
    from bisector.store import Store

    with Store(store_path, readonly=True) as store:
        return store.rows(campaign)

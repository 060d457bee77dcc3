"""`bisector simulate`: the search against a step model over a real repository's history."""

from __future__ import annotations

from dataclasses import replace

import click

from bisector import gitrepo
from bisector.commands.common import F, devices_option, echo_devices, fail_on_error, print_json
from bisector.errors import BadInput
from bisector.model import SearchResult
from bisector.search import SearchSettings, result_json
from bisector.search.schedule import Clocked
from bisector.search.simulate import load_model, run_simulation


def settings_options(func: F) -> F:
    """--min-step, --alpha, --trials, --max-trials: the search's knobs, shared with `plan`."""
    for option in reversed(
        (
            click.option("--min-step", type=float, default=1.0, show_default=True, help="smallest step, in %"),
            click.option(
                "--alpha", type=float, default=0.01, show_default=True, help="chance of a false step per search"
            ),
            click.option("--trials", type=int, default=3, show_default=True, help="first trials per commit"),
            click.option("--max-trials", type=int, default=24, show_default=True, help="cap of the doubling"),
        )
    ):
        func = option(func)
    return func


def make_settings(min_step: float, alpha: float, trials: int, max_trials: int) -> SearchSettings:
    try:
        return SearchSettings(min_step_pct=min_step, alpha=alpha, initial_repeats=trials, max_repeats=max_trials)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def echo_result(result: SearchResult, subjects: dict[str, str], cost: bool = True) -> None:
    """A short text table of the steps found, then the cost."""
    if not result.steps:
        click.echo("no steps found")
    for s in result.steps:
        where = s.commit[:10] if not s.candidates else f"one of {s.candidates[0][:10]}..{s.candidates[-1][:10]}"
        pr = f"#{s.pr}" if s.pr is not None else "-"
        click.echo(f"{where}  {pr:>7}  {subjects.get(s.commit, '')[:60]}")
        for shape in s.shapes:
            lo, hi = s.ci95[shape]
            click.echo(
                f"    {shape:<24} {s.change_pct[shape]:+7.2f}%  [{lo:+.2f}, {hi:+.2f}]  p={s.p_value[shape]:.2g}"
            )
    for s in result.dropped:
        click.echo(f"dropped (did not hold on re-measurement): {s.commit[:10]}")
    if cost:
        click.echo(f"{result.commits_probed} commits probed, {result.trials} trials, {len(result.skipped)} skipped")


@click.command("simulate")
@click.option("--repo", required=True, help="path or URL of the repository whose history is used")
@click.option("--good", required=True, help="last good ref")
@click.option("--bad", required=True, help="first bad ref")
@click.option("--model", "model_path", required=True, help="step model TOML")
@click.option("--noise", type=float, default=0.01, show_default=True, help="per-trial coefficient of variation")
@click.option("--seed", type=int, default=0, show_default=True)
@settings_options
@devices_option
@click.option("--trial-seconds", type=float, default=60.0, show_default=True, help="seconds per trial (wall time)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@fail_on_error
def command(
    repo: str,
    good: str,
    bad: str,
    model_path: str,
    noise: float,
    seed: int,
    min_step: float,
    alpha: float,
    trials: int,
    max_trials: int,
    devices: int,
    trial_seconds: float,
    as_json: bool,
) -> None:
    """Run the localization engine against a step model over the real commits GOOD..BAD; with
    --devices W, also k-ary on W devices, its rounds, trials and wall time against W=1."""
    settings = make_settings(min_step, alpha, trials, max_trials)
    commits = gitrepo.commit_range(gitrepo.open_repo(repo), good, bad)
    model = load_model(model_path, [c.sha for c in commits])
    clocks: list[Clocked] = []

    def clock(width: int):  # type: ignore[no-untyped-def]
        def wrap(probe):  # type: ignore[no-untyped-def]
            clocks.append(Clocked(probe, width, trial_seconds))
            return clocks[-1]

        return wrap

    result = run_simulation(commits, model, noise, seed, settings, clock(1))
    wide = (
        run_simulation(commits, model, noise, seed, replace(settings, width=devices), clock(devices))
        if devices > 1
        else result
    )
    rows = [c.cost().as_dict() for c in clocks]
    if as_json:
        print_json({**result_json(wide), "by_devices": rows})
        return
    echo_result(wide, {c.sha: c.subject for c in commits})
    if devices > 1:
        same = {s.commit for s in wide.steps} == {s.commit for s in result.steps}
        click.echo(f"steps with 1 device: {'the same' if same else ', '.join(s.commit[:10] for s in result.steps)}")
    echo_devices(rows)

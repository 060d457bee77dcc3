"""`bisector analyze FILE.csv`: every step in an already-recorded series."""

from __future__ import annotations

import click

from bisector.commands.common import fail_on_error, print_json
from bisector.commands.simulate_cmd import echo_result
from bisector.errors import BadInput
from bisector.search import result_json
from bisector.search.analyze import find_steps, load_csv


@click.command("analyze")
@click.argument("csv_file", metavar="FILE.csv")
@click.option("--campaign", default=None, help="rows of this campaign only")
@click.option("--min-step", type=float, default=1.0, show_default=True, help="smallest step, in %")
@click.option("--alpha", type=float, default=0.01, show_default=True, help="chance of a false step")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (the simulate form)")
@fail_on_error
def command(csv_file: str, campaign: str | None, min_step: float, alpha: float, as_json: bool) -> None:
    """Find steps in a trials CSV (columns sha, shape, value; optional order/date, status)."""
    if min_step <= 0 or not 0 < alpha < 0.5:
        raise BadInput("--min-step must be > 0 and --alpha in (0, 0.5)")
    series = load_csv(csv_file, campaign)
    result = find_steps(series, min_step, alpha)
    if as_json:
        print_json(result_json(result))
    else:
        echo_result(result, {}, cost=False)
        click.echo(f"{len(series.commits)} commits, {result.trials} trials per shape and commit at least")

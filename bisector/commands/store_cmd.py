"""`bisector store info|export|copy`: look into the result store, dump its trials for pandas, or copy
it whole to carry it elsewhere (a run resumes from the copy).

All three only read: the store is opened read-only, and a file that is not a bisector store is
refused before anything could be written to it."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from bisector.commands.common import fail_on_error, print_json
from bisector.measure.time_spent import DeviceBreakdown, device_breakdown, from_records
from bisector.model import TrialRecord
from bisector.portable import exported_row
from bisector.store import FORMATS, Store
from bisector.store import last_used as laststore

_STORE_OPTION = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SQLite store (default: $BISECTOR_STORE, else the store the last "
    "run or demo used, else ./bisector-demo/results.sqlite, else the "
    "user cache dir's).",
)


def later_parts(records: Sequence[TrialRecord]) -> DeviceBreakdown:
    """The device sections of a campaign's later trials (slot > 0), part by part."""
    timelines, _ = from_records(records)
    return device_breakdown([t for t in timelines if t.slot])


def _which(store_path: Path | None) -> tuple[Path, str]:
    """The store named, or the one found (laststore.find) and why."""
    return (store_path, "") if store_path is not None else laststore.find()


@click.group("store")
def command() -> None:
    """Inspect or export the result store."""


@command.command("info")
@_STORE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--phases",
    is_flag=True,
    help="Also where each campaign's later trials spent their device time: "
    "median and total per part of the device section.",
)
@fail_on_error
def info(store_path: Path | None, as_json: bool, phases: bool) -> None:
    """Path, schema version and counts per campaign: trials are trial processes, as the report and
    `--json` count them; each stored one measurement per shape."""
    path, why = _which(store_path)
    with Store(path, readonly=True) as store:
        summary = store.info()
        parts = {c.campaign: later_parts(store.trials(c.campaign)) for c in summary.campaigns} if phases else {}
    if as_json:
        print_json(
            {
                **dataclasses.asdict(summary),
                "found_as": why or "--store",
                **({"later_device_parts": {k: v.as_json() for k, v in parts.items()}} if phases else {}),
            }
        )
        return
    click.echo(f"store: {summary.path}" + (f" ({why})" if why else ""))
    click.echo(f"schema version: {summary.schema_version}")
    if not summary.campaigns:
        click.echo("no campaigns")
        return
    header = ("campaign", "commits", "builds", "trials", "measurements", "ok", "nights")
    rows = [
        (c.campaign, c.commits, c.builds, c.trials, c.measurements, c.measurements_ok, c.nights)
        for c in summary.campaigns
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo(
            "  ".join(
                str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths))
            ).rstrip()
        )
    for campaign, b in parts.items():
        click.echo(f"{campaign}: later trials' device sections: " + "\n  ".join(b.lines()))


@command.command("export")
@_STORE_OPTION
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="csv", show_default=True)
@click.option("--campaign", default=None, help="Only this campaign (default: all).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Output file (default: stdout).",
)
@fail_on_error
def export(store_path: Path | None, fmt: str, campaign: str | None, out: Path | None) -> None:
    """Dump one row per trial, with every raw sample, as CSV or JSON: no path of this machine in it
    (paths under the work dir relative to it, others from named roots or their last parts)."""
    path, why = _which(store_path)
    if why:
        click.echo(f"store: {path} ({why})", err=True)
    with Store(path, readonly=True) as store:
        if out is None:
            store.export(fmt, sys.stdout, campaign=campaign, portable=exported_row)
        else:
            count = store.export(fmt, out, campaign=campaign, portable=exported_row)
            click.echo(f"wrote {count} trials to {out}", err=True)


@command.command("copy")
@_STORE_OPTION
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The copy, a new file (never overwritten); a name ending in .gz is gzipped.",
)
@fail_on_error
def copy(store_path: Path | None, out: Path) -> None:
    """Copy the whole store into one file, also while a run writes to it or after one was killed:
    its latest trials may sit in the -wal beside the file, which a plain copy leaves behind."""
    path, why = _which(store_path)
    if why:
        click.echo(f"store: {path} ({why})", err=True)
    with Store(path, readonly=True) as store:
        count = store.copy(out)
    click.echo(f"copied {count} trials to {out}", err=True)

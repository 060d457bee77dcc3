"""`bisector demo`: write the embedded demo upstream and bisect it end to end, for real."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bisector.commands.common import (
    USER_PATH,
    checked_shapes,
    fail_on_error,
    run_options,
    shape_list,
    with_cli_overrides,
)
from bisector.errors import BadInput
from bisector.runner.launch import start_workers


def demo_dir(directory: str) -> Path:
    """--dir as an absolute directory we can write to, or BadInput naming it (a regular file, or a
    file where a parent directory should be, raised NotADirectoryError deep in the demo writer)."""
    root = Path(directory)
    existing = next(p for p in (root, *root.parents) if p.exists())
    if not existing.is_dir():
        what = "is a file" if existing == root else f"cannot be made: {existing} is a file"
        raise BadInput(f"{root}: --dir {what}, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"{root}: --dir: {existing} is not writable")
    return root


@click.command("demo")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option(
    "--dir",
    "directory",
    type=USER_PATH,
    default="bisector-demo",
    show_default=True,
    help="Where the demo upstream, its store and its builds go; re-running resumes.",
)
@run_options
@fail_on_error
def command(
    device: str,
    directory: str,
    report_dir: str | None,
    shapes: str,
    no_fixes: bool,
    no_hunks: bool,
    as_json: bool,
    executor_kind: str | None,
    executor_address: str | None,
    visible: str | None,
) -> None:
    """Bisect the embedded demo library (40 commits with planted steps) on this machine."""
    from bisector.demo import write_demo_repo
    from bisector.demo.demo_config import demo_config, pick_device

    root = demo_dir(directory)
    device = pick_device(device)
    cfg = with_cli_overrides(demo_config(device, root / "upstream"), executor_kind, executor_address, visible)
    cfg = checked_shapes(cfg, shapes)  # a typo writes nothing: no upstream, no work dir, no last-store note
    start_workers(cfg, root / "work")  # their imports overlap the demo repo's writing and the bot's own
    from bisector import pipeline
    from bisector.commands.run_job import run_and_print

    manifest = write_demo_repo(root / "upstream")
    # The report goes under --dir too: run inside a checkout of bisector, the demo must not write
    # over the committed example in reports/.
    options = pipeline.RunOptions(
        good=manifest.good,
        bad=manifest.bad,
        store=str(root / "results.sqlite"),
        work_dir=str(root / "work"),
        report_dir=report_dir or str(root / "report"),
        shapes=shape_list(shapes),
        verify_fixes=not no_fixes,
        find_hunks=not no_hunks,
        command=" ".join(["bisector", *sys.argv[1:]]),
    )
    run_and_print(cfg, options, as_json, n_commits=len(manifest.commits), extra={"repo": str(root / "upstream")})

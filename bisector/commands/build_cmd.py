"""`bisector build --config X COMMIT...`: build commits into the cache; status, time, cache hits."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import click
import platformdirs
from rich.console import Console
from rich.table import Table

from bisector import config as config_mod
from bisector import gitrepo
from bisector.build import Builder, Prefetcher
from bisector.commands.common import USER_PATH, check_upstream, fail_on_error, print_json
from bisector.isolation import sandbox
from bisector.model import BuildResult, BuildStatus
from bisector.userfile import read_text


def cache_root(cfg: config_mod.Config, override: str | None = None) -> Path:
    """Where builds live: --cache-dir, else [build] cache_dir, else the user cache dir."""
    chosen = override or cfg.build.cache_dir
    return Path(chosen).expanduser() if chosen else Path(platformdirs.user_cache_dir("bisector")) / "builds"


@click.command("build")
@click.argument("commits", nargs=-1, required=True)
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The bisector TOML config naming the upstream and its build recipe.",
)
@click.option(
    "--patch", "patch_file", type=USER_PATH, help="Apply this patch (git diff format) on top of every commit."
)
@click.option("--cache-dir", type=USER_PATH, default=None, help="Override [build] cache_dir.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per commit.")
@fail_on_error
def command(
    commits: tuple[str, ...], config_path: str, patch_file: str | None, cache_dir: str | None, as_json: bool
) -> None:
    """Build COMMIT... (in parallel up to [build] parallel); exit 1 if any failed."""
    cfg = config_mod.load(config_path)
    check_upstream(cfg)
    sandbox.prepare(cfg)
    repo = gitrepo.open_repo(cfg.upstream.repo)
    shas = [gitrepo.resolve(repo, c) for c in commits]  # bad refs fail before any build starts
    patch = read_text(patch_file, newline_exact=True) if patch_file else None  # keep CRLF lines intact
    builder = Builder(repo, cfg.upstream, cfg.build, cache_root(cfg, cache_dir))
    with Prefetcher(builder, cfg.build.parallel) as pool:
        pool.prefetch(shas, patch)
        results = [pool.build(sha, patch) for sha in shas]
    if as_json:
        print_json([{**asdict(r), "status": r.status.value} for r in results])
    else:
        _table(results)
    if any(r.status is BuildStatus.FAILED for r in results):
        sys.exit(1)


def _table(results: list[BuildResult]) -> None:
    table = Table(box=None, header_style="bold")
    for column in ("commit", "status", "seconds", "cache", "log"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.sha[:10], r.status.value, f"{r.seconds:.2f}", "hit" if r.cache_hit else "built", r.log_path or ""
        )
    console = Console(width=200)
    console.print(table)
    for r in results:
        if r.status is BuildStatus.FAILED:
            click.echo(f"\n{r.sha[:10]} failed:\n{r.log_tail}")

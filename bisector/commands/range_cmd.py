"""`bisector range GOOD BAD`: the commits a bisection would walk, with their PR numbers."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.console import Console
from rich.table import Table

from bisector import gitrepo
from bisector.commands.common import commit_range, fail_on_error, print_json


@click.command("range")
@click.argument("good")
@click.argument("bad")
@click.option("--repo", "repo_path", default=".", show_default=True, help="Local path or git URL of the upstream.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, oldest first.")
@fail_on_error
def command(good: str, bad: str, repo_path: str, as_json: bool) -> None:
    """List GOOD..BAD along first parents: short SHA, date, author, PR, subject."""
    commits = commit_range(gitrepo.open_repo(repo_path), good, bad)
    if as_json:
        print_json([asdict(c) for c in commits])
        return
    table = Table(box=None, header_style="bold")
    for column in ("commit", "date", "author", "PR", "subject"):
        table.add_column(column)
    for i, c in enumerate(commits):
        mark = " (good)" if i == 0 else " (bad)" if i == len(commits) - 1 else ""
        table.add_row(c.short + mark, c.date[:10], c.author, f"#{c.pr}" if c.pr else "", c.subject)
    Console(width=200).print(table)

"""The `bisector` command: a click group; each subcommand lives in bisector/commands/."""

from __future__ import annotations

import importlib

import click

from bisector import __version__

# Subcommand modules, each exposing `command`; a module that fails to import is a bug.
_COMMANDS = (
    "run", "demo", "range", "bench", "build", "simulate", "plan", "analyze",
    "store", "publish", "nightly", "handle_comment", "check_config",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="bisector")
def main() -> None:
    """Find every performance step in a range of kernel-library commits."""


for _name in _COMMANDS:
    _module = importlib.import_module(f"bisector.commands.{_name}")
    main.add_command(_module.command)

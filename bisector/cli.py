"""The `bisector` command: a click group; each subcommand lives in bisector/commands/.

Subcommands are imported when they are invoked, not all at start: the search and the report pull
in scipy and matplotlib (~6 s on a busy 2-core machine), which `check-config`, `store info` or a
refused bad input should not wait for.
"""

from __future__ import annotations

import importlib

import click

from bisector import __version__

# Command name -> module in bisector.commands exposing `command`; a module that fails to import is a bug.
_COMMANDS = {
    "run": "run_cmd",
    "demo": "demo_cmd",
    "range": "range_cmd",
    "bench": "bench_cmd",
    "build": "build_cmd",
    "simulate": "simulate_cmd",
    "plan": "plan_cmd",
    "analyze": "analyze_cmd",
    "store": "store_cmd",
    "publish": "publish_cmd",
    "nightly": "nightly_cmd",
    "handle-comment": "handle_comment_cmd",
    "check-config": "check_config_cmd",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in _COMMANDS:
            return super().get_command(ctx, cmd_name)
        command: click.Command = importlib.import_module(f"bisector.commands.{_COMMANDS[cmd_name]}").command
        self.add_command(command, cmd_name)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="bisector")
def main() -> None:
    """Find every performance step in a range of kernel-library commits."""

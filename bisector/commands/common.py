"""What every command shares: one-line errors with fixed exit codes, config loading, JSON output."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable, TypeVar

import click

from bisector.errors import BisectorError

F = TypeVar("F", bound=Callable[..., Any])


def fail_on_error(func: F) -> F:
    """Turn a BisectorError into `error: <message>` on stderr and the error's exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BisectorError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))

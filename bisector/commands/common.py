"""What every command shares: one-line errors with fixed exit codes, user paths, JSON output.

Every command is wrapped in `fail_on_error`: a known failure (BisectorError) is one line
`error: <message>` and its exit code; anything else is a bug, shown as one line that points at
a log file holding the traceback (as pre-commit does), so a user never sees a wall of frames
and a maintainer still gets them.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import platformdirs

from bisector.errors import EXIT_FAILURE, BisectorError, RefError
from bisector.paths import absolute

if TYPE_CHECKING:
    from bisector.config import Config

F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERRUPTED = 130


def one_line(text: str, limit: int = 400) -> str:
    """`text` on a single line: later lines joined with ' | ', capped so a huge message stays readable."""
    flat = " | ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def crash_log_path() -> Path:
    return Path(platformdirs.user_cache_dir("bisector")) / "bisector.log"


def _log_crash(exc: BaseException) -> Path | None:
    """Append the traceback of an unexpected exception to the crash log; None if it cannot be written."""
    path = crash_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"### {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')} bisector {' '.join(sys.argv[1:])}\n")
            fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            fh.write("\n")
    except OSError:
        return None
    return path


def fail_on_error(func: F) -> F:
    """Turn a BisectorError into `error: <message>` on stderr and the error's exit code; an
    unexpected exception into one line naming the crash log that holds its traceback (exit 1)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BisectorError as exc:
            click.echo(f"error: {one_line(str(exc))}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo(
                "error: interrupted (every trial stored so far is kept; run the same command to resume)", err=True
            )
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence: a bug, reported as one
            where = _log_crash(exc)
            what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            tail = f" (traceback in {where})" if where else ""
            click.echo(f"error: unexpected {one_line(what, 300)}{tail}", err=True)
            if os.environ.get("BISECTOR_TRACEBACK"):
                traceback.print_exc()
            sys.exit(EXIT_FAILURE)

    return wrapper  # type: ignore[return-value]


class UserPath(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click (>=8.1 here)
    """A path the user typed, made absolute against the current directory at the CLI boundary.

    Relative paths must not reach code that runs git or a build with another working directory
    (git ran with cwd=<repo>/.git and put every worktree of a relative --work-dir inside it)."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str | None:
        if value is None or value == "":
            return None if value is None else ""
        return absolute(str(value))


USER_PATH = UserPath()


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def relative_paths(data: Any) -> Any:
    """`data` with every absolute path of a file or dir that exists written relative to the current
    directory: a run's JSON is pasted into issues and CI logs, where `/home/<user>/...` names a
    machine, not a result."""
    if isinstance(data, dict):
        return {key: relative_paths(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [relative_paths(value) for value in data]
    if isinstance(data, str) and os.path.isabs(data) and "\n" not in data and os.path.exists(data):
        return os.path.relpath(data)
    return data


def run_options(func: F) -> F:
    """What `run` and `demo` share (asv's common_args): where the report goes, which shapes, which
    stages after the search, and JSON output."""
    for option in reversed(
        (
            click.option(
                "--report-dir",
                type=USER_PATH,
                default=None,
                help="Default: <config report dir>/<date>-<name>/ (demo: under --dir).",
            ),
            click.option("--shapes", default="", help="Comma-separated shape keys, names or suites to measure."),
            click.option("--no-fixes", is_flag=True, help="Do not build and measure the reverts on the tip."),
            click.option("--no-hunks", is_flag=True, help="Do not narrow each culprit down to its hunks."),
            click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
            click.option(
                "--executor",
                "executor_kind",
                type=click.Choice(["local", "dask"]),
                default=None,
                help="Where trials run (default: the config's [executor] kind, else local).",
            ),
            click.option(
                "--executor-address",
                default=None,
                help="dask: the scheduler (tcp://host:8786), or 'local' for one worker per device here.",
            ),
            click.option(
                "--visible",
                default=None,
                metavar="I,J,...",
                help="Device indices to run on (default: the config's [device] visible); two or more "
                "probe that many commits at once.",
            ),
        )
    ):
        func = option(func)
    return func


def with_cli_overrides(cfg: Any, kind: str | None, address: str | None, visible: str | None = None) -> Any:
    """The config with `--executor` / `--executor-address` over its `[executor]` and `--visible` over its
    `[device] visible` (BadInput naming the option)."""
    from dataclasses import replace

    from bisector.config import executor_problem
    from bisector.errors import BadInput

    if visible is not None:
        cfg = replace(cfg, devices=device_list(visible))
    if kind is None and address is None:
        return cfg
    kind = kind or (cfg.executor.kind if address is None else "dask")
    address = address if address is not None else (cfg.executor.address if kind == cfg.executor.kind else None)
    problem = executor_problem(kind, address)
    if problem:
        raise BadInput(f"--executor-address: {problem}")
    return replace(cfg, executor=replace(cfg.executor, kind=kind, address=address))


def device_list(text: str) -> tuple[int, ...]:
    """`--visible 0,1` as device indices, or BadInput naming the option and what is wrong."""
    from bisector.errors import BadInput

    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise BadInput(f"--visible: must be comma-separated device indices (0,1), got {text!r}")
    if len(set(parts)) != len(parts):
        raise BadInput(f"--visible: a device is named twice in {text!r}")
    return tuple(int(p) for p in parts)


def shape_list(text: str) -> tuple[str, ...]:
    return tuple(s for s in text.split(",") if s)


def devices_option(func: F) -> F:
    """`--devices W` of `plan` and `simulate`: the search probes W commits a round (k-ary)."""
    return click.option(
        "--devices",
        type=click.IntRange(1, 64),
        default=1,
        show_default=True,
        help="Devices free: probe W commits at once; shows rounds, trials and wall time against W=1.",
    )(func)


def echo_devices(rows: list[dict[str, Any]]) -> None:
    """Rounds, trials and wall time per device count, one line each, the first (W=1) as the base."""
    base = rows[0]
    click.echo(f"{'devices':>7} {'rounds':>7} {'trials':>7} {'wall':>9}  wall vs 1 device")
    for row in rows:
        ratio = row["wall_s"] / base["wall_s"] if base["wall_s"] else 1.0
        click.echo(
            f"{row['devices']:>7} {row['rounds']:>7.1f} {row['trials']:>7.0f} {_duration(row['wall_s']):>9}"
            f"  {ratio:.0%}"
        )


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def checked_shapes(cfg: Config, text: str) -> Config:
    """The config cut to `--shapes`, checked before a command starts workers or writes anything: a
    typo then leaves no work dir, demo upstream or last-store note behind (BadInput naming the option)."""
    from bisector.config import select_shapes
    from bisector.errors import BadInput, ConfigError

    try:
        return select_shapes(cfg, shape_list(text))
    except ConfigError as exc:
        raise BadInput(f"--shapes: {exc.problem}") from None


def check_upstream(cfg: Config) -> None:
    """A local upstream that is not there is bad input before anything starts, with how to point the
    config at one: the shipped demo configs hold the placeholder `repo = "demo"`, which only
    `bisector demo` fills in."""
    from bisector.errors import ConfigError
    from bisector.gitrepo import is_url, open_repo

    repo = cfg.upstream.repo
    if is_url(repo):
        return  # not fetched here: check-config stays offline, and `run` fetches it next
    if Path(repo).expanduser().is_dir():
        try:
            open_repo(repo, fetch=False)
        except BisectorError as exc:
            raise ConfigError(cfg.path, "upstream.repo", f"{exc}; set it to a local checkout or a git URL") from None
        return
    if repo == "demo":
        how = (
            "a placeholder that `bisector demo` fills in: run `bisector demo` (same options), or write the "
            'demo\'s upstream once with `bisector demo --dir D` and set repo = "D/upstream"'
        )
    else:
        how = "no such directory here; set it to a local checkout or a git URL"
    raise ConfigError(cfg.path, "upstream.repo", f"{repo!r}: {how}")


def commit_range(repo: Any, good: str, bad: str) -> tuple[Any, ...]:
    """`gitrepo.commit_range`, naming the likeliest mistake: GOOD and BAD given the wrong way round."""
    from bisector import gitrepo

    try:
        return gitrepo.commit_range(repo, good, bad)
    except RefError as exc:
        try:
            good_sha, bad_sha = gitrepo.resolve(repo, good), gitrepo.resolve(repo, bad)
            swapped = good_sha != bad_sha and repo.is_ancestor(bad_sha, good_sha)
        except BisectorError:
            swapped = False
        if swapped:
            raise RefError(
                f"{good} is a descendant of {bad}, not an ancestor: did you swap --good and --bad?"
            ) from None
        raise exc from None


def range_order(cfg: Config, good: str, bad: str, offline: bool = False) -> list[str] | None:
    """The commits of GOOD..BAD (oldest first), for the time-left estimate; None when they cannot
    be had (the pipeline reports any other problem with the repository). A ref unknown even after a
    fetch is bad input, raised here: before the store, the work dir, the trial workers or the
    last-store note are touched."""
    from bisector import gitrepo

    try:
        return [c.sha for c in commit_range(gitrepo.open_repo(cfg.upstream.repo, fetch=False), good, bad)]
    except RefError:
        try:
            repo = gitrepo.open_repo(cfg.upstream.repo, fetch=not offline)
        except BisectorError:
            return None
        return [c.sha for c in commit_range(repo, good, bad)]
    except BisectorError:
        return None

"""`bisector handle-comment --event PATH --config X`: answer a /bisect or /perf PR comment.

One process locally; in the workflow two stages of it at two trust levels (see triggers/comment.py):
`--authorize-only` (token, no GPU) and `--plan-out FILE --head-sha SHA` (GPU, no token).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from bisector import config as config_mod
from bisector.commands.common import USER_PATH, fail_on_error
from bisector.errors import BadInput
from bisector.triggers.comment import Handled, Job, authorize, handle, measure
from bisector.trust import vault

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")


def _check(
    authorize_only: bool,
    outputs: str | None,
    plan_out: str | None,
    head_sha: str | None,
    dry_run: str | None,
    head_repo: str | None = None,
) -> None:
    if authorize_only and plan_out:
        raise BadInput("--authorize-only and --plan-out are two different stages: give one")
    if outputs and not authorize_only:
        raise BadInput("--outputs goes with --authorize-only")
    if plan_out and dry_run:
        raise BadInput("--plan-out posts nothing already: drop --dry-run")
    if plan_out and not head_sha:
        raise BadInput("--plan-out needs --head-sha: the PR head pinned by the authorize stage")
    if head_sha and not plan_out:
        raise BadInput("--head-sha goes with --plan-out (alone, the head is pinned from GitHub)")
    if head_sha and not _SHA.fullmatch(head_sha):
        raise BadInput(f"--head-sha: not a full commit SHA: {head_sha[:80]!r}")
    if head_repo is not None and not plan_out:
        raise BadInput("--head-repo goes with --plan-out (alone, it is read from GitHub)")
    if head_repo and not _REPO.fullmatch(head_repo):
        raise BadInput(f"--head-repo: must be 'owner/name', got {head_repo[:80]!r}")


def _write_outputs(path: str, result: Handled) -> None:
    """Append `run=`, `head_sha=`, `repo=`, `pr=`, `verb=` and `head_repo=` in the $GITHUB_OUTPUT format:
    what the publish job holds the plan to (`bisector publish --expect-repo --expect-pr --expect-sha`),
    and where the head lives, for the measure job's fork policy (`--head-repo`)."""
    run = "true" if result.action == "authorized" else "false"
    pr = result.pr or ""
    try:
        with open(path, "a") as fh:
            fh.write(
                f"run={run}\nhead_sha={result.head_sha}\nrepo={result.repo}\npr={pr}\nverb={result.verb}\n"
                f"head_repo={result.head_repo}\n"
            )
    except OSError as exc:
        raise BadInput(f"--outputs {path}: {exc.strerror}") from None


@click.command("handle-comment")
@click.option(
    "--event",
    "event_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The issue_comment event JSON (GITHUB_EVENT_PATH in a workflow).",
)
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--store", type=USER_PATH, default=None, help="SQLite store (default: the config's, else $BISECTOR_STORE / cache)."
)
@click.option("--work-dir", type=USER_PATH, default=None, help="Builds, JIT caches and trial logs.")
@click.option("--report-dir", type=USER_PATH, default=None, help="Default: <report dir>/pr/<N>/<run id>/.")
@click.option(
    "--dry-run",
    "dry_run",
    default=None,
    type=USER_PATH,
    help="Write every GitHub payload to this directory instead of sending it.",
)
@click.option(
    "--authorize-only",
    is_flag=True,
    help="Only react, check the permission, answer, and pin the PR head (needs the token, no GPU).",
)
@click.option(
    "--outputs",
    default=None,
    type=click.Path(dir_okay=False),
    help="With --authorize-only: append run=true|false, head_sha=, repo=, pr=, verb=, head_repo= to this "
    "file ($GITHUB_OUTPUT).",
)
@click.option(
    "--plan-out",
    "plan_out",
    default=None,
    type=click.Path(dir_okay=False),
    help="Only measure (no token, no GitHub call) and write the answer as a publish plan here.",
)
@click.option(
    "--head-repo",
    "head_repo",
    default=None,
    help="With --plan-out: where the PR's head branch lives (owner/name), as --authorize-only read it; "
    "without it the head counts as a fork's (refused on a runner without a sandbox).",
)
@click.option(
    "--head-sha",
    "head_sha",
    default=None,
    help="With --plan-out: the PR head pinned by --authorize-only; any other head is refused.",
)
@fail_on_error
def command(
    event_path: str,
    config_path: str,
    store: str | None,
    work_dir: str | None,
    report_dir: str | None,
    dry_run: str | None,
    authorize_only: bool,
    outputs: str | None,
    plan_out: str | None,
    head_sha: str | None,
    head_repo: str | None,
) -> None:
    """Read a GitHub issue_comment event and run the command it holds, answering in the PR."""
    _check(authorize_only, outputs, plan_out, head_sha, dry_run, head_repo)
    cfg = config_mod.load(config_path)
    job = Job(cfg, store, work_dir, report_dir)
    say = lambda s: click.echo(s, err=True)  # noqa: E731
    if authorize_only:
        result = authorize(event_path, job, vault.publishing_env(), Path(dry_run) if dry_run else None)
        if outputs:
            _write_outputs(outputs, result)
    elif plan_out:
        Path(plan_out).unlink(missing_ok=True)  # never post a plan left by an earlier run
        assert head_sha is not None
        result = measure(event_path, job, head_sha, Path(plan_out), say=say, head_repo=head_repo or None)
    else:
        result = handle(event_path, job, vault.publishing_env(), Path(dry_run) if dry_run else None, say=say)
    click.echo(f"{result.action}: {result.message}" + (f" -> {result.answer}" if result.answer else ""))

"""`bisector bench --config X`: measure the current checkout of the upstream, print a table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import click
import platformdirs
from rich.console import Console
from rich.table import Table

from bisector import config as config_mod
from bisector.commands.common import USER_PATH, fail_on_error, print_json
from bisector.errors import BadInput
from bisector.model import BuildResult, BuildStatus, TrialRecord, TrialStatus
from bisector.runner import run_trial
from bisector.search import control_outcome
from bisector.search.samples import cv_pct

_SEVERITY = (TrialStatus.WRONG, TrialStatus.CRASH, TrialStatus.TIMEOUT, TrialStatus.UNAVAILABLE, TrialStatus.OK)


def checkout(source: Path, source_dir: str) -> BuildResult:
    """The working tree as a build: its HEAD sha, and a patch tag when it has local changes."""
    import git

    if not source.is_dir():
        raise BadInput(f"{source}: not a directory (give the upstream checkout with --source)")
    try:
        repo = git.Repo(source, search_parent_directories=True)
        sha, dirty = repo.head.commit.hexsha, repo.is_dirty(untracked_files=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        raise BadInput(f"{source}: not a git checkout with a commit") from None
    return BuildResult(
        sha=sha,
        status=BuildStatus.OK,
        source_dir=str((source / source_dir).resolve()),
        patch_hash="worktree" if dirty else None,
    )


def summarize(records: Sequence[TrialRecord]) -> list[dict[str, object]]:
    """One row per shape: medians over OK trials; CV of the ratio across trials (within the one
    trial's repetitions when there is a single trial)."""
    rows: list[dict[str, object]] = []
    for shape in dict.fromkeys(r.shape for r in records):
        mine = [r for r in records if r.shape == shape]
        ok = [r for r in mine if r.status is TrialStatus.OK]
        status = next(s for s in _SEVERITY if any(r.status is s for r in mine))
        ratios = [r.ratio for r in ok if r.ratio is not None]
        if len(ok) == 1 and ok[0].control_ms:
            ratios_cv = cv_pct([c / s for s, c in zip(ok[0].subject_ms, ok[0].control_ms)])
        else:
            ratios_cv = cv_pct(ratios)

        def med(xs: Sequence[float | None]) -> float | None:
            xs2 = [x for x in xs if x is not None]
            return statistics.median(xs2) if xs2 else None

        rows.append(
            {
                "shape": shape,
                "status": status.value,
                "trials": len(mine),
                "ok": len(ok),
                "subject_tflops": med([r.subject_tflops for r in ok]),
                "control_tflops": med([r.control_tflops for r in ok]),
                "ratio": med(ratios),
                "subject_gbps": med([_number(r.protocol.get("subject_gbps")) for r in ok]),
                "control_gbps": med([_number(r.protocol.get("control_gbps")) for r in ok]),
                "ratio_cv_pct": ratios_cv,
                "compile_s": med([r.compile_s for r in mine]),
                "control_first_s": med([_number(r.protocol.get("control_first_s")) for r in mine]),
                "error": next((r.error for r in mine if r.status is not TrialStatus.OK), ""),
                "control_unavailable": any(control_outcome.control_error(r) for r in mine),
            }
        )
    return rows


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def render(rows: list[dict[str, object]], title: str) -> Table:
    table = Table(title=title)
    for col in (
        "shape",
        "subject TFLOP/s",
        "control TFLOP/s",
        "subject GB/s",
        "control GB/s",
        "ratio",
        "CV %",
        "compile s",
        "status",
    ):
        table.add_column(col, justify="left" if col in ("shape", "status") else "right")

    def fmt(v: object, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for r in rows:
        status = str(r["status"]) + (f" ({r['ok']}/{r['trials']} ok)" if r["ok"] != r["trials"] else "")
        if r["error"]:
            status += f": {str(r['error'])[:80]}"
        if r.get("control_unavailable"):
            status += "; no control (below)"
        style = {"ok": "", "wrong": "bold red"}.get(str(r["status"]), "yellow")
        table.add_row(
            str(r["shape"]),
            fmt(r["subject_tflops"], ".4g"),
            fmt(r["control_tflops"], ".4g"),
            fmt(r.get("subject_gbps"), ".4g"),
            fmt(r.get("control_gbps"), ".4g"),
            fmt(r["ratio"], ".4f"),
            fmt(r["ratio_cv_pct"], ".2f"),
            fmt(r["compile_s"], ".2f"),
            status,
            style=style,
        )
    return table


@click.command("bench")
@click.option("--config", "config_path", required=True, type=click.Path(path_type=Path), help="config TOML")
@click.option("--source", type=USER_PATH, help="upstream checkout (default: upstream.repo)")
@click.option("--trials", type=click.IntRange(min=1), default=None, help="trial processes per suite")
@click.option("--suite", "suites", multiple=True, help="only these suites (fa, gemm)")
@click.option("--work", type=USER_PATH, help="trial and JIT cache dir")
@click.option("--no-store", is_flag=True, help="do not record the trials in the store")
@click.option("--json", "as_json", is_flag=True, help="print the records as JSON")
@fail_on_error
def command(
    config_path: Path,
    source: str | None,
    trials: int | None,
    suites: tuple[str, ...],
    work: str | None,
    no_store: bool,
    as_json: bool,
) -> None:
    """Measure the current checkout of the upstream: subject and control, every shape."""
    cfg = config_mod.load(config_path)
    from bisector.isolation import sandbox

    sandbox.prepare(cfg)
    src = Path(source or cfg.upstream.repo).absolute()
    build = checkout(src, cfg.upstream.source_dir)
    work_dir = Path(work) if work else Path(platformdirs.user_cache_dir("bisector")) / "bench" / cfg.name
    chosen = suites or tuple(cfg.subjects)
    for s in chosen:
        if s not in cfg.subjects:
            raise BadInput(f"--suite {s}: the config has no subject for it (has: {', '.join(cfg.subjects)})")
    n = trials or cfg.protocol.trials
    console = Console(stderr=True)
    records: list[TrialRecord] = []
    for i in range(n):
        for suite in chosen:
            console.print(f"[dim]{build.sha[:7]} {suite}: trial {i + 1}/{n}[/dim]")
            records += run_trial(cfg, build, suite, work=work_dir, trial_index=i, first=(i == 0))
    if not no_store:
        _store(cfg, records)
    if as_json:
        from dataclasses import asdict

        print_json([{**asdict(r), "status": r.status.value} for r in records])
        return
    title = f"{cfg.name}: {build.sha[:12]}{' (+worktree changes)' if build.patch_hash else ''}, {n} trial(s)"
    out = Console()
    out.print(render(summarize(records), title))
    for note in control_outcome.notes(records, cfg.control):
        out.print(note, markup=False, soft_wrap=True)


def _store(cfg: config_mod.Config, records: Sequence[TrialRecord]) -> None:
    from bisector.store import Store

    Store(cfg.store).add_trials("bench", records, cfg.shapes)

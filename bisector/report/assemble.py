"""ReportData from the stages' results: the one place that decides what a report shows of a run.

The pipeline runs the stages and hands their results over (`StageResults`, `RunFacts`); here they
become the rows, steps, notes and totals every renderer reads. Pure: nothing is measured, built
or read from the store here, so a report re-made from the same results says the same thing.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from bisector import gitrepo, portable
from bisector.config import AUTOTUNE_CACHE, Config
from bisector.measure.time_spent import Throughput
from bisector.model import BuildResult, BuildStatus, Commit, SearchResult, Step, TrialRecord, TrialStatus
from bisector.paths import shown
from bisector.report.cache_fit import cache_fit_lines
from bisector.report.data import ReportData
from bisector.search import control_outcome, evidence
from bisector.search.call_timing import CallFigures, figures
from bisector.search.decisions import decision_lines, raised_min_steps
from bisector.search.evidence import CommitRow
from bisector.search.samples import trial_metric
from bisector.search.wrong_results import WrongResult, WrongWindow
from bisector.store.totals import CallTotals, measured_commits, run_totals
from bisector.why.cause import Cause
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.facts import actions, step_moves
from bisector.why.fixes import FixResult
from bisector.why.interactions import Interaction
from bisector.why.kernel_diff.diff import StepKernels

OFFLINE_NOTE = (
    "Replayed offline from the stored trials: no commit was built or measured for this report. "
    "The search, the verification of each step, the reverts and the hunks are replayed as far as "
    "the run measured them: a step whose fresh trials were never taken is unverified, commits "
    "the search asked for that were never measured are skipped (not measured), and a hunk "
    "search the run did not finish says where it stopped."
)


@dataclass(frozen=True)
class StageResults:
    """What each stage of one bisection made, as it made it."""

    config: Config
    commits: tuple[Commit, ...]  # the range, oldest first
    stored: tuple[TrialRecord, ...]  # every trial of the campaign, in the order stored
    builds: Mapping[str, BuildResult]  # the builds the probe made or found, by commit
    result: SearchResult
    windows: tuple[WrongWindow, ...] = ()
    fixes: tuple[FixResult, ...] = ()
    interactions: tuple[Interaction, ...] = ()
    hunks: tuple[HunkFinding, ...] = ()
    kernels: tuple[StepKernels, ...] = ()
    causes: tuple[Cause, ...] = ()
    throughput: Throughput | None = None


@dataclass(frozen=True)
class RunFacts:
    """How the run was asked for and what it cost: what the report says of the run itself."""

    good: str
    bad: str
    report_dir: Path
    wall_s: float
    command: str = ""  # as the user typed it; "" for `bisector run` with the config and the range
    notes: tuple[str, ...] = ()
    offline: bool = False
    this_call_trials: int = 0
    isolation: str = ""  # what confined the code under test on this host


def report_data(stages: StageResults, run: RunFacts) -> ReportData:
    """The report of one bisection, from its stages' results."""
    config, commits, result, out, every = stages.config, stages.commits, stages.result, run.report_dir, stages.stored
    keys = tuple(s.key for s in config.shapes)
    metric_of = {s.key: config.thresholds.decision_of(s.suite) for s in config.shapes}
    unpatched = [t for t in every if t.patch_hash is None]
    by_sha = _by_commit(unpatched, keys)
    rows, wrong, machine = commit_rows(commits, by_sha, measured_commits(every, keys), keys, metric_of)
    skipped, logs = _skipped(stages, out)
    proto = config.protocol
    cmd = portable.command(run.command or f"bisector run --config {config.path} --good {run.good} --bad {run.bad}", out)
    data = ReportData(
        title=report_title(config, commits, machine),
        config_name=config.name,
        upstream=shown_upstream(config.upstream.repo, out),
        branch=config.upstream.branch,
        good=commits[0],
        bad=commits[-1],
        device=config.device,
        control=config.control,
        machine=machine,
        protocol=_protocol_shown(config, every),
        shapes=keys,
        range_commits=tuple(commits),
        rows=tuple(rows),
        steps=tuple(_levels_as_shown(s, by_sha, metric_of) for s in result.steps),
        dropped=result.dropped,
        uncertain=result.uncertain,
        decided=(
            *decision_lines(result),
            *cache_fit_lines([s for s in config.shapes if s.key in keys], machine, config.caches),
        ),
        unsure=evidence.unsure_pairs(result, proto.max_trials, config.thresholds.min_step),
        skipped=skipped,
        wrong=tuple(wrong),
        commits_probed=result.commits_probed,
        trials=result.trials,
        wall_s=run.wall_s,
        trial_s=trial_seconds(every),
        totals=run_totals(
            every, [c.sha for c in commits], keys, len(skipped), CallTotals(run.this_call_trials, run.wall_s)
        ),
        moves=step_moves(result.steps, rows, config.thresholds.min_step),
        min_step_pct=config.thresholds.min_step_pct,
        min_steps={**config.thresholds.min_steps, **raised_min_steps(result)},  # a latency shape's raised step
        alpha=config.thresholds.alpha,
        metric=metric_by_suite(config),
        calls=call_figures(unpatched, keys, [r.commit.sha for r in rows]),
        reproduce=(cmd,),
        build_logs=logs,
        wrong_windows=tuple(stages.windows),
        notes=run.notes
        + ((OFFLINE_NOTE,) if run.offline else ())
        + control_outcome.notes((t for t in unpatched if t.shape in keys), config.control),
        isolation=run.isolation,
        fresh_lineage=any(_renewed(t) for s in result.steps for t in by_sha.get(s.commit, ())),
    )
    return _with_later_stages(data, stages)


def _by_commit(unpatched: Sequence[TrialRecord], keys: tuple[str, ...]) -> dict[str, list[TrialRecord]]:
    """The trials of the config's shapes, per commit."""
    by_sha: dict[str, list[TrialRecord]] = {}
    for t in unpatched:
        if t.shape in keys:
            by_sha.setdefault(t.sha, []).append(t)
    return by_sha


def _protocol_shown(config: Config, trials: Sequence[TrialRecord] = ()) -> dict[str, object]:
    """The protocol as the report states it: repetitions, trials, the JIT cache variables, the env,
    and whether Triton's autotune choices were kept per commit: set by the bot for this config, and
    seen in the trials' JIT env (a store's older trials, re-made offline, were not run so)."""
    proto = config.protocol
    envs: list[Mapping[str, object]] = [e for t in trials if isinstance(e := t.protocol.get("jit_env"), dict)]
    return {
        "reps": proto.reps,
        "warmup": proto.warmup,
        "trials": proto.trials,
        "max_trials": proto.max_trials,
        "jit_cache_env": list(proto.jit_cache_env),
        "autotune_kept": config.keeps_autotune and bool(envs) and all(e.get(AUTOTUNE_CACHE) == "1" for e in envs),
        **proto.env,
    }


def _with_later_stages(data: ReportData, stages: StageResults) -> ReportData:
    """The report with what the stages after the search found: reverts on the tip, hunks, kernels
    and causes, and the run's throughput."""
    return replace(
        data,
        fixes=tuple(stages.fixes),
        interactions=tuple(stages.interactions),
        actions=actions(stages.result.steps, stages.fixes, stages.interactions),
        hunks=stages.hunks,
        throughput=stages.throughput,
        kernels=stages.kernels,
        causes=stages.causes,
    )


def _skipped(stages: StageResults, out: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Why each skipped commit was skipped (a failed build's log tail, else the probe's reason),
    and the build log of each that failed to build, as the report links it."""
    result = stages.result
    skipped = {
        sha: stages.builds[sha].log_tail
        if sha in stages.builds and stages.builds[sha].status is BuildStatus.FAILED
        else result.measurements[sha].reason
        for sha in result.skipped
    }
    logs = {
        sha: shown(b.log_path, out)
        for sha, b in stages.builds.items()
        if b.log_path and sha in skipped and b.status is BuildStatus.FAILED
    }
    return skipped, logs


def _renewed(trial: TrialRecord) -> bool:
    """Whether the trial ran in a renewed worker lineage (the report says so)."""
    worker = trial.protocol.get("worker")
    return isinstance(worker, Mapping) and int(worker.get("lineage") or 0) > 0


def commit_rows(
    commits: Sequence[Commit],
    by_sha: Mapping[str, Sequence[TrialRecord]],
    measured: Collection[str],
    keys: tuple[str, ...],
    metric_of: Mapping[str, str],
) -> tuple[list[CommitRow], list[WrongResult], dict[str, object]]:
    """A row per measured commit of the range, the wrong results seen on any of them, and the
    machine the first measured commit's trials recorded."""
    rows: list[CommitRow] = []
    wrong: list[WrongResult] = []
    machine: dict[str, object] = {}
    for commit in commits:
        trials = by_sha.get(commit.sha, [])
        ok = [t for t in trials if t.status is TrialStatus.OK]
        for t in trials:
            if t.status is TrialStatus.WRONG and not any(w.sha == t.sha and w.shape == t.shape for w in wrong):
                wrong.append(WrongResult(t.sha, t.shape, t.max_abs_err, t.max_rel_err))
        if commit.sha not in measured:
            continue
        machine = machine or dict(ok[0].machine if ok else trials[0].machine)
        rows.append(
            CommitRow(
                commit,
                median_by_shape(ok, "subject_tflops"),
                median_by_shape(ok, "control_tflops"),
                median_by_shape(ok, "ratio"),
                {k: sum(t.shape == k for t in ok) for k in keys},
                {k: tuple(t.subject_tflops for t in ok if t.shape == k and t.subject_tflops) for k in keys},
                evidence.metric_samples(ok, keys, metric_of.__getitem__),
            )
        )
    return rows, wrong, machine


def metric_by_suite(config: Config) -> dict[str, str]:
    """What the steps were tested on, per suite: "ratio", "speed", "latency_ratio" or "latency_speed"."""
    return {s.suite: config.thresholds.decision_of(s.suite) for s in config.shapes}


def call_figures(
    trials: Sequence[TrialRecord], keys: Sequence[str], measured: Sequence[str]
) -> tuple[CallFigures, ...]:
    """Per shape, kernel time, latency and host time at the first and last measured commits."""
    ends = list(dict.fromkeys([*measured[:1], *measured[-1:]]))
    return tuple(f for key in keys for sha in ends if (f := figures(trials, key, sha)) is not None)


def median_by_shape(trials: Sequence[TrialRecord], attr: str) -> dict[str, float]:
    """Per shape, the median of a TrialRecord field over the OK trials that have it."""
    out: dict[str, list[float]] = {}
    for t in trials:
        value = getattr(t, attr)
        if t.status is TrialStatus.OK and value is not None:
            out.setdefault(t.shape, []).append(value)
    return {k: statistics.median(v) for k, v in out.items()}


def trial_seconds(trials: Sequence[TrialRecord]) -> float:
    """Seconds spent in trial processes; one process stores a row per shape, all with its start and end."""
    spans = {}
    for t in trials:
        if t.started_at and t.finished_at:
            span = datetime.fromisoformat(t.finished_at) - datetime.fromisoformat(t.started_at)
            spans[(t.sha, t.patch_hash, t.started_at)] = span.total_seconds()
    return sum(spans.values())


def shown_upstream(repo: str, report_dir: Path) -> str:
    """The upstream as the report names it: a URL without any credentials in it, a local checkout
    relative to the report (or by its name when that is far away)."""
    if gitrepo.is_url(repo):
        return re.sub(r"(?<=://)[^/@]*@", "", repo)
    return shown(repo, report_dir)


def report_title(config: Config, commits: Sequence[Commit], machine: Mapping[str, object]) -> str:
    """`bisector: h200-demo, a0e9ecf..eef6c3f on NVIDIA H100 80GB HBM3`: the config's name and the
    device its trials ran on, as they recorded it (a config named for one GPU may run on another)."""
    device = str(machine.get("device_name") or config.device)
    return f"bisector: {config.name}, {commits[0].short}..{commits[-1].short} on {device}"


def _levels_as_shown(step: Step, by_sha: Mapping[str, Sequence[TrialRecord]], metric_of: Mapping[str, str]) -> Step:
    """The step with its levels in the units the report shows its metric in (evidence.metric_value:
    a speed as full-clock TFLOP/s, not the search's 1 / time): the same ratio, so the same change."""
    levels = {}
    for key, (before, after) in step.levels.items():
        factors = [
            shown / own
            for t in by_sha.get(step.parent, ())
            if t.shape == key
            and (shown := evidence.metric_value(t, metric_of[key]))
            and (own := trial_metric(t, metric_of[key]))
        ]
        scale = statistics.median(factors) if factors else 1.0
        levels[key] = (before * scale, after * scale)
    return replace(step, levels=levels)

"""The composition root of a bisection: wires the config, builds, trials, store, search, why-stages
and report together for `run`, `demo`, nightly and `/bisect`.

    config -> range -> builds -> trials (subject + control) -> store -> search -> why (fixes, hunks,
    interactions, kernels) -> report

Not the only place parts meet: `bench` and `build` (bisector/commands/) and a dask worker's builds
(bisector/runner/remote.py) wire a builder or an executor of their own. The stages never import
this module (they name why/session.py's Protocol); see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import git

from bisector import gitrepo, portable, search
from bisector.build import Builder, Prefetcher
from bisector.config import Config, select_shapes
from bisector.errors import BadInput
from bisector.model import (
    BuildResult,
    BuildStatus,
    Commit,
    Measurement,
    SearchResult,
    Shape,
    Step,
    TrialRecord,
    TrialStatus,
)
from bisector.paths import shown, work_dir_for
from bisector.report import render
from bisector.report.data import ReportData
from bisector.runner import sandbox
from bisector.runner.choose import Trials, offline_width, open_trials
from bisector.runner.executor import TrialJob, TrialOutcome
from bisector.runner.probe import MAX_CRASHES, ProbeEvent, StoreProbe, Taken
from bisector.runner.time_spent import Stage, Throughput, from_records, summarize
from bisector.runner.warmer import Warmer, default_parallel, precompile_executor
from bisector.search import control_outcome, evidence
from bisector.search.call_timing import CallFigures, figures
from bisector.search.decisions import decision_lines
from bisector.search.evidence import CommitRow
from bisector.search.outlook import SearchBasis
from bisector.search.samples import PooledNoise, run_noise, trial_metric
from bisector.search.wrong_results import WrongResult, WrongWindow, localize_wrong
from bisector.store import Store, campaign_key
from bisector.store.totals import CallTotals, measured_commits, run_totals
from bisector.why import cause, culprit_hunks
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.facts import actions, step_moves
from bisector.why.fixes import FixResult, OnTheTip, set_up_reverts, verify_fixes
from bisector.why.fixes import expected_trials as fixes_expected
from bisector.why.interactions import Interaction
from bisector.why.kernel_diff.collect import step_kernels
from bisector.why.kernel_diff.regenerate import compile_commit

T = TypeVar("T")


@dataclass(frozen=True)
class RunOptions:
    good: str
    bad: str
    store: str | None = None  # overrides the config's
    work_dir: str | None = None  # builds, JIT caches, trial logs
    report_dir: str | None = None  # overrides reports/<date>-<name>/
    shapes: tuple[str, ...] = ()  # only these shape keys (or suite names)
    verify_fixes: bool = True
    find_hunks: bool = True  # measure the parent with halves of each culprit's hunks
    offline: bool = False  # replay the search on stored trials only: no build, no trial, no GPU
    command: str = ""  # the command line, for the report's "reproduce" section
    notes: tuple[str, ...] = ()  # caveats the caller adds to the report's header (e.g. untrusted code measured)


@dataclass(frozen=True)
class RunOutcome:
    result: SearchResult
    report_dir: Path
    report: ReportData
    commits: tuple[Commit, ...]
    fixes: tuple[FixResult, ...] = ()
    patches: dict[str, Path] = field(default_factory=dict)
    wrong_windows: tuple[WrongWindow, ...] = ()


Observer = Callable[[ProbeEvent], None]



class Session:
    """Everything one config needs to measure commits: repo, store, builds, trial launcher."""

    def __init__(self, config: Config, store_path: str | None = None, work_dir: str | None = None,
                 observer: Observer = lambda e: None, offline: bool = False) -> None:
        self.config = config
        self.offline = offline  # every probe replays the store: no build, no trial
        if not offline:
            sandbox.prepare(config)  # [sandbox] require: stop here where code under test would run unsandboxed
        try:
            self.repo: git.Repo = gitrepo.open_repo(config.upstream.repo)
        except BadInput as exc:  # name the config key that led there
            raise BadInput(f"{config.path}: upstream.repo: {exc}") from None
        self.store = Store(store_path or config.store)
        self.campaign = campaign_key(config)
        self.work = work_dir_for(config.name, work_dir)
        self.work.mkdir(parents=True, exist_ok=True)
        cache_root = Path(config.build.cache_dir).absolute() if config.build.cache_dir else self.work / "builds"
        self.builder = Builder(self.repo, config.upstream, config.build, cache_root)
        # How the store writes this machine's dirs (bisector/portable.py): no absolute path in it.
        local = {} if gitrepo.is_url(config.upstream.repo) else {"upstream": config.upstream.repo}
        self.where = portable.roots(self.work, builds=cache_root, **local)
        # With the dask executor commits are built on the workers, where their trials run.
        remote = config.executor.kind != "local" and not offline
        builds = _RemoteBuilds(self) if remote else self.builder
        self.prefetcher = Prefetcher(builds, config.build.parallel)
        # The commits the search may need next, built and compiled cold on spare cores (GPU hosts),
        # or with dask set up and held on the workers (standbys).
        parallel = 0 if offline else default_parallel(config)
        self.warmer = Warmer(builds, lambda: precompile_executor(config, self.work, parallel), parallel,
                             standby=(lambda: self.executor) if config.protocol.standby else None) if parallel else None
        self._trials: Trials | None = None
        self.stages: list[Stage] = []
        self.observer = observer

    @property
    def trials(self) -> Trials:
        """The executor, started on first use: an offline replay or a report starts no trial process."""
        if self._trials is None:
            self._trials = open_trials(self.config, self.work)
        return self._trials

    @property
    def executor(self) -> Any:  # runner.choose.Trials holds whichever executor the config names
        return self.trials.executor

    def width(self) -> int:
        """Commits the search probes at once: the devices the executor has (see runner/choose.py)."""
        if self.offline:
            return offline_width(self.config)
        if self.config.executor.kind == "local":
            return self.config.executor.width or len(self.config.devices)
        return self.trials.width(self.config)

    def devices(self) -> int:
        if self._trials is not None:
            return self._trials.devices
        return len(self.config.devices) if self.config.executor.kind == "local" else offline_width(self.config)

    def probe(self, patch: str | None = None, patch_hash: str | None = None, offline: bool | None = None,
              shapes: Sequence[Shape] | None = None, max_crashes: int = MAX_CRASHES) -> StoreProbe:
        return StoreProbe(self.campaign, self.config.shapes if shapes is None else shapes, self.store,
                          self.prefetcher, _Lazy(self), seed=self.config.protocol.seed, patch=patch,
                          patch_hash=patch_hash, recipe=self.config.build.recipe,
                          cold_jit=bool(self.config.protocol.jit_cache_env),
                          metric={s.suite: self.config.thresholds.decision_of(s.suite) for s in self.config.shapes},
                          offline=self.offline if offline is None else offline, max_crashes=max_crashes,
                          on_event=self.observer, where=self.where, warmer=self.warmer,
                          latency_steps=self.config.thresholds.latency_steps == "host-bound")

    @contextlib.contextmanager
    def stage(self, name: str, expect: int = 0, basis: SearchBasis | None = None) -> Iterator[None]:
        """Mark a measuring stage of the run (search, fixes, hunks) for the throughput summary, and
        announce it, with the trials it is expected to take (the search: what its outlook re-runs it
        on), to the progress display."""
        self.observer(ProbeEvent("", "stage", name, expect=expect, basis=basis))
        start = time.time()
        try:
            yield
        finally:
            self.stages.append(Stage(name, start, time.time()))

    def throughput(self, shas: Sequence[str] = ()) -> Throughput:
        """This run's trial processes; offline, those of the runs that stored the trials of `shas`."""
        if self.offline:
            timelines, stages = from_records([t for sha in shas for t in self.store.trials(self.campaign, sha=sha)])
            return summarize(timelines, stages, self.devices())
        timelines = self._trials.executor.timelines if self._trials is not None else []
        return summarize(timelines, self.stages, self.devices())

    def close(self) -> None:
        if self.warmer is not None:
            self.warmer.close()
        if self._trials is not None:
            self._trials.executor.close()
        self.prefetcher.close()
        self.store.close()


class _Lazy:
    """The session's executor, started by the first trial asked for."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def submit(self, job: TrialJob) -> Future[TrialOutcome]:
        future: Future[TrialOutcome] = self.session.executor.submit(job)
        return future

    def cancel(self, future: Future[TrialOutcome]) -> None:
        self.session.executor.cancel(future)

    def renew_lineage(self) -> int:
        """A new worker lineage where the executor has one (not the dask executor's: 0, any worker)."""
        renew = getattr(self.session.executor, "renew_lineage", None)
        return int(renew()) if renew is not None else 0


class _RemoteBuilds:
    """The session's builds made by its executor's workers (dask), started by the first build asked for."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def build(self, sha: str, patch: str | None = None) -> BuildResult:
        builds = self.session.trials.builds
        assert builds is not None  # an executor whose workers build (dask)
        result: BuildResult = builds.build(sha, patch)
        return result


class Prefetching:
    """A probe that, after each commit, builds the midpoints the search may ask next, and sets up
    the reverts of the steps it is about to verify (`expect_steps`)."""

    def __init__(self, probe: StoreProbe, prefetcher: Prefetcher, order: Sequence[str],
                 expect: Callable[[Sequence[tuple[str, Mapping[str, float]]]], None] = lambda found: None) -> None:
        self.probe, self.prefetcher, self.expect = probe, prefetcher, expect
        self.index = {sha: i for i, sha in enumerate(order)}
        self.order = order

    def __call__(self, sha: str, repeats: int) -> Measurement:
        result = self.probe(sha, repeats)
        self.prefetch_after(sha)
        return result

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        return self.probe.together(wants)

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        return self.probe.shaped(wants)

    def prefetch(self, shas: Sequence[str]) -> None:
        self.probe.prefetch(shas)

    def independent(self) -> AbstractContextManager[None]:
        return self.probe.independent()

    def expect_steps(self, found: Sequence[tuple[str, Mapping[str, float]]]) -> None:
        self.expect(found)

    def prefetch_after(self, sha: str) -> None:
        seen = sorted({self.index[s] for s, _ in self.probe.probes if s in self.index})
        i = self.index.get(sha)
        if i is None:
            return
        pos = seen.index(i)
        neighbours = [seen[pos - 1]] if pos > 0 else []
        neighbours += [seen[pos + 1]] if pos + 1 < len(seen) else []
        self.prefetcher.prefetch([self.order[(i + j) // 2] for j in neighbours if abs(i - j) > 1])


def beside(work: Callable[[], T], background: bool) -> Future[T]:
    """`work`'s result as a future: on a thread of its own while the caller goes on, or done now."""
    if not background:
        done: Future[T] = Future()
        done.set_result(work())
        return done
    pool = ThreadPoolExecutor(1, thread_name_prefix="beside")
    future = pool.submit(work)
    pool.shutdown(wait=False)
    return future


def search_settings(config: Config) -> search.SearchSettings:
    return search.SearchSettings(min_step_pct=config.thresholds.min_step_pct, min_steps=config.thresholds.min_steps,
                                 alpha=config.thresholds.alpha,
                                 initial_repeats=config.protocol.trials, max_repeats=config.protocol.max_trials,
                                 first_look=config.protocol.first_look, split_on_moved=config.protocol.split_on_moved,
                                 verify_on_open=config.protocol.verify_on_open,
                                 decision_trials=config.protocol.decision_trials,
                                 anchor_s=config.protocol.drift_anchor_s, zone=config.thresholds.indifference_zone)


def search_basis(order: Sequence[str], settings: search.SearchSettings, measure: object) -> SearchBasis:
    """What the search runs on, as the outlook runs it again: with the probe's optional powers."""
    return SearchBasis(tuple(order), settings, together=getattr(measure, "together", None) is not None,
                       shaped=getattr(measure, "shaped", None) is not None)


def with_prs(result: SearchResult, commits: Sequence[Commit]) -> SearchResult:
    prs = {c.sha: c.pr for c in commits}

    def fix(steps: Sequence[Step]) -> tuple[Step, ...]:
        return tuple(replace(s, pr=prs.get(s.commit)) for s in steps)

    return replace(result, steps=fix(result.steps), dropped=fix(result.dropped))


def bisect(config: Config, options: RunOptions, observer: Observer = lambda e: None) -> RunOutcome:
    """The main job: localize every step in GOOD..BAD, verify fixes on the tip, write the report."""
    started = time.monotonic()
    config = select_shapes(config, options.shapes)
    session = Session(config, options.store, options.work_dir, observer, offline=options.offline)
    plotting: render.PlotPool | None = None
    try:
        plotting = render.PlotPool.for_shapes(len(config.shapes))
        if not options.offline:
            _ = session.trials  # the trial workers' imports (torch, triton: seconds) overlap the listing and builds
        if plotting is None:
            render.import_plotting_in_background()
        commits = gitrepo.commit_range(session.repo, options.good, options.bad)
        session.store.add_commits(session.campaign, commits)
        order = [c.sha for c in commits]
        probe = session.probe()
        measure: StoreProbe | Prefetching = probe
        # On the CPU a background build would steal the trials' cores (unless the config asks for
        # prefetches: a warmer then exists); offline nothing is built.
        if (config.device != "cpu" or session.warmer is not None) and not options.offline:
            session.prefetcher.prefetch([order[0], order[-1], *(order[len(order) * q // 4] for q in (1, 2, 3))])
            measure = Prefetching(probe, session.prefetcher, order,
                                  expect=lambda found: set_up_reverts(session, order[-1], found) if options.verify_fixes
                                  else None)
        basis = search_basis(order, replace(search_settings(config), width=session.width()), measure)
        with session.stage("search", basis=basis):
            result = with_prs(search.localize(order, measure, basis.settings), commits)
            windows = localize_wrong(order, result.measurements, probe)
        out = report_path(config, options)
        # the JIT caches of the steps' commits, kept beside the report before a later run empties them
        # (a resumed run whose JIT dirs are gone compiles those commits again; offline nothing runs)
        recompile = None if options.offline else (lambda sha: compile_commit(session, sha))
        # Beside the later stages on a GPU host: reading the kernels runs cuobjdump and ptxas on each
        # (13-16 s for the H200 demo's seven steps, the device idle meanwhile); on the CPU, after.
        kernels_later = beside(lambda: step_kernels(session.work, out, result.steps, config.protocol.jit_cache_env,
                                                    recompile), config.device != "cpu" and not options.offline)
        taken = Taken(result.measurements)
        # the trial noise the search measured per shape: what the later stages decide their few
        # side-by-side trials on (samples.compare_pooled)
        noise = run_noise(result.measurements.values(), (k for s in result.steps for k in s.shapes))
        on_tip, found = _later_stages(session, options, result, commits, out, taken, noise)
        fixes, patches, interactions = on_tip.fixes, dict(on_tip.patches), on_tip.interactions
        kernels = kernels_later.result()
        causes = cause.for_steps(kernels, found, lambda sha: gitrepo.commit_diff(session.repo, sha))
        throughput = session.throughput(order)
        data = report_data(session, commits, result, fixes, time.monotonic() - started, options, probe, windows,
                           report_dir=out, interactions=interactions,
                           this_call_trials=0 if options.offline else throughput.trials)
        data = replace(data, hunks=found, throughput=throughput, kernels=kernels, causes=causes,
                       isolation=sandbox.run_isolation(config.device),
                       fresh_lineage=_fresh_lineage(result.steps, probe))
        drawing = plotting.render(data, out) if plotting is not None else ()
        write_trials_csv(session, commits, out / render.CSV_NAME, out)  # while the plots are drawn
        render.write_report(data, out, drawing)
        return RunOutcome(result, out, data, commits, fixes, patches, windows)
    finally:
        if plotting is not None:
            plotting.close()
        session.close()


def _later_stages(session: Session, options: RunOptions, result: SearchResult, commits: Sequence[Commit], out: Path,
                  taken: Taken, noise: Mapping[str, PooledNoise | None]) -> tuple[OnTheTip, tuple[HunkFinding, ...]]:
    """The stages after the search the options ask for: each regression's revert checked on the tip,
    and the hunks of each culprit that carry its step."""
    on_tip = OnTheTip()
    found: tuple[HunkFinding, ...] = ()
    if options.verify_fixes:
        with session.stage("fixes", fixes_expected(result, session.config)):
            on_tip = verify_fixes(session, result, commits, out, taken, noise)
    if options.find_hunks:
        with session.stage("hunks", culprit_hunks.expected_trials(session, result.steps)):
            found = culprit_hunks.find_hunks(session, result.steps, taken, out, noise)
    return on_tip, found


def _fresh_lineage(steps: Sequence[Step], probe: StoreProbe) -> bool:
    """Whether a step's trials ran in a renewed worker lineage (the report says so)."""
    for s in steps:
        for t in probe.stored(s.commit):
            worker = t.protocol.get("worker")
            if isinstance(worker, Mapping) and int(worker.get("lineage") or 0) > 0:
                return True
    return False


def metric_by_suite(config: Config) -> dict[str, str]:
    """What the steps were tested on, per suite: "ratio", "speed", "latency_ratio" or "latency_speed"."""
    return {s.suite: config.thresholds.decision_of(s.suite) for s in config.shapes}


def call_figures(trials: Sequence[TrialRecord], keys: Sequence[str],
                 measured: Sequence[str]) -> tuple[CallFigures, ...]:
    """Per shape, kernel time, latency and host time at the first and last measured commits."""
    ends = list(dict.fromkeys([*measured[:1], *measured[-1:]]))
    return tuple(f for key in keys for sha in ends if (f := figures(trials, key, sha)) is not None)


def write_trials_csv(session: Session, commits: Sequence[Commit], path: Path, report_dir: Path | None = None) -> None:
    """Every trial of the range, with its raw repetitions, for pandas users; no path of this machine
    in it (trials stored by an older bisector kept absolute ones): the upstream as the report shows
    it, paths under the work dir relative to it, other paths from named roots."""
    path.parent.mkdir(parents=True, exist_ok=True)
    repo = session.config.upstream.repo
    where = portable.roots(session.work, **({} if gitrepo.is_url(repo) else {"upstream": repo}))
    upstream = shown_upstream(repo, report_dir or path.parent)

    def row(r: dict[str, Any]) -> dict[str, Any]:
        r = dict(cast("dict[str, Any]", portable.scrub_value(r, where, session.work)))  # a dict in, a dict out
        r["campaign"] = f"{session.config.name}:{upstream}"
        return r

    session.store.export("csv", path, session.campaign, shas=[c.sha for c in commits], portable=row)


def report_path(config: Config, options: RunOptions) -> Path:
    if options.report_dir:
        return Path(options.report_dir)
    return Path(config.report_dir) / f"{datetime.now(UTC):%Y-%m-%d}-{config.name}"


def median_by_shape(trials: Sequence[TrialRecord], attr: str) -> dict[str, float]:
    """Per shape, the median of a TrialRecord field over the OK trials that have it."""
    out: dict[str, list[float]] = {}
    for t in trials:
        value = getattr(t, attr)
        if t.status is TrialStatus.OK and value is not None:
            out.setdefault(t.shape, []).append(value)
    return {k: statistics.median(v) for k, v in out.items()}


def medians(session: Session, sha: str, attr: str = "subject_tflops",
            patch_hash: str | None = None) -> dict[str, float]:
    """Per shape, the median of a TrialRecord field over the commit's OK trials in the store."""
    return median_by_shape(session.store.trials(session.campaign, sha=sha, patch_hash=patch_hash), attr)


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
        factors = [shown / own for t in by_sha.get(step.parent, ()) if t.shape == key
                   and (shown := evidence.metric_value(t, metric_of[key])) and (own := trial_metric(t, metric_of[key]))]
        scale = statistics.median(factors) if factors else 1.0
        levels[key] = (before * scale, after * scale)
    return replace(step, levels=levels)


_OFFLINE_NOTE = ("Replayed offline from the stored trials: no commit was built or measured for this report. "
                 "The search, the verification of each step, the reverts and the hunks are replayed as far as "
                 "the run measured them: a step whose fresh trials were never taken is unverified, commits "
                 "the search asked for that were never measured are skipped (not measured), and a hunk "
                 "search the run did not finish says where it stopped.")


def _commit_rows(commits: Sequence[Commit], by_sha: Mapping[str, Sequence[TrialRecord]], measured: Collection[str],
                 keys: tuple[str, ...], metric_of: Mapping[str, str],
                 ) -> tuple[list[CommitRow], list[WrongResult], dict[str, object]]:
    """The report's row of each measured commit, each (commit, shape) that gave wrong results, and
    the machine of the first measured commit's trials."""
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
        rows.append(CommitRow(commit, median_by_shape(ok, "subject_tflops"), median_by_shape(ok, "control_tflops"),
                              median_by_shape(ok, "ratio"),
                              {k: sum(t.shape == k for t in ok) for k in keys},
                              {k: tuple(t.subject_tflops for t in ok if t.shape == k and t.subject_tflops)
                               for k in keys},
                              evidence.metric_samples(ok, keys, metric_of.__getitem__)))
    return rows, wrong, machine


def report_data(session: Session, commits: Sequence[Commit], result: SearchResult, fixes: Sequence[FixResult],
                wall_s: float, options: RunOptions, probe: StoreProbe,
                windows: Sequence[WrongWindow] = (), report_dir: Path | None = None,
                interactions: Sequence[Interaction] = (), this_call_trials: int = 0) -> ReportData:
    config, store = session.config, session.store
    out = report_dir or report_path(config, options)
    keys = tuple(s.key for s in config.shapes)
    metric_of = {s.key: config.thresholds.decision_of(s.suite) for s in config.shapes}
    every = store.trials(session.campaign)
    measured = measured_commits(every, keys)
    by_sha: dict[str, list[TrialRecord]] = {}
    for t in every:
        if t.patch_hash is None and t.shape in keys:
            by_sha.setdefault(t.sha, []).append(t)
    rows, wrong, machine = _commit_rows(commits, by_sha, measured, keys, metric_of)
    skipped = {sha: probe.build_results[sha].log_tail if sha in probe.build_results and
               probe.build_results[sha].status is BuildStatus.FAILED else result.measurements[sha].reason
               for sha in result.skipped}
    logs = {sha: shown(b.log_path, out) for sha, b in probe.build_results.items()
            if b.log_path and sha in skipped and b.status is BuildStatus.FAILED}
    proto = config.protocol
    cmd = portable.command(options.command or f"bisector run --config {config.path} --good {options.good} "
                                              f"--bad {options.bad}", out)
    return ReportData(
        title=report_title(config, commits, machine),
        config_name=config.name, upstream=shown_upstream(config.upstream.repo, out), branch=config.upstream.branch,
        good=commits[0], bad=commits[-1], device=config.device, control=config.control, machine=machine,
        protocol={"reps": proto.reps, "warmup": proto.warmup, "trials": proto.trials,
                  "max_trials": proto.max_trials, "jit_cache_env": list(proto.jit_cache_env), **proto.env},
        shapes=keys, range_commits=tuple(commits), rows=tuple(rows),
        steps=tuple(_levels_as_shown(s, by_sha, metric_of) for s in result.steps), dropped=result.dropped,
        uncertain=result.uncertain, decided=tuple(decision_lines(result)),
        unsure=evidence.unsure_pairs(result, proto.max_trials, config.thresholds.min_step),
        skipped=skipped, wrong=tuple(wrong), fixes=tuple(fixes), commits_probed=result.commits_probed,
        trials=result.trials, wall_s=wall_s, trial_s=trial_seconds(every),
        totals=run_totals(every, [c.sha for c in commits], keys, len(skipped), CallTotals(this_call_trials, wall_s)),
        moves=step_moves(result.steps, rows, config.thresholds.min_step),
        actions=actions(result.steps, fixes, interactions), interactions=tuple(interactions),
        min_step_pct=config.thresholds.min_step_pct, min_steps=dict(config.thresholds.min_steps),
        alpha=config.thresholds.alpha,
        metric=metric_by_suite(config), calls=call_figures(store.trials(session.campaign, patch_hash=None), keys,
                                                       [r.commit.sha for r in rows]),
        reproduce=(cmd,), build_logs=logs, wrong_windows=tuple(windows),
        notes=options.notes + ((_OFFLINE_NOTE,) if options.offline else ())
        + control_outcome.notes((t for t in store.trials(session.campaign, patch_hash=None) if t.shape in keys),
                                config.control))

"""The composition root of a bisection: wires the config, builds, trials, store, search, why-stages
and report together for `run`, `demo`, nightly and `/bisect`.

    config -> range -> builds -> trials (subject + control) -> store -> search -> why (fixes, hunks,
    interactions, kernels) -> report

The stages' results are handed to report/assemble.py (`StageResults`, `RunFacts`), which makes
the ReportData; this module fills no report field.

Not the only place parts meet: `bench` and `build` (bisector/commands/) and a dask worker's builds
(bisector/runner/remote.py) wire a builder or an executor of their own. The stages never import
this module (they name why/session.py's Protocol); see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from bisector.estimate.outlook import SearchBasis
from bisector.isolation import sandbox
from bisector.measure.probe import MAX_CRASHES, ProbeEvent, StoreProbe, Taken
from bisector.measure.time_spent import Stage, Throughput, from_records, summarize
from bisector.measure.warmer import Warmer, precompile_executor
from bisector.model import BuildResult, Commit, Measurement, SearchResult, Shape, Step
from bisector.paths import work_dir_for
from bisector.report import render
from bisector.report.assemble import RunFacts, StageResults, median_by_shape, report_data, shown_upstream
from bisector.report.data import ReportData
from bisector.runner.choose import Trials, offline_width, open_trials
from bisector.runner.executor import TrialJob, TrialOutcome
from bisector.runner.launch import default_parallel
from bisector.search.prober import Prober
from bisector.search.samples import PooledNoise, run_noise
from bisector.search.wrong_results import WrongWindow, localize_wrong
from bisector.store import Store, campaign_key
from bisector.why import cause, culprit_hunks
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.fixes import FixResult, OnTheTip, set_up_reverts, verify_fixes
from bisector.why.fixes import expected_trials as fixes_expected
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

    def __init__(
        self,
        config: Config,
        store_path: str | None = None,
        work_dir: str | None = None,
        observer: Observer = lambda e: None,
        offline: bool = False,
    ) -> None:
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
        self.warmer = (
            Warmer(
                builds,
                lambda: precompile_executor(config, self.work, parallel),
                parallel,
                standby=(lambda: self.executor) if config.protocol.standby else None,
            )
            if parallel
            else None
        )
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

    def probe(
        self,
        patch: str | None = None,
        patch_hash: str | None = None,
        offline: bool | None = None,
        shapes: Sequence[Shape] | None = None,
        max_crashes: int = MAX_CRASHES,
    ) -> StoreProbe:
        return StoreProbe(
            self.campaign,
            self.config.shapes if shapes is None else shapes,
            self.store,
            self.prefetcher,
            _Lazy(self),
            seed=self.config.protocol.seed,
            patch=patch,
            patch_hash=patch_hash,
            recipe=self.config.build.recipe,
            cold_jit=bool(self.config.protocol.jit_cache_env),
            metric={s.suite: self.config.thresholds.decision_of(s.suite) for s in self.config.shapes},
            offline=self.offline if offline is None else offline,
            max_crashes=max_crashes,
            on_event=self.observer,
            where=self.where,
            warmer=self.warmer,
            latency_steps=self.config.thresholds.latency_steps == "host-bound",
        )

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

    def __init__(
        self,
        probe: StoreProbe,
        prefetcher: Prefetcher,
        order: Sequence[str],
        expect: Callable[[Sequence[tuple[str, Mapping[str, float]]]], None] = lambda found: None,
    ) -> None:
        self.probe, self.prefetcher, self.expect = probe, prefetcher, expect
        self.index = {sha: i for i, sha in enumerate(order)}
        self.order = order
        self.side_by_side, self.shapes_alone = probe.side_by_side, probe.shapes_alone  # every method passed on

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
    return search.SearchSettings(
        min_step_pct=config.thresholds.min_step_pct,
        min_steps=config.thresholds.min_steps,
        alpha=config.thresholds.alpha,
        initial_repeats=config.protocol.trials,
        max_repeats=config.protocol.max_trials,
        first_look=config.protocol.first_look,
        split_on_moved=config.protocol.split_on_moved,
        verify_on_open=config.protocol.verify_on_open,
        decision_trials=config.protocol.decision_trials,
        anchor_s=config.protocol.drift_anchor_s,
        zone=config.thresholds.indifference_zone,
    )


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
        commits, probe, result, windows = _searched(session, options)
        order = [c.sha for c in commits]
        out = report_path(config, options)
        # the JIT caches of the steps' commits, kept beside the report before a later run empties them
        # (a resumed run whose JIT dirs are gone compiles those commits again; offline nothing runs)
        recompile = None if options.offline else (lambda sha: compile_commit(session, sha))
        # Beside the later stages on a GPU host: reading the kernels runs cuobjdump and ptxas on each
        # (13-16 s for the H200 demo's seven steps, the device idle meanwhile); on the CPU, after.
        kernels_later = beside(
            lambda: step_kernels(session.work, out, result.steps, config.protocol.jit_cache_env, recompile),
            config.device != "cpu" and not options.offline,
        )
        taken = Taken(result.measurements)
        # the trial noise the search measured per shape: what the later stages decide their few
        # side-by-side trials on (samples.compare_pooled)
        noise = run_noise(result.measurements.values(), (k for s in result.steps for k in s.shapes))
        on_tip, found = _later_stages(session, options, result, commits, out, taken, noise)
        fixes, patches, interactions = on_tip.fixes, dict(on_tip.patches), on_tip.interactions
        kernels = kernels_later.result()
        causes = cause.for_steps(kernels, found, lambda sha: gitrepo.commit_diff(session.repo, sha))
        throughput = session.throughput(order)
        stages = StageResults(
            config,
            tuple(commits),
            tuple(session.store.trials(session.campaign)),
            dict(probe.build_results),
            result,
            tuple(windows),
            tuple(fixes),
            tuple(interactions),
            tuple(found),
            tuple(kernels),
            tuple(causes),
            throughput,
        )
        data = _reported(session, options, stages, out, time.monotonic() - started, plotting)
        return RunOutcome(result, out, data, commits, fixes, patches, windows)
    finally:
        if plotting is not None:
            plotting.close()
        session.close()


def _reported(
    session: Session,
    options: RunOptions,
    stages: StageResults,
    out: Path,
    wall_s: float,
    plotting: render.PlotPool | None,
) -> ReportData:
    """The report assembled from the stages' results and written: its page, plots and trials CSV."""
    throughput = stages.throughput
    data = report_data(
        stages,
        RunFacts(
            options.good,
            options.bad,
            out,
            wall_s,
            options.command,
            options.notes,
            options.offline,
            0 if options.offline or throughput is None else throughput.trials,
            sandbox.run_isolation(session.config.device),
        ),
    )
    drawing = plotting.render(data, out) if plotting is not None else ()
    write_trials_csv(session, stages.commits, out / render.CSV_NAME, out)  # while the plots are drawn
    render.write_report(data, out, drawing)
    return data


def _searched(
    session: Session, options: RunOptions
) -> tuple[tuple[Commit, ...], StoreProbe, SearchResult, tuple[WrongWindow, ...]]:
    """The range listed and searched, with the prefetches ahead of the search on a GPU host, and
    the commits that gave wrong results localized."""
    commits = gitrepo.commit_range(session.repo, options.good, options.bad)
    session.store.add_commits(session.campaign, commits)
    order = [c.sha for c in commits]
    probe = session.probe()
    measure: Prober = probe
    # On the CPU a background build would steal the trials' cores (unless the config asks for
    # prefetches: a warmer then exists); offline nothing is built.
    if (session.config.device != "cpu" or session.warmer is not None) and not options.offline:
        session.prefetcher.prefetch([order[0], order[-1], *(order[len(order) * q // 4] for q in (1, 2, 3))])
        measure = Prefetching(
            probe,
            session.prefetcher,
            order,
            expect=lambda found: set_up_reverts(session, order[-1], found) if options.verify_fixes else None,
        )
    settings = replace(search_settings(session.config), width=session.width())
    basis = SearchBasis(tuple(order), settings, together=measure.side_by_side, shaped=measure.shapes_alone)
    with session.stage("search", basis=basis):
        result = with_prs(search.localize(order, measure, settings), commits)
        windows = localize_wrong(order, result.measurements, probe)
    return commits, probe, result, windows


def _later_stages(
    session: Session,
    options: RunOptions,
    result: SearchResult,
    commits: Sequence[Commit],
    out: Path,
    taken: Taken,
    noise: Mapping[str, PooledNoise | None],
) -> tuple[OnTheTip, tuple[HunkFinding, ...]]:
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


def medians(
    session: Session, sha: str, attr: str = "subject_tflops", patch_hash: str | None = None
) -> dict[str, float]:
    """Per shape, the median of a TrialRecord field over the commit's OK trials in the store."""
    return median_by_shape(session.store.trials(session.campaign, sha=sha, patch_hash=patch_hash), attr)

"""probe(sha, repeats): build if needed, run only the trials the store does not already hold.

This is what makes a run resumable: every trial is committed to the store the moment it ends,
and a probe counts what is stored before it measures anything. It is also where a run asks for
all the trials it needs at once: the executor prepares their processes together and lends each
the device in turn, so the device does not wait on a process start between two trials.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bisector import portable
from bisector.estimate.outlook import SearchBasis
from bisector.measure.warmer import Want, Warmer
from bisector.model import (
    LATENCY_KEY,
    WARM_KEY,
    BuildResult,
    BuildStatus,
    Measurement,
    ProbeStatus,
    Shape,
    TrialRecord,
    TrialStatus,
)
from bisector.runner.error_line import error_line
from bisector.runner.executor import TrialJob, TrialOutcome
from bisector.search.control_outcome import unavailable_by_shape
from bisector.search.prober import ProbeBase
from bisector.search.samples import trial_metric, trial_views
from bisector.store import Owner, Store

# Failed trials in a row after which a shape is not asked for again; a commit with no usable trial
# of any shape then counts as "does not run" (SKIP).
MAX_CRASHES = 2
FAILED = (TrialStatus.CRASH, TrialStatus.TIMEOUT, TrialStatus.UNAVAILABLE)
USABLE = (TrialStatus.OK, TrialStatus.WRONG)  # a wrong result is a measurement too
POLL_S = 1.0  # how often a trial another run is measuring is looked for in the store
NOT_MEASURED = "not measured (offline replay)"


@dataclass(frozen=True)
class At:
    """A position in a commit's samples, per shape: `base[shape] + offset`. The search measures a
    pair's unclear shapes alone, so a commit's shapes can hold different numbers of samples; a slice
    that begins after them begins at each shape's own count. Adding an int moves every shape."""

    base: Mapping[str, int]
    offset: int = 0

    def __add__(self, n: int) -> At:
        return At(self.base, self.offset + n)

    def of(self, shape: str) -> int:
        return self.base.get(shape, 0) + self.offset


Count = int | At  # samples wanted of every shape, or of each shape its own


def of(count: Count, shape: str) -> int:
    """The count for `shape`."""
    return count.of(shape) if isinstance(count, At) else count


class TrialExecutor(Protocol):
    def submit(self, job: TrialJob) -> Future[TrialOutcome]: ...

    def cancel(self, future: Future[TrialOutcome]) -> None: ...


class BuildSource(Protocol):
    def build(self, sha: str, patch: str | None = None) -> BuildResult: ...


@dataclass(frozen=True)
class ProbeEvent:
    """What the progress display shows: the commit being measured and why; and what the search
    has measured, for its outlook (bisector/estimate/outlook.py)."""

    sha: str
    action: str  # "build" | "trial" | "skip" | "measured" | "stage" (sha "", detail the stage's name)
    detail: str = ""
    patch_hash: str | None = None
    expect: int = 0  # a stage: the trial processes it is expected to take (0: unknown)
    measurement: Measurement | None = None  # "measured": what the probe hands the search
    basis: SearchBasis | None = None  # the search's stage: what its outlook re-runs the search on


class StoreProbe(ProbeBase):
    """A Prober over real builds and trial processes, backed by the store."""

    side_by_side = True
    shapes_alone = True

    def __init__(
        self,
        campaign: str,
        shapes: Sequence[Shape],
        store: Store,
        builds: BuildSource,
        executor: TrialExecutor,
        *,
        seed: int = 0,
        patch: str | None = None,
        patch_hash: str | None = None,
        recipe: str = "none",
        cold_jit: bool = True,
        metric: str | Mapping[str, str] = "ratio",
        offline: bool = False,
        max_crashes: int = MAX_CRASHES,
        on_event: Callable[[ProbeEvent], None] = lambda e: None,
        where: portable.Roots | None = None,
        warmer: Warmer | None = None,
        latency_steps: bool = False,
    ) -> None:
        """`where`: this machine's dirs and the names the store knows them by (bisector/portable.py)."""
        self.campaign, self.shapes, self.store, self.builds = campaign, tuple(shapes), store, builds
        self.where = dict(where or {})
        self.executor, self.seed, self.patch, self.patch_hash = executor, seed, patch, patch_hash
        self.recipe, self.on_event, self.cold_jit = recipe, on_event, cold_jit
        self.metric, self.offline, self.max_crashes = metric, offline, max_crashes
        self.latency_steps = latency_steps  # latency views where the trial timed latency (search/drift.py)
        self.warmer = warmer  # builds and compiles the commits the search may need next (`prefetch`)
        self.build_results: dict[str, BuildResult] = {}
        self.probes: list[tuple[str, Count]] = []
        self.owner = Owner.me()
        self.lineage = 0  # the worker lineage its trials ask for (`independent`)

    def restricted(self, shapes: Sequence[Shape]) -> StoreProbe:
        """The same probe over fewer shapes (a revert or a hunk is measured where its step is)."""
        out = StoreProbe(
            self.campaign,
            shapes,
            self.store,
            self.builds,
            self.executor,
            seed=self.seed,
            patch=self.patch,
            patch_hash=self.patch_hash,
            recipe=self.recipe,
            cold_jit=self.cold_jit,
            metric=self.metric,
            offline=self.offline,
            max_crashes=self.max_crashes,
            on_event=self.on_event,
            where=self.where,
            warmer=self.warmer,
            latency_steps=self.latency_steps,
        )
        out.build_results, out.lineage = self.build_results, self.lineage
        return out

    def build(self, sha: str) -> BuildResult:
        if sha not in self.build_results and self.offline:  # the build the run made, never a new one
            made = [b for b in self.store.builds(self.campaign, sha) if b.patch_hash == self.patch_hash]
            self.build_results[sha] = (
                self._here(made[-1])
                if made
                else BuildResult(sha, BuildStatus.FAILED, "", patch_hash=self.patch_hash, log_tail=NOT_MEASURED)
            )
        if sha not in self.build_results:
            self.on_event(ProbeEvent(sha, "build", patch_hash=self.patch_hash))
            result = self.builds.build(sha, self.patch)
            self.store.add_build(self.campaign, self._stored(result), self.recipe)
            self.build_results[sha] = result
        return self.build_results[sha]

    def _stored(self, b: BuildResult) -> BuildResult:
        """The build as the store keeps it: its paths written from the work and build dirs' names."""
        out: dict[str, Any] = {
            k: portable.scrub(v, self.where) if v else v
            for k, v in (
                ("source_dir", b.source_dir),
                ("prefix", b.prefix),
                ("log_path", b.log_path),
                ("log_tail", b.log_tail),
            )
        }
        return replace(b, **out)

    def _here(self, b: BuildResult) -> BuildResult:
        """A stored build with its paths on this machine again (an offline replay links its log)."""
        here: dict[str, Any] = {
            k: portable.restore(v, self.where) if v else v
            for k, v in (("source_dir", b.source_dir), ("prefix", b.prefix), ("log_path", b.log_path))
        }
        return replace(b, **here)

    def stored(self, sha: str) -> list[TrialRecord]:
        keys = {s.key for s in self.shapes}
        return [t for t in self.store.trials(self.campaign, sha=sha, patch_hash=self.patch_hash) if t.shape in keys]

    def __call__(self, sha: str, repeats: Count) -> Measurement:
        got = self._measure(sha, repeats)
        self.on_event(ProbeEvent(sha, "measured", patch_hash=self.patch_hash, measurement=got))
        return got

    def _measure(self, sha: str, repeats: Count) -> Measurement:
        self.probes.append((sha, repeats))
        if self.offline:
            return self.stored_only(sha, repeats)
        build = self.build(sha)
        if build.status is BuildStatus.FAILED:
            self.on_event(ProbeEvent(sha, "skip", build.log_tail.strip()[-200:], self.patch_hash))
            return Measurement(sha, ProbeStatus.SKIP, reason=build.log_tail or "build failed")
        while True:
            trials = self.stored(sha)
            need = self.missing(trials, repeats)
            if not need:
                break
            Batch([(self, sha, need)]).run()
        trials = self.stored(sha)
        if any(self.counts(trials).values()):
            return self.measurement(sha, trials, repeats)
        reason = (
            error_line(next((t.error or t.log_tail for t in reversed(trials) if t.status in FAILED), ""))
            or "trial failed"
        )
        self.on_event(ProbeEvent(sha, "skip", reason, self.patch_hash))
        return Measurement(sha, ProbeStatus.SKIP, reason=f"does not run: {reason}")

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        """`probe(sha, n)` for several commits, measured side by side (see `side_by_side`)."""
        got = side_by_side([(self, sha, n) for sha, n in wants.items()])
        return dict(zip(wants, got))

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        """`together` with each commit's own count per shape, and only those shapes: the trial
        processes asked for measure only them (a pair unclear on the decode GEMM alone doubles
        without timing attention again). The measurements hold the shapes asked for, each cut at
        its count."""
        items = [
            (self.restricted([s for s in self.shapes if s.key in per]), sha, At(dict(per)))
            for sha, per in wants.items()
            if any(s.key in per for s in self.shapes)
        ]
        return {sha: m for (_, sha, _), m in zip(items, side_by_side(items))}

    def counts(self, trials: Sequence[TrialRecord]) -> dict[str, int]:
        """Usable trials per shape key."""
        return {s.key: sum(t.shape == s.key and t.status in USABLE for t in trials) for s in self.shapes}

    def missing(self, trials: Sequence[TrialRecord], repeats: Count) -> int:
        """Trial processes still needed for `repeats` usable trials of every shape worth asking for:
        not those whose last `max_crashes` trials all failed (a commit that breaks attention but not
        the GEMM gives GEMM samples and stops there, instead of crashing for ever)."""
        done = self.counts(trials)
        need = 0
        for s in self.shapes:
            recent = [t.status for t in trials if t.shape == s.key][-self.max_crashes :]
            if len(recent) == self.max_crashes and all(r in FAILED for r in recent):
                continue
            need = max(need, of(repeats, s.key) - done[s.key])
        return need

    @contextmanager
    def independent(self) -> Iterator[None]:
        """Trials asked for inside run in a new worker lineage (`Executor.renew_lineage`): processes
        that share no history with the trials before, a new zygote's forks. A step is verified so:
        one CI run read a neutral build 21% slow in all 25 trials forked from one zygote, and
        normally through a new one (studies/results/cpu-slow-builds.txt)."""
        renew = getattr(self.executor, "renew_lineage", None)
        if renew is None or self.offline:
            yield
            return
        before, self.lineage = self.lineage, renew()
        try:
            yield
        finally:
            self.lineage = before

    def job(
        self, sha: str, slot: int, first: bool, after: Future[TrialOutcome] | None, lane: int | None = None
    ) -> TrialJob:
        """The trial in `slot`: its seed follows from the slot, so a resumed run draws the inputs it would have.
        A commit's first trial compiles cold (its JIT dir emptied), unless a prefetch compiled it cold
        already: then its JIT dir is kept and its records carry the prefetch's compile."""
        warmed = self.warmer.claim(sha, self.patch_hash) if first and self.cold_jit and self.warmer else None
        return TrialJob(
            self.build_results[sha],
            self.shapes,
            self.seed * 1_000_003 + slot,
            slot=slot,
            first=first and self.cold_jit and warmed is None,
            after=after,
            lane=lane,
            patch=self.patch,
            cold_compile=warmed.cold_compile() if warmed is not None else None,
            lineage=self.lineage,
        )

    def prefetch(self, shas: Sequence[str]) -> None:
        """Commits the search may measure next (most likely first): the warmer builds and compiles
        those with nothing stored yet while this round is measured, and drops what it had queued for
        others. Nothing without a warmer (the CPU, offline)."""
        if self.warmer is None or self.offline:
            return
        self.warmer.prefetch(self.wants(shas))

    def wants(self, shas: Sequence[str]) -> list[Want]:
        """The warmer's requests for these commits as this probe measures them (its patch, shapes
        and first trial's seed), those not known to fail and with nothing stored yet."""
        failed = {s for s, b in self.build_results.items() if b.status is BuildStatus.FAILED}
        return [
            Want(sha, self.shapes, self.seed * 1_000_003, self.patch, self.patch_hash)
            for sha in dict.fromkeys(shas)
            if sha not in failed and not self.stored(sha)
        ]

    def stored_only(self, sha: str, repeats: Count) -> Measurement:
        """Offline: what the store holds, never a build or a trial (a report re-made without a GPU)."""
        trials = self.stored(sha)
        if any(t.status in USABLE for t in trials):
            return self.measurement(sha, trials, repeats)
        said = error_line(next((t.error or t.log_tail for t in reversed(trials)), ""))
        return Measurement(sha, ProbeStatus.SKIP, reason=f"does not run: {said}" if said else NOT_MEASURED)

    def value(self, trial: TrialRecord) -> float | None:
        """The per-trial sample the search compares (config.Thresholds.metric on its timing)."""
        metric = (
            self.metric.get(trial.shape.split("/", 1)[0], "ratio") if isinstance(self.metric, Mapping) else self.metric
        )
        return trial_metric(trial, metric)

    def measurement(self, sha: str, trials: Sequence[TrialRecord], repeats: Count | None = None) -> Measurement:
        """The first `repeats` samples per shape, in the order they were measured: a re-run asks the
        same questions, gets the same answers, and so measures nothing twice."""
        kept = {
            s.key: [t for t in trials if t.shape == s.key and t.status is TrialStatus.OK and self.value(t) is not None][
                : None if repeats is None else of(repeats, s.key)
            ]
            for s in self.shapes
        }
        samples = {k: tuple(v for t in ts if (v := self.value(t)) is not None) for k, ts in kept.items()}
        wrong = frozenset(t.shape for t in trials if t.status is TrialStatus.WRONG)
        broken: dict[str, set[str]] = {}  # last error -> shapes that never ran
        for key, error in {
            t.shape: error_line(t.error or t.log_tail)
            for t in trials
            if t.status in FAILED and not samples.get(t.shape) and t.shape not in wrong
        }.items():
            broken.setdefault(error, set()).add(key)
        reason = "; ".join(
            f"{', '.join(sorted(keys))} {'does' if len(keys) == 1 else 'do'} not run: {error}"
            for error, keys in sorted(broken.items(), key=lambda kv: sorted(kv[1]))
        )
        no_control = [
            f"{key}: no ratio, the control was unavailable: {why.splitlines()[0][:200]}"
            for key, (_, _, why) in sorted(unavailable_by_shape(trials).items())
            if key in samples and not samples[key] and key not in wrong
        ]
        reason = "; ".join(r for r in (reason, *no_control) if r)
        samples = {k: v for k, v in samples.items() if k not in wrong and v}
        views, times = trial_views({k: kept[k] for k in samples}, self.latency_steps)
        # a latency step is a step: its shape of its own, measured by the same trials (model.LATENCY_KEY)
        samples.update({k + LATENCY_KEY: v for k, v in views.get("latency", {}).items()})
        samples.update({k + WARM_KEY: v for k, v in views.get("warm", {}).items()})  # cache = "warm"
        return Measurement(sha, ProbeStatus.OK, samples, wrong, reason=reason, views=views, times=times)


Item = tuple[StoreProbe, str, Count]  # (probe, sha, samples wanted of each shape)


class Batch:
    """Trials of several (probe, commit) pairs, submitted at once in rounds and stored as each ends.

    Round r holds one trial of every pair that still needs an r-th; the order alternates from
    round to round (A B, B A, ...), so on one device the pairs are measured ABBA and on two at once.
    A commit with nothing stored gets its cold first trial first; its others may prepare meanwhile
    but wait for it before they take a device. A trial whose every shape failed cancels its pair's
    trials that have not started, and the caller decides again (a crash costs one trial, not n)."""

    def __init__(self, items: Sequence[tuple[StoreProbe, str, int]]) -> None:
        self.items = [it for it in items if it[2] > 0]

    def run(self) -> None:
        claimed: list[tuple[StoreProbe, str, list[int], list[int]]] = []
        for probe, sha, n in self.items:
            probe.build(sha)
            c = probe.store.claim(probe.campaign, sha, probe.patch_hash, n, probe.owner)
            claimed.append((probe, sha, list(c.mine), list(c.theirs)))
        futures: dict[Future[TrialOutcome], tuple[int, int]] = {}
        firsts: dict[int, Future[TrialOutcome]] = {}
        rounds = max((len(m) for _, _, m, _ in claimed), default=0)
        try:
            for r in range(rounds):
                order = range(len(claimed)) if r % 2 == 0 else range(len(claimed) - 1, -1, -1)
                for i in order:
                    if r < len(claimed[i][2]):  # this item's trials still to run
                        self._submit(claimed, i, r, futures, firsts)
            # The first item last: the later stages put there what every round measures (the tip, a
            # hunk search's parent), and past 2 x `parallel` spares the oldest go first; the tip of the
            # H200 demo's fixes stage, one of nine, waited ~2 s a round for a fresh setup.
            for i in reversed(range(len(claimed))):
                if i not in firsts:
                    self._spare(claimed[i], i)
            self._collect(claimed, futures, firsts)
        finally:
            for probe, sha, mine, _ in claimed:
                left = [k for k in mine if not any(t.slot == k for t in probe.stored(sha))]
                if left:
                    probe.store.unclaim(probe.campaign, sha, probe.patch_hash, left, probe.owner)
        self._wait_for_others(claimed)

    @staticmethod
    def _spare(item: tuple[StoreProbe, str, list[int], list[int]], i: int) -> None:
        """The commit's next trial, held ready while this batch is measured: the next round often
        asks for it (the slot the store hands out next, unless another run takes it first). Made
        once the commit's cold first trial has ended, so that its compile stays cold."""
        probe, sha, mine, _ = item
        if mine and probe.warmer is not None:
            probe.warmer.spare(probe.job(sha, max(mine) + 1, False, None, i + len(mine)))

    def _submit(
        self,
        claimed: Sequence[tuple[StoreProbe, str, list[int], list[int]]],
        i: int,
        r: int,
        futures: dict[Future[TrialOutcome], tuple[int, int]],
        firsts: dict[int, Future[TrialOutcome]],
    ) -> None:
        """Round `r`'s trial of item `i`: taken held from the warmer or submitted, and said."""
        probe, sha, mine, _ = claimed[i]
        first = r == 0 and probe.cold_jit and not probe.stored(sha)
        # the tip with each revert is the same commit: name the patch, and each once
        others = list(
            dict.fromkeys(
                s[:7] + (f"+patch {q.patch_hash[:8]}" if q.patch_hash else "")
                for j, (q, s, m, _) in enumerate(claimed)
                if j != i and r < len(m)
            )
        )
        probe.on_event(
            ProbeEvent(
                sha,
                "trial",
                f"trial {mine[r] + 1}/{mine[-1] + 1}" + (f" (side by side with {', '.join(others)})" if others else ""),
                probe.patch_hash,
            )
        )
        # Lanes in a Latin square: on n devices each commit visits each device equally
        # often, so a faster core cannot pass for a faster commit.
        lane = i + r
        job = probe.job(sha, mine[r], first, None if first else firsts.get(i), lane)
        # the trial may be set up already, held: the commit's first as a standby, a later
        # one as a spare, the second of a new commit as its standby's companion, which
        # waits for that very first trial (bisector/measure/warmer.py)
        held = probe.warmer.take(job) if probe.warmer is not None else None
        future = held or probe.executor.submit(job)
        futures[future] = (i, mine[r])
        if first:
            firsts[i] = future
        elif held is not None and i in firsts and r == 1:
            # a new commit's companion, made once its standby had compiled: its next
            # trial can set up now, not when the first ends, a device section before
            # the round that doubles the pair asks for it (most of the H200 demo's)
            self._spare(claimed[i], i)

    def _collect(
        self,
        claimed: Sequence[tuple[StoreProbe, str, list[int], list[int]]],
        futures: dict[Future[TrialOutcome], tuple[int, int]],
        firsts: Mapping[int, Future[TrialOutcome]],
    ) -> None:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                i, _ = futures[future]
                probe = claimed[i][0]
                if firsts.get(i) is future:
                    self._spare(claimed[i], i)
                if future.cancelled():
                    continue
                outcome: TrialOutcome = future.result()
                if outcome.records:
                    probe.store.add_trials(probe.campaign, list(outcome.records), shapes=probe.shapes)
                if outcome.records and all(r.status in FAILED for r in outcome.records):
                    for other in pending:
                        if futures[other][0] == i:
                            probe.executor.cancel(other)

    @staticmethod
    def _wait_for_others(claimed: Sequence[tuple[StoreProbe, str, list[int], list[int]]]) -> None:
        """Trials another run was measuring: wait until they are stored or their claim is gone."""
        for probe, sha, _, theirs in claimed:
            while theirs:
                have = {t.slot for t in probe.stored(sha)}
                theirs = [k for k in theirs if k not in have]
                if not theirs:
                    break
                c = probe.store.claim(probe.campaign, sha, probe.patch_hash, 0, probe.owner)
                theirs = [k for k in theirs if k in c.theirs]
                if theirs:
                    time.sleep(POLL_S)


def side_by_side(items: Sequence[Item]) -> list[Measurement]:
    """`probe(sha, n)` for each item, the missing trials measured side by side: one trial of each
    per round, at once on several devices, ABBA on one. A slow drift of the machine (clock, a
    neighbour's load, heat) then falls on every commit alike instead of on whichever was measured
    last; on two CPU cores, two groups of four trials taken five seconds apart differed by 9% with
    no change between them. Steps are verified, reverts checked and hunks measured this way. Items
    may come from different probes (the tip, and the tip with a revert)."""
    runnable = []
    for probe, sha, n in items:
        if probe.offline or probe.build(sha).status is BuildStatus.FAILED:
            continue
        runnable.append((probe, sha, probe.missing(probe.stored(sha), n)))
    Batch(runnable).run()
    return [probe(sha, n) for probe, sha, n in items]  # tops up what crashed; SKIP where nothing runs


class Taken:
    """Which of each (patch, commit)'s samples this run has used so far: the search's come first,
    then every side-by-side comparison takes the next n. Fresh trials are then told apart from
    older ones, and a resumed run, asking the same questions in the same order, gets the same
    slices from the store. Per shape (`At`): the search leaves a commit's shapes with different
    counts where it doubled a pair's trials on some shapes only."""

    def __init__(self, measurements: Mapping[str, Measurement]) -> None:
        self.used: dict[tuple[str | None, str], At] = {
            (None, sha): At({k: len(v) for k, v in m.samples.items()}) for sha, m in measurements.items()
        }

    def take(self, probe: StoreProbe, sha: str, n: int) -> At:
        """The start of the next n samples of `sha` under `probe`'s patch; they are now spoken for."""
        key = (probe.patch_hash, sha)
        start = self.used.get(key, At({}))
        self.used[key] = start + n
        return start

    def extend(self, probe: StoreProbe, sha: str, start: At, n: int, more: int) -> None:
        """`more` samples right after start..start+n, which must be the last ones taken: a follow-up
        look at a side-by-side question whose answer is still open."""
        got = self.take(probe, sha, more)
        assert got == start + n, (got, start, n)


def fresh(m: Measurement, start: Count, n: int) -> dict[str, tuple[float, ...]]:
    """Per shape, samples start..start+n of a measurement (the side-by-side ones)."""
    return {k: v[of(start, k) : of(start, k) + n] for k, v in m.samples.items() if len(v) > of(start, k)}


def fresh_tflops(probe: StoreProbe, sha: str, start: Count, n: int) -> dict[str, float]:
    """Per shape, the median subject TFLOP/s of the same OK trials `fresh` takes."""
    out: dict[str, float] = {}
    for shape in probe.shapes:
        at = of(start, shape.key)
        values = [
            t.subject_tflops
            for t in probe.stored(sha)
            if t.shape == shape.key and t.status is TrialStatus.OK and probe.value(t) is not None
        ][at : at + n]
        numbers = [v for v in values if v is not None]
        if values and len(numbers) == len(values):
            out[shape.key] = statistics.median(numbers)
    return out

"""probe(sha, repeats): build if needed, run only the trials the store does not already hold.

This is what makes a run resumable: every trial is committed to the store as soon as it ends, and
a probe counts what is stored before it measures anything.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Protocol, Sequence

from bisector.model import (BuildResult, BuildStatus, Measurement, ProbeStatus, Shape, TrialRecord,
                            TrialStatus)
from bisector.stats import full_clock_time
from bisector.store import Store

# Failed trials in a row after which a shape is not asked for again; a commit with no usable trial
# of any shape then counts as "does not run" (SKIP).
MAX_CRASHES = 2
FAILED = (TrialStatus.CRASH, TrialStatus.TIMEOUT, TrialStatus.UNAVAILABLE)


class TrialRunner(Protocol):
    def __call__(self, build: BuildResult, suite: str | None, shapes: Sequence[Shape], *, first: bool,
                 seed: int) -> Sequence[TrialRecord]: ...


class BuildSource(Protocol):
    def build(self, sha: str, patch: str | None = None) -> BuildResult: ...


@dataclass(frozen=True)
class ProbeEvent:
    """What the progress display shows: the commit being measured and why."""

    sha: str
    action: str  # "build" | "trial" | "skip"
    detail: str = ""
    patch_hash: str | None = None


class StoreProbe:
    """A Probe over real builds and trial processes, backed by the store."""

    def __init__(self, campaign: str, shapes: Sequence[Shape], store: Store, builds: BuildSource,
                 run_trial: TrialRunner, *, seed: int = 0, patch: str | None = None,
                 patch_hash: str | None = None, recipe: str = "none", parallel: int = 1, cold_jit: bool = True,
                 metric: str = "ratio", offline: bool = False,
                 on_event: Callable[[ProbeEvent], None] = lambda e: None) -> None:
        self.campaign, self.shapes, self.store, self.builds = campaign, tuple(shapes), store, builds
        self.run_trial, self.seed, self.patch, self.patch_hash = run_trial, seed, patch, patch_hash
        self.recipe, self.on_event, self.parallel, self.cold_jit = recipe, on_event, parallel, cold_jit
        self.metric, self.offline = metric, offline
        self.build_results: dict[str, BuildResult] = {}
        self.probes: list[tuple[str, int]] = []

    def build(self, sha: str) -> BuildResult:
        if sha not in self.build_results:
            self.on_event(ProbeEvent(sha, "build", patch_hash=self.patch_hash))
            result = self.builds.build(sha, self.patch)
            self.store.add_build(self.campaign, result, self.recipe)
            self.build_results[sha] = result
        return self.build_results[sha]

    def _stored(self, sha: str) -> list[TrialRecord]:
        keys = {s.key for s in self.shapes}
        return [t for t in self.store.trials(self.campaign, sha=sha, patch_hash=self.patch_hash) if t.shape in keys]

    def __call__(self, sha: str, repeats: int) -> Measurement:
        self.probes.append((sha, repeats))
        if self.offline:
            return self.stored_only(sha, repeats)
        build = self.build(sha)
        if build.status is BuildStatus.FAILED:
            self.on_event(ProbeEvent(sha, "skip", build.log_tail.strip()[-200:], self.patch_hash))
            return Measurement(sha, ProbeStatus.SKIP, reason=build.log_tail or "build failed")
        while True:
            trials = self._stored(sha)
            done, short = self._counts(trials), self._short(trials, repeats)
            if not short:
                if any(done.values()):
                    return self.measurement(sha, trials, repeats)
                reason = next((t.error or t.log_tail for t in reversed(trials) if t.status in FAILED), "trial failed")
                self.on_event(ProbeEvent(sha, "skip", reason[-200:], self.patch_hash))
                return Measurement(sha, ProbeStatus.SKIP, reason=f"does not run: {reason}")
            # One process measures every suite: a trial pays for one import of torch, not one per suite.
            # With a JIT cache, the first trial of a commit runs alone (it fills the commit's cold
            # cache and records the compile time); the others run on every device at once.
            cold_first = not trials and self.cold_jit
            fewest = min(done[k] for k in short)
            batch = 1 if cold_first else max(1, min(self.parallel, repeats - fewest))
            self.on_event(ProbeEvent(sha, "trial", f"trial {fewest + 1}/{repeats}"
                                     + (f" (+{batch - 1} in parallel)" if batch > 1 else ""), self.patch_hash))
            jobs = [(build, len(trials), not trials)] * batch
            self._run_and_store(jobs)

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        """`probe(sha, n)` for several commits, measured side by side: each round runs one trial of
        every commit still short, all at once on different devices (with one device, one after
        another in alternating order: ABBA). A slow drift of the machine (clock, a neighbour's load,
        heat) then falls on every commit alike instead of on whichever was measured last; on two
        CPU cores, two groups of four trials taken five seconds apart differed by 9% with no change
        between them. The search verifies its steps with trials measured this way."""
        # The ordinary path at the end says SKIP, or runs the cold first trial alone.
        alone = {sha for sha in wants
                 if self.offline or self.build(sha).status is BuildStatus.FAILED or not self._stored(sha)}
        turn = 0
        while True:
            short = [sha for sha, n in wants.items() if sha not in alone and self._short(self._stored(sha), n)]
            if not short:
                break
            order = short if turn % 2 == 0 else short[::-1]
            turn += 1
            self.on_event(ProbeEvent(order[0], "trial", "side by side with " + ", ".join(s[:7] for s in order[1:]),
                                     self.patch_hash))
            jobs = [(self.build_results[sha], len(self._stored(sha)), False) for sha in order]
            self._run_and_store(jobs)
        return {sha: self(sha, n) for sha, n in wants.items()}

    def _counts(self, trials: Sequence[TrialRecord]) -> dict[str, int]:
        """Usable trials (OK, or WRONG: a wrong result is a measurement too) per shape key."""
        return {s.key: sum(t.shape == s.key and t.status in (TrialStatus.OK, TrialStatus.WRONG) for t in trials)
                for s in self.shapes}

    def _short(self, trials: Sequence[TrialRecord], repeats: int) -> list[str]:
        """Shapes with fewer than `repeats` usable trials that are still worth asking for: not those
        whose last MAX_CRASHES trials all failed (a commit that breaks attention but not the GEMM
        gives GEMM samples and stops there, instead of crashing for ever)."""
        done = self._counts(trials)
        out = []
        for s in self.shapes:
            recent = [t.status for t in trials if t.shape == s.key][-MAX_CRASHES:]
            if done[s.key] < repeats and not (len(recent) == MAX_CRASHES and all(r in FAILED for r in recent)):
                out.append(s.key)
        return out

    def _run_and_store(self, jobs: Sequence[tuple[BuildResult, int, bool]]) -> list[list[TrialRecord]]:
        """Run one trial process per (build, trials already stored, first) at once and store them all.
        The seed follows from the stored count, so a resumed run draws the inputs it would have."""
        def one(job: tuple[BuildResult, int, bool], k: int) -> list[TrialRecord]:
            build, stored, first = job
            seed = self.seed * 1_000_003 + stored + k
            return [replace(r, patch_hash=self.patch_hash)
                    for r in self.run_trial(build, None, self.shapes, first=first, seed=seed)]
        same = [sum(j[0].sha == job[0].sha for j in jobs[:i]) for i, job in enumerate(jobs)]
        with ThreadPoolExecutor(max(1, min(len(jobs), self.parallel))) as pool:
            runs = list(pool.map(one, jobs, same))
        self.store.add_trials(self.campaign, [r for run in runs for r in run], shapes=self.shapes)
        return runs

    def stored_only(self, sha: str, repeats: int) -> Measurement:
        """Offline: what the store holds, never a build or a trial (a report re-made without a GPU)."""
        trials = self._stored(sha)
        if any(t.status in (TrialStatus.OK, TrialStatus.WRONG) for t in trials):
            return self.measurement(sha, trials, repeats)
        reason = next((t.error or t.log_tail for t in reversed(trials)), "") or "not measured (offline replay)"
        return Measurement(sha, ProbeStatus.SKIP, reason=reason)

    def value(self, trial: TrialRecord) -> float | None:
        """The per-trial sample the search compares (see config.Thresholds.metric)."""
        if self.metric == "speed":
            return 1.0 / full_clock_time(trial.subject_ms) if trial.subject_ms else None
        return trial.ratio

    def measurement(self, sha: str, trials: Sequence[TrialRecord], repeats: int | None = None) -> Measurement:
        """The first `repeats` samples per shape, in the order they were measured: a re-run asks the
        same questions, gets the same answers, and so measures nothing twice."""
        samples = {s.key: tuple(v for t in trials if t.shape == s.key and t.status is TrialStatus.OK
                                and (v := self.value(t)) is not None)[:repeats] for s in self.shapes}
        wrong = frozenset(t.shape for t in trials if t.status is TrialStatus.WRONG)
        broken: dict[str, set[str]] = {}  # last error -> shapes that never ran
        for key, error in {t.shape: (t.error or t.log_tail).strip()[-200:] for t in trials
                           if t.status in FAILED and not samples.get(t.shape) and t.shape not in wrong}.items():
            broken.setdefault(error, set()).add(key)
        reason = "; ".join(f"{', '.join(sorted(keys))} {'does' if len(keys) == 1 else 'do'} not run: {error}"
                           for error, keys in sorted(broken.items(), key=lambda kv: sorted(kv[1])))
        return Measurement(sha, ProbeStatus.OK, {k: v for k, v in samples.items() if k not in wrong and v}, wrong,
                           reason=reason)

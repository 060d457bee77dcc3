"""StoreProbe over a real SQLite store: what it runs, in which order, and what it never runs twice."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import replace
from pathlib import Path

from bisector.measure.probe import At, StoreProbe, Taken, fresh
from bisector.model import BuildResult, BuildStatus, ProbeStatus, Shape, TrialRecord, TrialStatus
from bisector.runner.executor import Timeline, TrialJob, TrialOutcome
from bisector.store import Store

SHAPES = (Shape("gemm", "m64", (("M", 64), ("N", 64), ("K", 64))),)
TWO = (*SHAPES, Shape("fa", "s64", (("B", 1), ("H", 1), ("S", 64), ("D", 64))))


class Builds:
    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.failing = failing

    def build(self, sha: str, patch: str | None = None) -> BuildResult:
        status = BuildStatus.FAILED if sha in self.failing else BuildStatus.OK
        return BuildResult(sha, status, "/src", log_tail="no such module" if sha in self.failing else "")


class Runner:
    """Records which commit each trial ran for, and which trials overlapped in time."""

    def __init__(
        self,
        crash: tuple[str, ...] = (),
        meet: threading.Barrier | None = None,
        broken: dict[str, set[str]] | None = None,
    ) -> None:
        self.crash, self.started, self.lock, self.running, self.overlaps = crash, [], threading.Lock(), set(), []
        self.shapes_run: list[tuple[str, tuple[str, ...]]] = []  # (sha, the shapes a trial process measured)
        self.broken = broken or {}  # sha -> shape keys that crash while the others run
        self.meet = meet  # trials that must run at once wait here for each other (a busy CI core can be slow)

    def __call__(self, build: BuildResult, suite, shapes, *, first: bool, seed: int) -> list[TrialRecord]:
        with self.lock:
            self.started.append((build.sha, first, seed))
            self.shapes_run.append((build.sha, tuple(sh.key for sh in shapes)))
            if self.running:
                self.overlaps.append(frozenset(self.running | {build.sha}))
            self.running.add(build.sha)
        if self.meet is not None:
            self.meet.wait()  # raises BrokenBarrierError after its timeout when the trials run one by one
        else:
            time.sleep(0.05)
        with self.lock:
            self.running.discard(build.sha)
        if build.sha in self.crash:
            return [TrialRecord(build.sha, s.key, TrialStatus.CRASH, error="illegal memory access") for s in shapes]
        return [
            TrialRecord(build.sha, s.key, TrialStatus.CRASH, error="TypeError: _run() missing 'fastmath'")
            if s.key in self.broken.get(build.sha, ())
            else TrialRecord(build.sha, s.key, TrialStatus.OK, (1.0,), (1.0,), 1.0, 1.0, 1.0 + seed * 1e-6)
            for s in shapes
        ]


class Executor:
    """The executor's contract without processes: `parallel` trials at once in submission order, a
    trial waits for the one it comes `after`, and a cancelled trial that has not started never runs."""

    def __init__(self, runner: Runner, parallel: int) -> None:
        self.runner, self.pool = runner, ThreadPoolExecutor(parallel)
        self.cancelled: set[int] = set()

    def submit(self, job: TrialJob) -> Future:
        out: Future = Future()

        def work() -> None:
            if job.after is not None:
                futures_wait([job.after])
            if id(out) in self.cancelled:
                out.cancel()
                out.set_running_or_notify_cancel()
                return
            out.set_running_or_notify_cancel()
            recs = self.runner(job.build, None, job.shapes, first=job.first, seed=job.seed)
            out.set_result(
                TrialOutcome(tuple(replace(r, slot=job.slot) for r in recs), Timeline(job.build.sha, None, 0, 0.0))
            )

        self.pool.submit(work)
        return out

    def cancel(self, future: Future) -> None:
        self.cancelled.add(id(future))


def probe(tmp_path: Path, runner: Runner, parallel: int, builds: Builds | None = None, shapes=SHAPES) -> StoreProbe:
    return StoreProbe("c", shapes, Store(tmp_path / "r.sqlite"), builds or Builds(), Executor(runner, parallel))


def test_together_runs_one_trial_of_each_commit_at_once(tmp_path: Path) -> None:
    runner = Runner()
    p = probe(tmp_path, runner, parallel=2)
    p("a", 2), p("b", 2)
    runner.meet = threading.Barrier(2, timeout=20)
    runner.started.clear(), runner.overlaps.clear()
    got = p.together({"a": 5, "b": 5})
    assert [m.count() for m in got.values()] == [5, 5]
    shas = [s for s, _, _ in runner.started]
    assert sorted(shas) == ["a"] * 3 + ["b"] * 3
    # Submitted as rounds (a b, b a, a b) and started in that order, two at a time: the barrier
    # proves each pair ran at once.
    assert all(set(shas[i : i + 2]) == {"a", "b"} for i in range(0, 6, 2)) and len(runner.overlaps) >= 3
    assert not any(first for _, first, _ in runner.started)
    # Nothing is measured twice: the store already holds every trial asked for.
    runner.started.clear()
    assert [m.count() for m in p.together({"a": 5, "b": 4}).values()] == [5, 4]
    assert runner.started == []


def test_together_alternates_the_order_on_one_device(tmp_path: Path) -> None:
    runner = Runner()
    p = probe(tmp_path, runner, parallel=1)
    p("a", 1), p("b", 1)
    runner.started.clear()
    p.together({"a": 5, "b": 5})
    assert [s for s, _, _ in runner.started] == list("abbaabba")
    assert runner.overlaps == []


def test_together_leaves_skips_and_crashes_to_the_ordinary_path(tmp_path: Path) -> None:
    runner = Runner(crash=("c",))
    p = probe(tmp_path, runner, parallel=2, builds=Builds(failing=("x",)))
    p("a", 1)
    got = p.together({"a": 3, "x": 3, "c": 3})
    assert got["a"].count() == 3
    assert got["x"].status is ProbeStatus.SKIP and "no such module" in got["x"].reason
    assert got["c"].status is ProbeStatus.SKIP and "illegal memory access" in got["c"].reason
    # The cold first trial alone; its crash cancels the trials waiting for it; one more crash (or
    # two side by side on the two devices) makes a SKIP. A crash's cancel races with the executor
    # lending the freed device to the next trial of the same commit: on a busy machine (a fresh
    # clone's CI, once in seven runs) one more started first, so the second round's three all ran.
    assert 2 <= sum(s == "c" for s, _, _ in runner.started) <= 4


class RecordingPrefetcher:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def prefetch(self, shas) -> None:
        self.asked += list(shas)


def test_the_gpu_path_prefetching_probe_keeps_side_by_side_trials(tmp_path: Path) -> None:
    from bisector.pipeline import Prefetching

    runner, prefetcher = Runner(), RecordingPrefetcher()
    order = [f"c{i}" for i in range(9)]
    p = Prefetching(probe(tmp_path, runner, parallel=2), prefetcher, order)
    p("c0", 1), p("c8", 1)
    assert prefetcher.asked == ["c4"]  # the middle of what was measured, built ahead
    runner.overlaps.clear()
    runner.meet = threading.Barrier(2, timeout=20)
    got = p.together({"c0": 3, "c8": 3})
    assert [m.count() for m in got.values()] == [3, 3] and len(runner.overlaps) >= 2  # the barrier: two at once


def test_a_commit_that_breaks_one_suite_gives_the_other_and_stops(tmp_path: Path) -> None:
    # Seen in a demo: half of a culprit's hunks left attention calling with a missing argument. The
    # GEMM ran, attention crashed in every trial, and the probe asked for more trials for ever.
    runner = Runner(broken={"a": {"fa/s64"}, "b": {"fa/s64"}})
    p = probe(tmp_path, runner, parallel=1, shapes=TWO)
    m = p("a", 4)
    assert m.status is ProbeStatus.OK and len(m.samples["gemm/m64"]) == 4 and "fa/s64" not in m.samples
    assert m.reason == "fa/s64 does not run: TypeError: _run() missing 'fastmath'"
    assert len(runner.started) == 4  # attention stopped being asked for after two crashes in a row
    runner.started.clear()
    assert p("a", 4).samples["gemm/m64"] and runner.started == []  # and is not asked for again
    got = p.together({"a": 6, "b": 3})
    assert [len(m.samples["gemm/m64"]) for m in got.values()] == [6, 3]


def test_shapes_that_fail_alike_are_named_once(tmp_path: Path) -> None:
    three = (*TWO, Shape("fa", "s128", (("B", 1), ("H", 1), ("S", 128), ("D", 64))))
    runner = Runner(broken={"a": {"fa/s64", "fa/s128"}})
    m = probe(tmp_path, runner, parallel=1, shapes=three)("a", 3)
    assert m.reason == "fa/s128, fa/s64 do not run: TypeError: _run() missing 'fastmath'"
    assert set(m.samples) == {"gemm/m64"} and m.count() == 3


def test_shaped_measures_only_the_shapes_asked_each_to_its_own_count(tmp_path: Path) -> None:
    """A pair unclear on one shape doubles that shape alone: its trial processes measure only it,
    the measurement holds only it, and a later full probe does not cut its extra samples back."""
    runner = Runner()
    p = probe(tmp_path, runner, parallel=2, shapes=TWO)
    p.together({"a": 2, "b": 2})
    runner.shapes_run.clear()
    got = p.shaped({"a": {"fa/s64": 4}, "b": {"fa/s64": 4, "gemm/m64": 3}})
    assert sorted(runner.shapes_run) == [("a", ("fa/s64",))] * 2 + [("b", ("gemm/m64", "fa/s64"))] * 2
    assert {k: len(v) for k, v in got["a"].samples.items()} == {"fa/s64": 4}
    assert {k: len(v) for k, v in got["b"].samples.items()} == {"fa/s64": 4, "gemm/m64": 3}  # each cut at its count
    runner.shapes_run.clear()
    full = p("a", 2)  # what the search had: nothing new is measured
    assert runner.shapes_run == [] and full.count() == 2
    # Later stages take fresh samples after each shape's own count.
    taken = Taken({"a": p.measurement("a", p.stored("a"), At({"fa/s64": 4, "gemm/m64": 2}))})
    start = taken.take(p, "a", 2)
    assert start == At({"gemm/m64": 2, "fa/s64": 4}) and (start.of("fa/s64"), start.of("gemm/m64")) == (4, 2)
    m = p("a", start + 2)
    assert sorted(runner.shapes_run) == [("a", ("gemm/m64", "fa/s64"))] * 2  # fa 4 -> 6, gemm 2 -> 4
    assert {k: len(v) for k, v in fresh(m, start, 2).items()} == {"gemm/m64": 2, "fa/s64": 2}


def test_the_gpu_path_prefetching_probe_offers_the_search_every_capability_of_the_store_probe(tmp_path: Path) -> None:
    """The search asks its probe through search/prober.py's Prober, every method named: a wrapper
    that lacked one silently turned it off on the GPU path (the H200 demo doubled every shape for a
    pair unclear on one, through a Prefetching without `shaped`, while the CPU path did not). Both
    probes are whole Probers, the wrapper says what the store probe can do, and a probe with part
    of the Protocol is refused rather than run on a narrower path."""
    import pytest

    from bisector.pipeline import Prefetching
    from bisector.search.prober import Prober, as_prober

    store_probe = probe(tmp_path, Runner(), parallel=1)
    p = Prefetching(store_probe, RecordingPrefetcher(), ["c0"])
    assert isinstance(store_probe, Prober) and isinstance(p, Prober)
    assert as_prober(p) is p
    assert (p.side_by_side, p.shapes_alone) == (store_probe.side_by_side, store_probe.shapes_alone) == (True, True)

    class Partial:  # a wrapper that passes `together` on and drops the rest
        def __call__(self, sha: str, repeats: int):
            return store_probe(sha, repeats)

        def together(self, wants):
            return store_probe.together(wants)

    with pytest.raises(TypeError, match="together"):
        as_prober(Partial())

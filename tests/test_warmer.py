"""The warmer on real git commits, a real builder, real SQLite and real trial processes (CPU): a
prefetch compiles a commit cold without ever taking the device, stores nothing, and leaves a warm
JIT dir that the commit's first trial keeps; cancelled prefetches never run; and the search names
the commits its next round may need before it measures each round."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import git
import pytest

from bisector.build import Builder
from bisector.config import parse
from bisector.measure.probe import StoreProbe
from bisector.measure.warmer import Warmer, precompile_executor
from bisector.model import Measurement, TrialStatus
from bisector.runner import make_executor
from bisector.runner.launch import default_parallel
from bisector.runner.lock import lock_path
from bisector.search import SearchSettings, localize
from bisector.search.prober import ProbeBase
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel
from bisector.store import Store, campaign_key
from tests.devices import CONTROL, needs_cuda
from tests.gitfixtures import commit_file
from tests.gitfixtures import git as run_git

# A kernel whose first call "compiles" into the commit's Triton cache dir: slow when the dir is
# empty, writes its artifact there with the compiling process's pid, instant once it is there.
KERNEL = textwrap.dedent("""
    import os, time
    import torch

    VERSION = {k}

    def mm(a, b):
        art = os.path.join(os.environ["TRITON_CACHE_DIR"], "mm.bin")
        if not os.path.exists(art):
            time.sleep(0.5)  # a cold compile
            with open(art, "w") as fh:
                fh.write(str(os.getpid()))
        return a @ b
""")

HOLD = (
    "import sys, time, filelock; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); time.sleep(600)"
)


# The same on a GPU with a real Triton kernel: its compile goes to the commit's Triton cache dir.
TRITON_KERNEL = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    VERSION = {k}

    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    def mm(a, b):
        out = a @ b
        y = torch.empty_like(out)
        _copy[(triton.cdiv(out.numel(), 1024),)](out, y, out.numel(), BLOCK=1024)
        return y
""")


def make_upstream(tmp_path: Path, kernel: str, commits: int = 4) -> tuple[Path, list[str]]:
    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "kern.py", kernel.format(k=k), f"change {k} (#{900 + k})", 1 + k) for k in range(commits)]
    return repo, shas


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    return make_upstream(tmp_path, KERNEL)


def config(repo: Path, tmp_path: Path, kind: str = "cpu", shapes: int = 1, **protocol):
    data = {
        "name": "w",
        "upstream": {"repo": str(repo)},
        "device": {"kind": kind},
        "control": {"backend": CONTROL[kind]},
        "build": {"recipe": "none"},
        "subject": {"gemm": {"entry": "kern:mm", "adapter": "torch"}},
        "suites": {
            "gemm": {"shapes": [{"name": name, "M": 32, "N": 32, "K": 32, "dtype": "fp32"} for name in "abc"[:shapes]]}
        },
        "protocol": {
            # Five: the trial's value is the median over its repetitions, and of two that median is
            # their mean, so one repetition charged a preemption's kernel work (a control call read
            # 34x its neighbour's CPU time on a busy 2-core machine) spoiled the whole trial; four
            # such trials a side left a 4x step unsure at the cap (CI, 1 run in 3).
            "reps": 5,
            "warmup": 1,
            "flush_mb": 1,
            "timeout_s": 120.0,
            "trials": 1,
            "jit_cache_env": ["TRITON_CACHE_DIR"],
            "workers": "spawn" if kind == "cpu" else "fork",
            **protocol,
        },
    }
    return parse(data, tmp_path / "w.toml")


class Gated:
    """The real builder, whose builds of `hold` wait for `go`: keeps the warmer's one slot busy."""

    def __init__(self, builder: Builder, hold: str) -> None:
        self.builder, self.hold, self.go, self.entered = builder, hold, threading.Event(), threading.Event()

    def build(self, sha: str, patch: str | None = None):
        if sha == self.hold:
            self.entered.set()
            assert self.go.wait(60)
        return self.builder.build(sha, patch)


def setup(tmp_path: Path, repo: Path, parallel: int = 2, gate: str | None = None, kind: str = "cpu"):
    cfg = config(repo, tmp_path, kind)
    work = tmp_path / "work"
    builder = Builder(git.Repo(repo), cfg.upstream, cfg.build, tmp_path / "cache")
    builds = Gated(builder, gate) if gate else builder
    warmer = Warmer(builds, lambda: precompile_executor(cfg, work, parallel), parallel)
    executor = make_executor(cfg, work, ahead=0)
    store = Store(tmp_path / "s.sqlite")
    probe = StoreProbe("w", cfg.shapes, store, builder, executor, warmer=warmer)
    return cfg, work, builds, warmer, executor, store, probe


def artifact(work: Path, sha: str) -> Path:
    return work / "jit" / sha / "triton_cache_dir" / "mm.bin"


def test_a_prefetch_compiles_cold_off_the_device_and_the_first_trial_keeps_it(tmp_path, upstream, monkeypatch) -> None:
    repo, shas = upstream
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, work, _, warmer, executor, store, probe = setup(tmp_path, repo)
    # Another process holds the device's host lock the whole time: a prefetch that asked for the
    # device would wait until its time limit; it finishes, and never asked.
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_path("cpu", 0))], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        probe.prefetch([shas[1]])
        warmer.wait(120)
        holder.kill()
        holder.wait()
        assert warmer.started == [shas[1]]
        (timeline,) = warmer._executor.timelines
        assert timeline.want is None and timeline.go is None and timeline.release is None
        assert store.trials("w") == []  # a prefetch is no measurement
        compiled_by = artifact(work, shas[1]).read_text()

        m = probe(shas[1], 1)
        assert isinstance(m, Measurement) and m.count() == 1
        (rec,) = store.trials("w", sha=shas[1])
        # The JIT dir was not emptied: the artifact is the prefetch's, and the trial found it warm.
        assert artifact(work, shas[1]).read_text() == compiled_by
        assert rec.protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is False
        cold = rec.protocol["cold_compile"]
        assert cold["by"] == "prefetch" and cold["status"] == "precompiled" and cold["compile_s"] >= 0.5
        assert rec.compile_s < cold["compile_s"]  # its own first call was warm

        # A commit nobody prefetched compiles cold in its first trial, as before.
        probe(shas[2], 1)
        (other,) = store.trials("w", sha=shas[2])
        assert other.protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is True and "cold_compile" not in other.protocol
        assert other.compile_s >= 0.5

        # Nothing is prefetched for a commit already measured.
        probe.prefetch([shas[1], shas[2]])
        assert warmer.asked[-1] == ()
    finally:
        warmer.close()
        executor.close()
        store.close()
        if holder.poll() is None:
            holder.kill()
            holder.wait()


@needs_cuda
@pytest.mark.gpu
def test_a_prefetch_compiles_a_triton_kernel_before_the_first_trial_on_a_gpu(tmp_path, monkeypatch) -> None:
    repo, shas = make_upstream(tmp_path, TRITON_KERNEL)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, work, _, warmer, executor, store, probe = setup(tmp_path, repo, kind="cuda")
    try:
        probe.prefetch([shas[1]])
        warmer.wait(300)
        (timeline,) = warmer._executor.timelines
        assert warmer.started == [shas[1]] and timeline.want is None and timeline.go is None
        assert store.trials("w") == []
        cache = work / "jit" / shas[1] / "triton_cache_dir"
        compiled = {p.relative_to(cache) for p in cache.rglob("*") if p.is_file()}
        assert compiled, "the prefetch compiled nothing into the commit's Triton cache"
        probe(shas[1], 1)
        (rec,) = store.trials("w", sha=shas[1])
        assert rec.status is TrialStatus.OK, rec.error or rec.log_tail
        assert compiled <= {p.relative_to(cache) for p in cache.rglob("*") if p.is_file()}  # kept, not emptied
        assert rec.protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is False
        cold = rec.protocol["cold_compile"]
        assert cold["by"] == "prefetch" and cold["precompile"] == "captured", cold
    finally:
        warmer.close()
        executor.close()
        store.close()


def standby_setup(tmp_path: Path, repo: Path, kind: str = "cpu", shapes: int = 1):
    """A warmer whose prefetches are held first trials of the run's own executor."""
    cfg = config(repo, tmp_path, kind, shapes)
    work = tmp_path / "work"
    builder = Builder(git.Repo(repo), cfg.upstream, cfg.build, tmp_path / "cache")
    executor = make_executor(cfg, work, ahead=0)
    warmer = Warmer(builder, lambda: precompile_executor(cfg, work, 2), 2, standby=lambda: executor)
    store = Store(tmp_path / "s.sqlite")
    return cfg, work, warmer, executor, store, StoreProbe("w", cfg.shapes, store, builder, executor, warmer=warmer)


def wait_until(what, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def standbys_at_the_gate(executor, n: int) -> None:
    """Until `n` held trials have set up and asked for the device (none may have got it)."""
    wait_until(lambda: sum(r.held and r.state == "wants" for r in list(executor._runs)) == n)
    assert all(r.state != "on-device" for r in list(executor._runs))


@pytest.mark.parametrize("kind", ["cpu", pytest.param("cuda", marks=[needs_cuda, pytest.mark.gpu])])
def test_a_standby_first_trial_sets_up_ahead_and_takes_the_device_only_when_asked(tmp_path, monkeypatch, kind) -> None:
    repo, shas = make_upstream(tmp_path, KERNEL if kind == "cpu" else TRITON_KERNEL, commits=5)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, _work, warmer, executor, store, probe = standby_setup(tmp_path, repo, kind)
    try:
        probe.prefetch([shas[1], shas[2]])
        warmer.wait(120)
        standbys_at_the_gate(executor, 4)  # and each one's companion (below)
        assert sorted(warmer.started) == sorted(shas[1:3]) and store.trials("w") == []  # held: nothing measured
        # The search names the next round's commits, then measures this round's: a standby the last
        # request named lives on (shas[1], shas[2]); one named by neither goes (below).
        probe.prefetch([shas[3], shas[0], shas[4]])
        warmer.wait(120)
        standbys_at_the_gate(executor, 8)  # 2 x `parallel` standbys at most: the least likely, shas[4], gets none
        assert sorted(warmer.started) == sorted(shas[:4])
        # Each standby got its companion once set up: the commit's second trial, held as a spare
        # that waits for the first (2 x `parallel` spares at most), in the order they got ready.
        companions = [(shas[k], 1) for k in range(4)]
        assert sorted(warmer.spares) == sorted(companions)
        asked = time.time()
        assert probe(shas[1], 1).count() == 1
        (rec,) = store.trials("w", sha=shas[1])
        assert rec.status is TrialStatus.OK, rec.error or rec.log_tail
        line = rec.protocol["timeline"]
        assert line["want"] < asked <= line["unheld"] <= line["go"]  # set up before it was asked for
        assert rec.protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is True  # it is the commit's cold first trial
        if kind == "cuda":  # its compile was staged before the device: the setup the standby took off the path
            spans = {name: end - start for name, _, start, end in rec.protocol["phases"]}
            assert spans["precompile"] > 0 and rec.protocol["precompile"] == "captured"
        assert sorted(warmer.spares) == sorted(companions)  # its companion is its spare: no other made
        probe.prefetch([])  # the search went another way: shas[2]'s standby and companion are killed
        wait_until(lambda: len(executor._runs) == 5)  # shas[3]'s, shas[0]'s standbys, three companions
        assert warmer.cancelled == [shas[2]] and store.trials("w", sha=shas[2]) == []
        assert len(executor.timelines) == 1  # the killed ones left none
        probe(shas[3], 1)
        (rec3,) = store.trials("w", sha=shas[3])
        assert rec3.protocol["timeline"]["unheld"] is not None
        # A later trial of a measured commit comes from its spare: set up before it was asked for.
        standbys_at_the_gate(executor, 4)  # shas[0]'s standby, the companions of shas[0], shas[1], shas[3]
        asked = time.time()
        probe(shas[1], 2)  # its companion: it waited for the first, which has ended
        second = [r for r in store.trials("w", sha=shas[1]) if r.slot == 1]
        assert second and second[0].status is TrialStatus.OK and warmer.spares_taken == [(shas[1], 1)]
        assert second[0].protocol["timeline"]["want"] < asked <= second[0].protocol["timeline"]["unheld"]
        assert second[0].protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is False  # the cache its first filled
        # A commit with no standby, as before.
        probe(shas[4], 1)
        assert [r.protocol["timeline"].get("unheld") for r in store.trials("w", sha=shas[4])] == [None]
    finally:
        warmer.close()
        executor.close()
        store.close()


def test_a_standby_for_the_part_refined_next_displaces_one_for_later_and_a_dropped_one_comes_back(
    tmp_path, monkeypatch
) -> None:
    """The search names the commits it needs next first, then those of the parts it will come back
    to (`_State.pending`). With every held slot taken, a newly named commit that ranks above a held
    one takes its slot; a commit whose standby went is set up again when named again (the H200 demo
    set up 12 commits on the device's path that an earlier request had named)."""
    repo, shas = make_upstream(tmp_path, KERNEL, commits=5)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, _work, warmer, executor, store, probe = standby_setup(tmp_path, repo)
    try:
        assert warmer.held_cap == 4
        probe.prefetch(shas[1:])
        warmer.wait(120)
        assert sorted(warmer.started) == sorted(shas[1:]) and warmer.cancelled == []
        probe.prefetch(shas)  # shas[0] first: the least likely held one, shas[4], makes room
        warmer.wait(120)
        assert warmer.cancelled == [shas[4]] and warmer.started[-1] == shas[0]
        probe.prefetch([shas[4], *shas[:4]])  # named first again: set up again, in shas[3]'s slot
        warmer.wait(120)
        assert warmer.cancelled == [shas[4], shas[3]] and warmer.started.count(shas[4]) == 2
        assert sorted(k[0] for k in warmer._held) == sorted([shas[4], *shas[:3]])
        assert probe(shas[4], 1).count() == 1  # from its second standby: set up before it was asked for
        (rec,) = store.trials("w", sha=shas[4])
        assert rec.status is TrialStatus.OK and rec.protocol["timeline"]["unheld"] is not None
    finally:
        warmer.close()
        executor.close()
        store.close()


def test_cancelled_prefetches_never_run(tmp_path, upstream) -> None:
    repo, shas = upstream
    _cfg, work, builds, warmer, executor, store, probe = setup(tmp_path, repo, parallel=1, gate=shas[0])
    try:
        probe.prefetch([shas[0], shas[1], shas[2]])  # one slot: shas[0] builds, the others wait
        assert builds.entered.wait(60)
        probe.prefetch([shas[0], shas[3]])  # shas[1], shas[2] no longer wanted: dropped
        builds.go.set()
        warmer.wait(120)
        # the first trial of a commit whose prefetch was still queued cancels it and compiles cold
        assert warmer.started == [shas[0], shas[3]] and warmer.cancelled == [shas[1], shas[2]]
        assert not artifact(work, shas[1]).exists() and not artifact(work, shas[2]).exists()
        assert artifact(work, shas[0]).exists() and artifact(work, shas[3]).exists()
    finally:
        builds.go.set()
        warmer.close()
        executor.close()
        store.close()


def test_prefetch_is_on_for_gpu_hosts_off_on_the_cpu_and_can_be_turned_off(tmp_path) -> None:
    cpu = config(tmp_path, tmp_path)
    assert default_parallel(cpu) == 0
    assert default_parallel(replace(cpu, device="cuda")) >= 1
    off = config(tmp_path, tmp_path, prefetch=0)
    assert default_parallel(replace(off, device="cuda")) == 0
    assert default_parallel(config(tmp_path, tmp_path, prefetch=3)) == 3


class Recording(ProbeBase):
    """The simulated probe, and what the search asked for in order: measured commits, prefetches."""

    side_by_side = True

    def __init__(self, inner: SimulatedProbe) -> None:
        self.inner, self.log = inner, []

    def __call__(self, sha: str, repeats: int) -> Measurement:
        self.log.append(("measure", sha))
        return self.inner(sha, repeats)

    def together(self, wants):
        self.log.append(("round", tuple(wants)))
        return {sha: self.inner(sha, n) for sha, n in wants.items()}

    def prefetch(self, shas) -> None:
        self.log.append(("prefetch", tuple(shas)))


def search(n: int, step: int, **settings) -> tuple[list[str], list]:
    commits = [f"{k:040x}" for k in range(n)]
    model = StepModel({"s": 100.0}, (SimStep(commits[step], {"s": 0.8}),), frozenset())
    probe = Recording(SimulatedProbe(commits, model, noise_cv=0.005, seed=1))
    result = localize(commits, probe, SearchSettings(**settings))
    assert [s.commit for s in result.steps] == [commits[step]]
    return commits, probe.log


def test_a_bisection_prefetches_both_halves_midpoints_before_each_round() -> None:
    commits, log = search(17, 11, interior_points=0)
    ix = {sha: k for k, sha in enumerate(commits)}
    calls = [[ix[s] for s in shas] for what, shas in log if what == "prefetch"]
    # Before GOOD and BAD, again before the grid (none here) and before GOOD and BAD are compared:
    # the middle, which the first split measures; then, before measuring each middle m of (lo, hi),
    # the middles of (lo, m) and (m, hi); the last split's halves have none.
    assert calls[:7] == [[8], [8], [8], [4, 12], [10, 14], [9, 11], []]


@pytest.mark.parametrize("width", [1, 3])
def test_every_new_commit_was_prefetched_a_round_ahead(width: int) -> None:
    commits, log = search(97, 61, width=width)
    first_seen: dict[str, int] = {}
    for t, (what, x) in enumerate(log):
        for sha in [x] if what == "measure" else x if what == "round" else ():
            first_seen.setdefault(sha, t)
    named: dict[str, int] = {}
    for t, (what, shas) in enumerate(log):
        if what == "prefetch":
            for sha in shas:
                named.setdefault(sha, t)
    new = [sha for sha in first_seen if sha not in (commits[0], commits[-1])]
    assert len(new) >= 6
    # Every commit the search measured besides GOOD and BAD was named in a prefetch before it was measured,
    assert all(sha in named and named[sha] < first_seen[sha] for sha in new)
    # and no prefetch names a commit already measured.
    assert all(
        first_seen.get(sha, len(log)) > t for t, (what, shas) in enumerate(log) if what == "prefetch" for sha in shas
    )


def test_with_several_steps_each_new_commit_is_named_in_one_of_the_two_requests_before_it() -> None:
    """The warmer keeps a standby while the last request or the one before names it, the first
    2 x `parallel` of them: the search, depth first, names the parts it will come back to after
    the part it refines now, so their standbys are not dropped meanwhile (the H200 demo set up 12
    new commits on the device's path, each named long before)."""
    commits = [f"{k:040x}" for k in range(97)]
    model = StepModel(
        {"s": 100.0, "t": 100.0},
        (
            SimStep(commits[13], {"s": 0.8}),
            SimStep(commits[40], {"t": 1.2}),
            SimStep(commits[44], {"s": 1.15}),
            SimStep(commits[83], {"t": 0.9}),
        ),
        frozenset(),
    )
    probe = Recording(SimulatedProbe(commits, model, noise_cv=0.005, seed=1))
    result = localize(commits, probe, SearchSettings())
    assert [commits.index(s.commit) for s in result.steps] == [13, 40, 44, 83]
    requests: list[tuple[str, ...]] = []
    seen = {commits[0], commits[-1]}
    late = []
    for what, x in probe.log:
        if what == "prefetch":
            requests.append(x)
            continue
        for sha in [x] if what == "measure" else x:
            if sha not in seen and not any(sha in r[:8] for r in requests[-2:]):
                late.append(commits.index(sha))
            seen.add(sha)
    assert len(seen) > 20 and late == []


SLOW_KERNEL = textwrap.dedent("""
    import torch

    def mm(a, b):
        out = a @ b
        for _ in range({extra}):  # the regression: extra work
            out = a @ b
        return out
""")


def run_with_standbys(tmp_path: Path, repo: Path, good: str, bad: str, **options):
    """`pipeline.bisect` over good..bad on the CPU with prefetches and standbys on: (config, outcome)."""
    from bisector import pipeline

    cfg = config(repo, tmp_path, prefetch=2, standby=True, trials=2, max_trials=4)
    return cfg, pipeline.bisect(
        cfg,
        pipeline.RunOptions(
            good=good,
            bad=bad,
            store=str(tmp_path / "s.sqlite"),
            work_dir=str(tmp_path / "work"),
            report_dir=str(tmp_path / "report"),
            **options,
        ),
    )


@pytest.mark.slow
def test_the_revert_of_a_step_being_verified_is_set_up_on_the_tip_ahead(tmp_path) -> None:
    """The search tells the run which one-commit regressions it is about to verify, and the run
    sets up each one's revert on the tip meanwhile: the fixes stage's first trial of the patched
    tip comes from a standby (unheld when asked), not from a cold setup after verification."""
    from bisector.measure.time_spent import from_records

    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    shas = [
        commit_file(repo, "kern.py", SLOW_KERNEL.format(extra=0), "kernel (#900)", 1),
        commit_file(repo, "NOTES.md", "one\n", "notes (#901)", 2),
        commit_file(repo, "kern.py", SLOW_KERNEL.format(extra=30), "kernel: extra work (#902)", 3),
        commit_file(repo, "NOTES.md", "one\ntwo\n", "notes (#903)", 4),
    ]
    cfg, outcome = run_with_standbys(tmp_path, repo, shas[0], shas[-1], find_hunks=False)
    assert [s.commit for s in outcome.result.steps] == [shas[2]]
    assert [f.applied for f in outcome.fixes] == [True]
    with Store(tmp_path / "s.sqlite", readonly=True) as store:
        patched = [t for t in store.trials(campaign_key(cfg)) if t.patch_hash]
    assert {t.sha for t in patched} == {shas[-1]}, "the revert was measured on the tip"
    first = min(from_records(patched)[0], key=lambda tl: tl.submitted)
    assert first.unheld is not None, "the revert's first trial was set up ahead, held, and unheld when asked"


@pytest.mark.slow
def test_the_hunk_searches_first_subsets_are_set_up_on_the_parent_ahead(tmp_path) -> None:
    """Before each culprit's hunk search the run sets up the subsets it measures first (and the next
    culprit's): each subset's first trial comes from a standby held on the parent, not from a cold
    setup of a new patched build after the last round ended."""
    from bisector.measure.time_spent import from_records

    repo = tmp_path / "up"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    shas = [
        commit_file(repo, "kern.py", SLOW_KERNEL.format(extra=0), "kernel (#900)", 1),
        commit_file(repo, "NOTES.md", "one\n", "notes (#901)", 2),
    ]
    (repo / "NOTES.md").write_text("one\nthe kernel does more\n")
    run_git(repo, "add", "NOTES.md")
    shas.append(commit_file(repo, "kern.py", SLOW_KERNEL.format(extra=30), "kernel: extra work (#902)", 3))
    cfg, outcome = run_with_standbys(tmp_path, repo, shas[0], shas[-1], verify_fixes=False)
    found = outcome.result
    # once in a CI run on a busy 2-core machine no step came back: say what the search had instead
    assert [s.commit for s in found.steps] == [shas[2]], (found.dropped, found.skipped, found.uncertain)
    (finding,) = outcome.report.hunks
    assert finding.alone and finding.hunks[0].startswith("kern.py"), finding
    with Store(tmp_path / "s.sqlite", readonly=True) as store:
        patched = [t for t in store.trials(campaign_key(cfg)) if t.patch_hash]
    assert {t.sha for t in patched} == {shas[1]} and len({t.patch_hash for t in patched}) == 2
    for patch in {t.patch_hash for t in patched}:
        first = min(from_records([t for t in patched if t.patch_hash == patch])[0], key=lambda tl: tl.submitted)
        assert first.unheld is not None, f"subset {patch}: its first trial was not set up ahead and held"


@pytest.mark.slow
def test_a_spare_set_up_for_every_shape_times_only_the_shapes_a_doubling_asks_for(tmp_path, monkeypatch) -> None:
    """A pair unclear on one shape doubles on that shape alone (`StoreProbe.shaped`), while the
    commit's spare was set up for all of them: the spare stands for that trial, told at its grant
    which shapes to time, and its records are those shapes'. A spare for fewer shapes than asked for
    is set up afresh."""
    repo, shas = make_upstream(tmp_path, KERNEL, commits=2)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    cfg, _work, warmer, executor, store, probe = standby_setup(tmp_path, repo, shapes=3)
    try:
        assert [s.key for s in cfg.shapes] == ["gemm/a", "gemm/b", "gemm/c"]
        assert probe(shas[0], 2).count() == 2  # slots 0, 1; slot 2 set up ahead as the commit's spare
        wait_until(lambda: (shas[0], 2) in warmer.spares and any(r.held and r.state == "wants" for r in executor._runs))
        probe.shaped({shas[0]: {"gemm/b": 3}})
        assert warmer.spares_taken == [(shas[0], 2)]
        third = [r for r in store.trials("w", sha=shas[0]) if r.slot == 2]
        assert [(r.shape, r.status) for r in third] == [("gemm/b", TrialStatus.OK)], [r.error for r in third]
        assert third[0].protocol["timeline"]["unheld"] is not None  # set up before it was asked for
        assert third[0].protocol["granted_shapes"] == ["gemm/b"]
        assert third[0].protocol["seed"] == probe.job(shas[0], 2, False, None).seed + 1  # its index among all three
        # Its next spare is the restricted probe's, for gemm/b alone: a doubling on gemm/a is not its to stand for.
        wait_until(lambda: (shas[0], 3) in warmer.spares)
        probe.shaped({shas[0]: {"gemm/a": 3}})
        fourth = [r for r in store.trials("w", sha=shas[0]) if r.slot == 3]
        assert [r.shape for r in fourth] == ["gemm/a"] and fourth[0].protocol["timeline"]["unheld"] is None
        assert "granted_shapes" not in fourth[0].protocol
    finally:
        warmer.close()
        executor.close()
        store.close()


@pytest.mark.slow
def test_a_standby_set_up_for_every_shape_stands_for_a_split_points_first_trial_on_some(tmp_path, monkeypatch) -> None:
    """A split point is timed on its part's open shapes only (`split_on_moved`) while its standby was
    set up for every shape: the standby stands for that first trial, told at its grant which shapes
    to time; it is the commit's cold first trial, and its records are those shapes' alone."""
    repo, shas = make_upstream(tmp_path, KERNEL, commits=3)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, _work, warmer, executor, store, probe = standby_setup(tmp_path, repo, shapes=3)
    try:
        probe.prefetch([shas[1]])
        warmer.wait(120)
        wait_until(lambda: any(r.held and r.state == "wants" and r.job.slot == 0 for r in list(executor._runs)))
        asked = time.time()
        got = probe.shaped({shas[1]: {"gemm/b": 1}})
        assert set(got[shas[1]].samples) == {"gemm/b"}
        (rec,) = store.trials("w", sha=shas[1])
        assert rec.shape == "gemm/b" and rec.status is TrialStatus.OK, rec.error or rec.log_tail
        line = rec.protocol["timeline"]
        assert line["want"] < asked <= line["unheld"]  # the standby, set up before it was asked for
        assert rec.protocol["granted_shapes"] == ["gemm/b"]
        assert rec.protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is True  # the commit's cold first trial
    finally:
        warmer.close()
        executor.close()
        store.close()


def test_a_new_commits_next_spare_sets_up_as_soon_as_its_companion_is_taken(tmp_path, monkeypatch) -> None:
    """A new commit measured twice at once (its standby and the companion that waits for it): its
    third trial is set up as the round is submitted, not once its first trial has ended; the
    standby had compiled before the companion was made, so no compile of it is warm by its doing."""
    repo, shas = make_upstream(tmp_path, KERNEL, commits=2)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, _work, warmer, executor, store, probe = standby_setup(tmp_path, repo)
    try:
        probe.prefetch([shas[1]])
        warmer.wait(120)
        wait_until(lambda: (shas[1], 1) in warmer.spares)  # the companion
        # Another process holds the device: the round's trials cannot end before it lets go.
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(lock_path("cpu", 0))], stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            measured = threading.Thread(target=lambda: probe(shas[1], 2), daemon=True)
            measured.start()
            wait_until(lambda: (shas[1], 2) in warmer.spares)  # held, with the round's trials still waiting
            assert store.trials("w", sha=shas[1]) == [] and all(t.go is None for t in executor.timelines)
        finally:
            holder.kill()
            holder.wait()
        measured.join(120)
        recs = store.trials("w", sha=shas[1])
        assert sorted(r.slot for r in recs) == [0, 1]
        assert next(r for r in recs if r.slot == 0).protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is True
    finally:
        warmer.close()
        executor.close()
        store.close()


def test_past_the_spare_cap_the_first_item_of_a_round_keeps_its_spare(tmp_path, monkeypatch) -> None:
    """A round of more commits than spares may live (2 x `parallel`): the spares made last survive,
    and the first item's is made last, since the later stages put there what every round measures
    (the tip beside each revert): its next trial comes from its spare."""
    from bisector.measure.probe import side_by_side

    repo, shas = make_upstream(tmp_path, KERNEL, commits=6)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    _cfg, _work, warmer, executor, store, probe = standby_setup(tmp_path, repo)
    try:
        assert warmer.held_cap == 4
        for sha in shas:
            assert probe(sha, 1).count() == 1
        side_by_side([(probe, sha, 2) for sha in shas])
        assert {(sha, 2) for sha in shas} <= set(warmer.spares)  # a spare made for every commit's next trial
        probe(shas[0], 3)
        assert (shas[0], 2) in warmer.spares_taken, warmer.spares_taken
        (third,) = [r for r in store.trials("w", sha=shas[0]) if r.slot == 2]
        assert third.protocol["timeline"]["unheld"] is not None
    finally:
        warmer.close()
        executor.close()
        store.close()


def test_a_grid_point_that_does_not_build_has_its_replacement_named_ahead() -> None:
    """Where a grid point does not build the grid moves to its neighbour: named last in the requests
    before the grid is measured, it is set up ahead where there is room (the H200 demo's 7ebe652,
    asked for only after 3ebbba9 failed, waited 4.2 s cold)."""
    commits = [f"{k:040x}" for k in range(97)]
    settings = SearchSettings()
    q1 = settings.interior_points + 1
    broken = round(96 * 2 / q1)  # the second grid point
    model = StepModel({"s": 100.0}, (SimStep(commits[61], {"s": 0.8}),), frozenset({commits[broken]}))
    probe = Recording(SimulatedProbe(commits, model, noise_cv=0.005, seed=1))
    result = localize(commits, probe, settings)
    assert [s.commit for s in result.steps] == [commits[61]]
    grid_round = next(k for k, (what, x) in enumerate(probe.log) if what == "round" and commits[broken] in x)
    named = {sha for what, x in probe.log[:grid_round] if what == "prefetch" for sha in x}
    moved_to = next(x for what, x in probe.log[grid_round + 1 :] if what == "measure" and x != commits[broken])
    assert moved_to == commits[broken - 1] and moved_to in named


def test_a_trial_asked_for_while_its_standby_is_being_built_waits_for_that_standby(tmp_path, monkeypatch) -> None:
    """The run asks for a commit whose standby the warmer is still building: the trial waits the
    moment it takes and comes from the standby, instead of a second, cold setup beside it (under a
    busy CI a hunk subset named just before its round lost that race)."""
    repo, shas = make_upstream(tmp_path, KERNEL, commits=3)
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    cfg = config(repo, tmp_path)
    builder = Builder(git.Repo(repo), cfg.upstream, cfg.build, tmp_path / "cache")
    gated = Gated(builder, shas[1])
    executor = make_executor(cfg, tmp_path / "work", ahead=0)
    warmer = Warmer(gated, lambda: precompile_executor(cfg, tmp_path / "work", 2), 2, standby=lambda: executor)
    store = Store(tmp_path / "s.sqlite")
    probe = StoreProbe("w", cfg.shapes, store, builder, executor, warmer=warmer)
    try:
        probe.prefetch([shas[1]])
        assert gated.entered.wait(60)  # the warmer is building it
        threading.Timer(1.0, gated.go.set).start()  # and ends while the trial below is being asked for
        assert probe(shas[1], 1).count() == 1
        (rec,) = store.trials("w", sha=shas[1])
        assert rec.status is TrialStatus.OK and rec.protocol["timeline"]["unheld"] is not None
        assert warmer.started == [shas[1]]
    finally:
        gated.go.set()
        warmer.close()
        executor.close()
        store.close()

"""The trial executor on real processes: device sections never overlap on one device, setup overlaps
other trials' device time, trials die with the bot, a runaway allocation is killed, a cancelled
trial never runs, and two runs on one store never measure one trial twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bisector.config import parse
from bisector.model import BuildResult, BuildStatus, TrialStatus
from bisector.runner import make_executor
from bisector.runner.executor import TEARDOWN_GRACE_S, TrialJob
from tests.devices import CONTROL, DEVICES, gpu_processes
from tests.processes import alive, describe, host_pid

KERNELS = textwrap.dedent("""
    import os, time
    import torch

    def mm(a, b):
        return a @ b

    def slow(a, b):
        time.sleep(0.1)  # a device section long enough for the next trials to set up meanwhile
        return a @ b

    def slower(a, b):
        time.sleep(0.5)
        return a @ b

    def hog(a, b):
        keep = []
        while True:  # allocates without bound, a page at a time so it is resident
            keep.append(bytearray(64 << 20))
            time.sleep(0.01)

    def hang(a, b):
        with open(os.environ["MARK"], "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(600)
""")


def config(
    tmp_path: Path,
    entry: str = "kern:mm",
    devices=(0,),
    memory_gb: float = 0.0,
    env=None,
    timeout=120.0,
    kind: str = "cpu",
    preload: list[str] | None = None,
):
    data = {
        "name": "x",
        "upstream": {"repo": str(tmp_path)},
        "device": {"kind": kind, "visible": list(devices)},
        "control": {"backend": CONTROL[kind]},
        "subject": {"gemm": {"entry": entry, "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 96, "N": 64, "K": 64, "dtype": "fp32"}]}},
        "protocol": {
            "reps": 3,
            "warmup": 1,
            "flush_mb": 1,
            "timeout_s": timeout,
            "jit_cache_env": [],
            "memory_gb": memory_gb,
            "env": env or {},
            **({"preload": preload} if preload else {}),
        },
    }
    return parse(data, tmp_path / "x.toml")


def holds(outcomes) -> list[tuple[float, float]]:
    """Every span a device was held, sorted: trials' device sections and their setups' brief loans."""
    return sorted(
        [(o.timeline.go, o.timeline.release) for o in outcomes] + [b for o in outcomes for b in o.timeline.briefs]
    )


# A worker preload that gives a CPU trial the brief loan a GPU trial takes in its setup (its inputs
# drawn), with a span long enough to overlap whatever the executor would wrongly let run beside it.
STAGE_ON_CPU = textwrap.dedent("""
    import os
    import time
    from pathlib import Path
    from benches import trial

    _stage_all = trial._stage_all

    def staged_on_cpu(spec, subjects, control, control_error, phase, gate, *rest):
        with trial.briefly(gate, phase, sync=lambda: None):
            if spec["seed"] == 99:  # a setup that hangs in its loan
                Path(os.environ["IN_LOAN"]).write_text("in")
                time.sleep(600)
            time.sleep(0.15)
        return _stage_all(spec, subjects, control, control_error, phase, gate, *rest)

    trial._stage_all = staged_on_cpu
""")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    (d / "kern.py").write_text(KERNELS)
    return d


def build(src: Path, sha: str = "a" * 40) -> BuildResult:
    return BuildResult(sha, BuildStatus.OK, str(src))


def spans(outcome, name: str) -> list[tuple[float, float]]:
    """A trial's phase spans of one name, from what the trial process reported."""
    return [(a, b) for n, _, a, b in outcome.records[0].protocol["phases"] if n == name]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["fork", "spawn"])
def test_device_sections_never_overlap_and_setup_runs_alongside(
    tmp_path: Path, src: Path, source: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BISECTOR_LOCK_DIR", str(tmp_path / "locks"))
    cfg = config(tmp_path, entry="kern:slow", kind=device)
    jobs = [TrialJob(build(src), cfg.shapes, seed=k, slot=k) for k in range(6)]
    # On a GPU also through the host-wide lock of the device, as a bot takes it.
    with make_executor(cfg, tmp_path / "work", source=source, ahead=2, lock_devices=device != "cpu") as executor:
        outcomes = executor.run(jobs)
    assert all(o.records[0].status is TrialStatus.OK for o in outcomes)
    # From the recorded timestamps: one device section at a time, in the order submitted...
    sections = [(o.timeline.go, o.timeline.release) for o in outcomes]
    assert sections == sorted(sections)
    held = holds(outcomes)  # on a GPU with each setup's brief loan for its inputs among them
    assert len(held) == 6 * (1 if device == "cpu" else 2)
    for (_, end), (start, _) in zip(held, held[1:]):
        assert end <= start, held
    # ... the timed repetitions inside them (the trial's own clock) never overlap either ...
    timed = sorted(s for o in outcomes for s in spans(o, "timed"))
    assert len(timed) == 6 and all(a[1] <= b[0] for a, b in zip(timed, timed[1:]))
    # ... each lent the device only once the one before it ended (its teardown kept off the next
    # timed section), or TEARDOWN_GRACE_S after its release ...
    for before, after in zip(outcomes, outcomes[1:]):
        assert after.timeline.go >= min(before.timeline.ended, before.timeline.release + TEARDOWN_GRACE_S), [
            o.timeline for o in outcomes
        ]
    # ... while every next trial's process was already started, setting up (its imports) off the
    # device as the one before it measured. (Whether its setup also ended in time depends on the
    # machine's load: a spawned torch import takes seconds on a busy 2-core VM.)
    for before, after in zip(outcomes, outcomes[1:]):
        assert after.timeline.started is not None and after.timeline.started < before.timeline.release, [
            o.timeline for o in outcomes
        ]


def test_two_devices_measure_at_once_and_lanes_alternate(tmp_path: Path, src: Path) -> None:
    cfg = config(tmp_path, devices=(0, 1))
    jobs = [TrialJob(build(src), cfg.shapes, seed=k, slot=k, lane=k) for k in range(4)]
    with make_executor(cfg, tmp_path / "work", source="fork", lock_devices=False) as executor:
        outcomes = executor.run(jobs)
    assert [o.timeline.device for o in outcomes] == [0, 1, 0, 1]
    for d in (0, 1):
        mine = sorted((o.timeline.go, o.timeline.release) for o in outcomes if o.timeline.device == d)
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:]))


def staged_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str = "kern:slow"):
    """A CPU config whose trials take a brief loan in their setup (STAGE_ON_CPU); seed 99 hangs in it."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "stage_on_cpu.py").write_text(STAGE_ON_CPU)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    marker = tmp_path / "work" / "scratch" / "in-loan"  # where a sandboxed trial may write
    return config(tmp_path, entry=entry, preload=["torch", "stage_on_cpu"], env={"IN_LOAN": str(marker)}), marker


def test_brief_loans_in_setups_hold_the_device_alone_and_it_is_lent_on_at_once(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, _ = staged_config(tmp_path, monkeypatch)
    jobs = [TrialJob(build(src), cfg.shapes, seed=k, slot=k) for k in range(5)]
    with make_executor(cfg, tmp_path / "work", source="spawn", ahead=2) as executor:
        outcomes = executor.run(jobs)
    assert all(o.records[0].status is TrialStatus.OK for o in outcomes)
    held = holds(outcomes)
    assert len(held) == 10 and all(len(o.timeline.briefs) == 1 for o in outcomes)
    for (_, end), (start, _) in zip(held, held[1:]):
        assert end <= start, held  # a loan never beside another trial's device section or loan
    for o in outcomes:
        ((go, release),) = o.timeline.briefs
        ((a, b),) = spans(o, "staging")
        assert go <= a <= b <= release  # the trial's staging inside the loan the executor recorded
        # Lent on while the process goes on: its own device section, after the loan, before it ended
        # (a CPU device section is otherwise lent on only once its process has ended).
        assert release <= o.timeline.go < o.timeline.ended
        assert o.timeline.device_s == pytest.approx(o.timeline.release - o.timeline.go + release - go)


@pytest.mark.parametrize("how", ["cancelled", "held too long"])
def test_a_trial_that_hangs_in_its_brief_loan_gives_the_device_back(
    tmp_path: Path, src: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled in its loan, or a standby (no time limit) holding it past BRIEF_LIMIT_S: the device
    goes on to the next trial."""
    from bisector.runner import executor as executor_module

    monkeypatch.setattr(executor_module, "BRIEF_LIMIT_S", 3.0)
    cfg, marker = staged_config(tmp_path, monkeypatch, entry="kern:mm")
    with make_executor(cfg, tmp_path / "work", source="spawn", ahead=1) as executor:
        hung = executor.submit(TrialJob(build(src), cfg.shapes, seed=99, slot=0, hold=how == "held too long"))
        deadline = time.time() + 120
        while not marker.exists():
            assert time.time() < deadline, "the hanging setup never took its loan"
            time.sleep(0.05)
        later = executor.submit(TrialJob(build(src), cfg.shapes, seed=1, slot=1))
        if how == "cancelled":
            executor.cancel(hung)
        outcome = later.result(timeout=120)
    assert outcome.records[0].status is TrialStatus.OK
    assert hung.cancelled() if how == "cancelled" else hung.result(timeout=5).records[0].status is not TrialStatus.OK


@pytest.mark.parametrize("device", DEVICES)
def test_runaway_memory_is_killed_and_recorded(tmp_path: Path, src: Path, device: str) -> None:
    # A CUDA process holds a few GiB before the kernel runs: its limit leaves room for that.
    limit = {"cpu": 0.75, "cuda": 6.0}[device]
    cfg = config(tmp_path, entry="kern:hog", memory_gb=limit, kind=device)
    with make_executor(cfg, tmp_path / "work", source="fork", lock_devices=False) as executor:
        (outcome,) = executor.run([TrialJob(build(src), cfg.shapes, seed=0)])
    (rec,) = outcome.records
    assert rec.status is TrialStatus.CRASH and f"over the memory limit of {limit:.1f} GiB" in rec.error, rec.error
    # it was the kernel's allocation that was stopped, not the process's start: on the CPU with the
    # device held; on a GPU in its first call, which runs before the device is taken (precompile)
    if device == "cpu":
        assert outcome.timeline.go is not None and outcome.timeline.release is not None, outcome.timeline
    else:
        assert outcome.timeline.assigned is not None and outcome.timeline.go is None, outcome.timeline


def test_a_cancelled_trial_never_takes_the_device(tmp_path: Path, src: Path) -> None:
    cfg = config(tmp_path)
    with make_executor(cfg, tmp_path / "work", source="fork", lock_devices=False) as executor:
        first = executor.submit(TrialJob(build(src), cfg.shapes, seed=0))
        second = executor.submit(TrialJob(build(src), cfg.shapes, seed=1, slot=1, after=first))
        executor.cancel(second)
        assert first.result().records[0].status is TrialStatus.OK
        assert second.cancelled()
    assert len(executor.timelines) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_gpu_is_lent_on_before_the_last_trials_records_are_stored_a_cpu_core_after(
    tmp_path: Path, src: Path, device: str
) -> None:
    cfg = config(tmp_path, entry="kern:slower", kind=device)
    stored: dict[int, float] = {}
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=1, lock_devices=False) as executor:
        finish = executor.finish

        def slow_to_store(job, prepared, out, info):
            time.sleep(1.5 if job.seed == 0 else 0.0)  # storing the first trial takes long
            records = finish(job, prepared, out, info)
            stored[job.seed] = time.time()
            return records

        executor.finish = slow_to_store
        first, second = executor.run([TrialJob(build(src), cfg.shapes, seed=k, slot=k) for k in range(2)])
    assert first.records[0].status is TrialStatus.OK and second.records[0].status is TrialStatus.OK
    # the second was set up and waiting while the first measured (2.5 s of 0.5 s calls) ...
    assert second.timeline.want < first.timeline.ended, (first.timeline, second.timeline)
    if device == "cpu":  # ... and on a core only once the bot's storing, which runs on the cores too, was done
        assert second.timeline.go >= stored[0], (first.timeline, second.timeline, stored)
    else:  # ... and lent the device once the first had ended, not once its records were stored
        assert first.timeline.ended <= second.timeline.go < stored[0] - 1.0, (first.timeline, second.timeline, stored)


BOT = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[1]]
    from tests.test_executor import config, build
    from bisector.runner import make_executor
    from bisector.runner.executor import TEARDOWN_GRACE_S, TrialJob
    tmp, src = Path(sys.argv[2]), Path(sys.argv[3])
    cfg = config(tmp, entry="kern:hang", env={"MARK": str(tmp / "mark")}, kind=sys.argv[5])
    with make_executor(cfg, tmp / "work", source=sys.argv[4], lock_devices=False) as ex:
        ex.run([TrialJob(build(src), cfg.shapes, seed=0)])
""")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["fork", "spawn"])
def test_a_killed_bot_takes_its_trial_processes_with_it(tmp_path: Path, src: Path, source: str, device: str) -> None:
    bot = subprocess.Popen(
        [sys.executable, "-c", BOT, str(Path(__file__).parents[1]), str(tmp_path), str(src), source, device],
        env={**os.environ, "BISECTOR_SANDBOX_WRITABLE": str(tmp_path)},
    )
    mark = tmp_path / "mark"
    deadline = time.monotonic() + 120
    while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:
        assert bot.poll() is None, "the bot ended before its trial started"
        time.sleep(0.2)
    kernel = host_pid(int(mark.read_text()), f"MARK={mark}")  # a sandboxed trial knows its namespace's pid
    assert alive(kernel)
    on_gpu = device == "cuda" and kernel in gpu_processes()  # where the driver shows this PID namespace's PIDs
    bot.send_signal(signal.SIGKILL)
    bot.wait()
    deadline = time.monotonic() + 30
    while alive(kernel) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(kernel), f"the hung trial outlived its bot: {describe(kernel)}"
    if on_gpu:  # and its CUDA context is gone with it: the GPU is free for the next job
        while kernel in gpu_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert kernel not in gpu_processes()


TWO_RUNS = textwrap.dedent("""
    import sys, time
    from concurrent.futures import ThreadPoolExecutor, Future
    from dataclasses import replace
    sys.path[:0] = [sys.argv[1]]
    from bisector.model import BuildResult, BuildStatus, Shape, TrialRecord, TrialStatus
    from bisector.measure.probe import StoreProbe
    from bisector.runner.executor import Timeline, TrialOutcome
    from bisector.store import Store

    class Slow:
        def __init__(self):
            self.pool = ThreadPoolExecutor(1)
        def submit(self, job):
            def run():
                time.sleep(0.4)
                recs = (TrialRecord(job.build.sha, s.key, TrialStatus.OK, (1.0,), (1.0,), 1.0, 1.0, 1.0,
                                    slot=job.slot, protocol={"seed": job.seed}) for s in job.shapes)
                return TrialOutcome(tuple(recs), Timeline(job.build.sha, None, 0, 0.0))
            return self.pool.submit(run)
        def cancel(self, future):
            future.cancel()

    class Builds:
        def build(self, sha, patch=None):
            return BuildResult(sha, BuildStatus.OK, "/src")

    shape = Shape("gemm", "m", (("M", 8),))
    probe = StoreProbe("c", (shape,), Store(sys.argv[2]), Builds(), Slow())
    print(probe("abc", int(sys.argv[3])).count())
""")


def test_two_runs_on_one_store_never_measure_one_trial_twice(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    root = str(Path(__file__).parents[1])
    runs = [
        subprocess.Popen([sys.executable, "-c", TWO_RUNS, root, str(store), "6"], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [r.communicate(timeout=120)[0].strip() for r in runs]
    assert outs == ["6", "6"], outs
    import sqlite3

    with sqlite3.connect(store) as db:
        slots = [row[0] for row in db.execute("SELECT slot FROM trials WHERE sha = 'abc' ORDER BY slot")]
        claims = db.execute("SELECT COUNT(*) FROM claims").fetchone()[0]
    assert slots == list(range(6)), slots  # six trials between the two runs, each measured once
    assert claims == 0


def test_a_zygote_that_dies_is_started_again_and_its_trials_run(tmp_path: Path, src: Path) -> None:
    # Twice on a fresh H200 host the run's first zygote was gone before its first fork: the bot
    # died of a broken pipe. Now a new zygote takes over (its log quoted), and the trials run.
    cfg = config(tmp_path)
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=0, lock_devices=False) as executor:
        first = executor.source.proc
        first.kill()
        first.wait()
        outcomes = executor.run([TrialJob(build(src), cfg.shapes, seed=k, slot=k) for k in range(2)])
        assert executor.source.proc is not first and executor.source.restarts == 1
        first = executor.source.proc  # and once more, between trials
        first.kill()
        first.wait()
        outcomes += executor.run([TrialJob(build(src), cfg.shapes, seed=2, slot=2)])
    assert [o.records[0].status for o in outcomes] == [TrialStatus.OK] * 3


@pytest.mark.parametrize("device", DEVICES)
def test_a_new_lineage_runs_in_a_new_zygote_and_the_replaced_one_ends_with_its_last_worker(
    tmp_path: Path, src: Path, device: str
) -> None:
    # A step is verified in processes that share no history with the trials that found it: a new
    # zygote's forks. Older workers still serve trials that ask for no lineage; the replaced
    # zygote forks no more and ends once they have. (On a GPU host the next zygote is started
    # at each renewal.)
    cfg = config(tmp_path, kind=device)
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=1, lock_devices=False) as executor:
        first = executor.run([TrialJob(build(src), cfg.shapes, seed=0, slot=0)])
        old = executor.source.proc
        lineage = executor.renew_lineage()
        fresh = executor.run([TrialJob(build(src), cfg.shapes, seed=k, slot=k, lineage=lineage) for k in (1, 2)])
        assert executor.source.proc is not old and old.poll() is None  # its reserve worker is alive
        later = executor.run([TrialJob(build(src), cfg.shapes, seed=3, slot=3)])
        deadline = time.time() + 30
        while old.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert old.poll() is not None  # the replaced zygote ended with its last worker
        assert executor.run([TrialJob(build(src), cfg.shapes, seed=4, slot=4, lineage=lineage)])[0].records
    lineages = [o.records[0].protocol["worker"]["lineage"] for o in first + fresh + later]
    assert lineages == [0, 1, 1, 0]  # the last one: the old zygote's reserve worker, taken first
    assert all(o.records[0].status is TrialStatus.OK for o in first + fresh + later)


def test_lineages_asked_for_with_nothing_to_run_start_no_zygote(tmp_path: Path, src: Path) -> None:
    # A resumed run whose verifications' fresh trials are all stored asks for a lineage a pass and
    # runs nothing in it: no zygote is started for those. The first trial that needs a newer
    # lineage renews the source once, straight to its lineage.
    cfg = config(tmp_path)
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=0, lock_devices=False) as executor:
        old = executor.source.proc
        asked = [executor.renew_lineage() for _ in range(3)]
        time.sleep(0.3)  # a loop turn or more
        assert executor.source.proc is old and executor.source.lineage == 0
        out = executor.run([TrialJob(build(src), cfg.shapes, seed=1, slot=1, lineage=asked[-1])])
        assert executor.source.proc is not old and executor.source.lineage == asked[-1] == 3
    assert out[0].records[0].protocol["worker"]["lineage"] == 3


def test_a_zygote_that_keeps_dying_is_a_clear_error(tmp_path: Path, src: Path) -> None:
    from bisector.runner.workers import ForkSource, WorkerStartError

    source = ForkSource(dict(os.environ), [], tmp_path)
    try:
        for _ in range(3):
            source.proc.kill()
            source.proc.wait()
            if source.restarts < 2:
                source.start()
        with pytest.raises(WorkerStartError, match="died 3 times"):
            source.start()
    finally:
        source.close()


def test_with_prestart_the_first_renewal_takes_a_zygote_started_with_the_first(tmp_path: Path) -> None:
    # On a GPU host the verification's new lineage waited 8.3 s for its zygote's imports (the H200
    # demo of 2026-12-03): the next zygote is started with the first, and again at each renewal.
    from bisector.runner.workers import ForkSource

    source = ForkSource(dict(os.environ), [], tmp_path, prestart=True)
    plain = ForkSource(dict(os.environ), [], tmp_path)
    try:
        ahead = source._next
        assert ahead is not None and ahead.proc.poll() is None and plain._next is None  # the CPU default: none
        assert source.renew() == 1
        assert source.zygote is ahead and source._next is not None and source._next is not ahead
        worker = source.start()
        assert worker.root == ahead.proc.pid  # forked by the zygote started ahead
    finally:
        source.close()
        plain.close()


def test_workers_of_the_next_lineage_are_forked_ahead_and_serve_its_first_trials(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A verification round asks for a new lineage's trials all at once; forks made then opened the
    # H200 while the device idled (3.8 s on the 389-commit range). Where the next zygote is started
    # ahead (GPU hosts), workers are forked from it ahead too, in the cold start: no trial takes
    # them before the renewal, and the new lineage's first trials run in them.
    from bisector.runner import launch, workers

    def prestarted(kind, env, preload, cwd, *args, **kwargs):
        cwd.mkdir(parents=True, exist_ok=True)
        return workers.ForkSource(env, preload, cwd, *args, **kwargs, prestart=True)

    monkeypatch.setattr(launch, "make_source", prestarted)
    cfg = config(tmp_path)
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=1, lock_devices=False) as executor:
        first = executor.run([TrialJob(build(src), cfg.shapes, seed=k, slot=k) for k in range(3)])
        ahead = executor.source._next
        deadline = time.time() + 60
        while (
            time.time() < deadline
            and sum(w.lineage == workers.AHEAD_OF_RENEWAL and bool(w.ready) for w in executor._idle) < 2
        ):
            time.sleep(0.05)
        forked = {w.root for w in executor._idle if w.lineage == workers.AHEAD_OF_RENEWAL}
        assert forked == {ahead.proc.pid}  # (1 + ahead) forks of the next zygote, ready and unused
        renewed = time.time()
        lineage = executor.renew_lineage()
        fresh = executor.run([TrialJob(build(src), cfg.shapes, seed=k, slot=k, lineage=lineage) for k in (3, 4)])
        assert executor.source.zygote is ahead
    assert [o.records[0].protocol["worker"]["lineage"] for o in first + fresh] == [0, 0, 0, 1, 1]
    assert all(o.timeline.started < renewed for o in fresh)  # forked before the renewal was asked
    assert all(o.records[0].status is TrialStatus.OK for o in first + fresh)


@pytest.mark.parametrize("device", DEVICES)
def test_an_idle_worker_opens_the_one_device_before_its_trial(tmp_path: Path, src: Path, device: str) -> None:
    """With one device an idle worker creates its context while it waits for a trial (executor
    `Prelude`): the trial's record says how long that took; on the CPU there is nothing to open."""
    cfg = config(tmp_path, kind=device)
    with make_executor(cfg, tmp_path / "work", source="fork", lock_devices=False) as executor:
        outcomes = executor.run([TrialJob(build(src), cfg.shapes, seed=s, slot=s) for s in range(2)])
    for outcome in outcomes:
        (rec,) = outcome.records
        assert rec.status is TrialStatus.OK, rec.error
        opened = rec.protocol["worker"]["device_opened_s"]
        assert (opened is None) if device == "cpu" else (opened > 0), rec.protocol["worker"]


def test_a_precompile_only_trial_gets_its_brief_loan_and_never_a_device_section(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prefetches' executor (warmer.PrecompileTrials) lends a setup its brief loan for its
    inputs: it lent nothing before, and on a GPU every prefetch waited for its loan until its time
    limit, compiling nothing (tests/test_warmer.py's GPU test). It still never lends a device section."""
    from bisector.measure.warmer import precompile_executor

    cfg, _ = staged_config(tmp_path, monkeypatch, entry="kern:mm")
    cfg = replace(cfg, protocol=replace(cfg.protocol, timeout_s=60.0))
    with precompile_executor(cfg, tmp_path / "work", 2, source="spawn") as executor:
        outcomes = executor.run([TrialJob(build(src), cfg.shapes, seed=k, slot=k) for k in range(2)])
    for outcome in outcomes:
        ((go, release),) = outcome.timeline.briefs
        assert go <= release and outcome.timeline.go is None and outcome.timeline.want is None, outcome.timeline
        assert outcome.timeline.ended - outcome.timeline.started < 50, "it waited for its loan until its time limit"

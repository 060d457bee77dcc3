"""Kernel time apart from call latency (benches/kernel_time.py, issue 26).

On the CPU, real trials: the fields a trial writes, their way into the store and back, the value
each decision metric takes, and the report's section (on the CPU kernel time is the call's time:
never host-bound). On a CUDA GPU (`-m gpu`): graph capture, its fallback to the profiler for a
subject that synchronizes inside, the profiler path on its own, and a host-bound call flagged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch

from benches import kernel_time, trial
from benches.backends.base import prepared
from benches.kernel_methods import IDLE_START
from bisector.report.calls import calls_section
from bisector.runner.launch import _record
from bisector.search.call_timing import CallFigures, combined, figures, split
from bisector.search.evidence import metric_value
from bisector.search.samples import trial_metric
from bisector.store import Store
from tests.devices import needs_cuda
from tests.report_fixtures import demo_range
from tests.test_trial import spec

COMMON = {
    "tail": "",
    "log": "trial.log",
    "patch_hash": None,
    "started": "2026-12-01T00:00:00+00:00",
    "finished": "2026-12-01T00:00:05+00:00",
    "seconds": 5.0,
    "timeline": {},
    "slot": 0,
    "worker": {},
    "isolation": "sandbox",
}


def test_cpu_trial_stores_kernel_time_latency_and_host_time(tmp_path) -> None:
    out = trial.run(spec(), tmp_path / "out.json")
    assert [p[0] for p in out["phases"]].count("calls") == 2  # one per shape, beside "timed"
    with Store(tmp_path / "s.sqlite") as store:
        store.add_trials("c", [_record("f" * 40, raw, out, COMMON) for raw in out["results"]])
        stored = store.trials("c")
    for raw, rec in zip(out["results"], stored):
        assert raw["kernel_method"] == rec.kernel_method == "process_time_ns"  # one thread: its CPU time
        # on the CPU the kernel is the call: latency and host time are the kernel-time samples
        assert rec.subject_latency_ms == rec.subject_host_ms == rec.subject_ms == tuple(raw["subject_ms"])
        assert rec.control_latency_ms == rec.control_ms and len(rec.subject_ms) == 3
        assert rec.latency_ratio == pytest.approx(raw["ratio_all_reps"])
        assert rec.protocol["latency_calls"] == 1
        assert trial_metric(rec, "ratio") == rec.ratio and trial_metric(rec, "latency_ratio") == rec.latency_ratio
        assert trial_metric(rec, "latency_speed") == pytest.approx(1 / kernel_time.median(rec.subject_ms))
        assert metric_value(rec, "latency_speed") == pytest.approx(rec.subject_tflops, rel=1e-9)
        fig = figures(stored, rec.shape, rec.sha)
        assert fig is not None and fig.trials == 1 and not fig.host_bound and not fig.control_host_bound
        assert fig.kernel_us == fig.latency_us == fig.host_us == pytest.approx(kernel_time.median(rec.subject_ms) * 1e3)
    data = dataclasses.replace(demo_range(), calls=tuple(figures(stored, r.shape, r.sha) for r in stored))
    text = "\n".join(calls_section(data))
    assert "## Kernel time and call latency" in text and "CPU: the call's CPU time" in text
    assert "Latency and host: the kernel's own samples" in text and "back-to-back" not in text  # no batches on a CPU
    assert "host-bound**" not in text and text.count("— (one time)") == 2


def test_metric_names_carry_the_timing() -> None:
    assert combined("ratio", "kernel") == "ratio" and combined("speed", "latency") == "latency_speed"
    assert split("latency_ratio") == ("ratio", "latency") and split("speed") == ("speed", "kernel")


def test_config_timing_selects_the_decision_metric(tmp_path) -> None:
    from bisector.config import load
    from tests.test_bad_input import CONFIG

    path = tmp_path / "c.toml"
    path.write_text(CONFIG.format(repo="/tmp/x") + '[thresholds]\nmetric = "speed"\ntiming = { gemm = "latency" }\n')
    th = load(path).thresholds
    assert (th.timing_of("gemm"), th.timing_of("fa")) == ("latency", "kernel")
    assert (th.decision_of("gemm"), th.decision_of("fa")) == ("latency_speed", "speed")
    path.write_text(CONFIG.format(repo="/tmp/x"))
    assert load(path).thresholds.decision_of("gemm") == "ratio"  # the default: kernel time


def test_a_host_bound_shape_is_said_with_both_figures() -> None:
    data = demo_range()
    sha = data.bad.sha
    fig = CallFigures(
        "gemm/decode",
        sha,
        "cuda_graph",
        kernel_us=15.2,
        latency_us=101.0,
        host_us=98.5,
        control_kernel_us=7.1,
        control_latency_us=12.0,
        control_host_us=6.0,
        trials=3,
    )
    quick = dataclasses.replace(fig, shape="gemm/m8192", kernel_us=1400.0, latency_us=1402.0, host_us=110.0)
    text = "\n".join(calls_section(dataclasses.replace(data, calls=(fig, quick))))
    assert (
        f"**gemm/decode is host-bound** at `{sha[:7]}` (bad): the host takes 98.5 µs a call, the kernel "
        "15.2 µs; an eager caller waits 101 µs a call"
    ) in text
    assert "gemm/m8192 is host-bound" not in text and "| gemm/m8192 | " in text
    assert (
        "CUDA graph" in text
        and "steps tested on kernel time, and on call latency too where host-bound (gemm/decode)" in text
    )


def test_the_latency_sentence_says_how_the_trials_were_timed() -> None:
    """From the trials' records, not the code at hand: a report re-made from a store measured before
    latency batches waited for an idle device must not claim they did."""
    data = demo_range()
    fig = CallFigures("gemm/decode", data.bad.sha, "cuda_graph", 15.2, 101.0, 98.5, trials=3)
    idle = dataclasses.replace(fig, latency_start=IDLE_START)
    assert "each batch begun on an idle device" in "\n".join(calls_section(dataclasses.replace(data, calls=(idle,))))
    for calls in [(fig,), (idle, dataclasses.replace(fig, shape="gemm/m8192"))]:
        text = "\n".join(calls_section(dataclasses.replace(data, calls=calls)))
        assert "begun on an idle device" not in text and "did not record how each batch began" in text


def test_latency_batches_are_sized_by_time() -> None:
    assert kernel_time.batch_calls(0.1) == 50 and kernel_time.batch_calls(100.0) == kernel_time.LATENCY_MIN_CALLS
    assert kernel_time.batch_calls(0.001) == kernel_time.LATENCY_MAX_CALLS
    assert kernel_time.host_bound([0.015], [0.1], "cuda_graph") and not kernel_time.host_bound(
        [0.015], [0.1], "perf_counter_ns"
    )


def test_a_graph_heater_is_sized_from_the_warm_up_calls() -> None:
    assert kernel_time.heat_calls(150.0, [42.0, 15.0]) == 3  # ceil(150 / 57): about 150 ms of both calls
    assert kernel_time.heat_calls(150.0, [400.0, 300.0]) == 1  # at least one call of each
    assert kernel_time.heat_calls(0.0, [1.0]) == kernel_time.heat_calls(150.0, None) == 0  # none asked / unknown
    assert kernel_time.heat_calls(150.0, [float("nan"), 0.0]) == 0


def test_a_call_that_reads_no_more_than_an_empty_event_pair_is_idle() -> None:
    empty = 0.002  # ms
    times = [[0.0150, 0.0160, 0.0155], [0.0021, 0.0030, 0.0025], [0.0035, 0.0036, 0.0034]]
    assert kernel_time.idle_calls(times, empty) == [1, 2]
    assert kernel_time.idle_calls(times, empty, factor=1.0) == []
    assert kernel_time.idle_calls([[0.0050, 0.0052]], empty) == []


# -- on a CUDA GPU -------------------------------------------------------------------------------


def _gemm() -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16),
        torch.randn(2048, 7168, device="cuda", dtype=torch.bfloat16),
    )


def _flush() -> None:
    _FLUSH.zero_()


_FLUSH: torch.Tensor = torch.empty(0)


@pytest.fixture
def flush() -> object:
    global _FLUSH
    _FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    yield _flush
    _FLUSH = torch.empty(0)


def _dispatched(a: torch.Tensor, b: torch.Tensor) -> object:
    """A small GEMM behind ~200 us of Python (no sleep: the host really works)."""

    def call() -> torch.Tensor:
        deadline = time.perf_counter() + 200e-6
        n = 0
        while time.perf_counter() < deadline:
            n += len({"m": a.shape[0], "k": a.shape[1]})
        return a @ b

    return call


def _subject_and_control() -> list[object]:
    a, b = _gemm()
    return [lambda: a @ b, lambda: (a @ b).float()]


@needs_cuda
@pytest.mark.gpu
def test_two_graph_reads_give_every_repetition_from_half_a_graph(flush) -> None:
    fns = _subject_and_control()
    one = kernel_time.graph_times(fns, 7, flush, reads=1)
    two = kernel_time.graph_times(fns, 7, flush, reads=2)  # a graph of 4, both replays read, cut to 7
    assert [len(t) for t in one] == [len(t) for t in two] == [7, 7]
    assert all(x > 0 for t in two for x in t)
    with pytest.raises(ValueError, match="graph reads"):
        kernel_time.graph_times(fns, 7, flush, reads=3)


@needs_cuda
@pytest.mark.gpu
def test_a_heater_replaces_the_unread_replay(flush) -> None:
    fns = _subject_and_control()
    got = kernel_time.gpu_kernel_times(fns, 5, flush, heat=3)
    assert got.method == kernel_time.GRAPH and got.heat_calls == 3
    assert [len(t) for t in got.times] == [5, 5] and all(x > 0 for t in got.times for x in t)
    with pytest.raises(ValueError, match="heater needs reads = 1"):
        kernel_time.graph_times(fns, 5, flush, reads=2, heat=3)


@needs_cuda
@pytest.mark.gpu
def test_a_device_bound_warm_up_stops_after_its_rounds() -> None:
    """Host samples matter where the host may dominate; a call that is all kernel is warmed `rounds`
    times, a short one HOST_SAMPLES times."""
    from benches.timing import HOST_SAMPLES, Clock

    clock = Clock("cuda", 64 << 20)
    big = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    a, b = _gemm()
    clock.warm([lambda: big[0] @ big[1], lambda: a[:1] @ b[:, :64]], rounds=1)  # first use of the clock's stream
    long = clock.warm([lambda: big[0] @ big[1]], rounds=1)
    short = clock.warm([lambda: a[:1] @ b[:, :64]], rounds=1)
    assert long is not None and short is not None and long.device_bound and not short.device_bound
    assert len(long.host_ms[0]) == 1 and len(short.host_ms[0]) == HOST_SAMPLES
    assert len(clock.warm([lambda: big[0] @ big[1]], rounds=2).host_ms[0]) == 2


@needs_cuda
@pytest.mark.gpu
def test_graph_capture_times_kernels_without_the_host(flush) -> None:
    a, b = _gemm()
    fns = [_dispatched(a, b), lambda: a @ b]
    for fn in fns:
        fn()
    got = kernel_time.gpu_kernel_times(fns, 10, flush)
    assert got.method == kernel_time.GRAPH and got.fallback == ""
    assert all(len(t) == 10 and all(0 < x < 0.2 for x in t) for t in got.times)  # a 64x7168x2048 GEMM, not 200 us
    calls = kernel_time.gpu_calls(fns, 3, 20)
    assert len(calls.latency_ms[0]) == 3 and len(calls.host_ms[0]) == 60
    host, kernel = kernel_time.median(calls.host_ms[0]), kernel_time.median(got.times[0])
    assert host is not None and kernel is not None and host > 0.2 > kernel
    assert kernel_time.host_bound(got.times[0], calls.host_ms[0], got.method)
    # cuBLAS: a cheap launch (~10-20 us of host, about its kernel's time at this shape: on the
    # border of host-bound, measured both ways on an H200), far below the dispatch's
    cublas_host = kernel_time.median(calls.host_ms[1])
    assert cublas_host is not None and cublas_host < host / 3


@needs_cuda
@pytest.mark.gpu
def test_a_host_bound_call_s_latency_is_not_hidden_behind_the_other_fn_s_backlog() -> None:
    """A host-bound subject (~200 us of Python, a small GEMM) timed after a control whose batch
    leaves the device busy for milliseconds: each subject batch still reads its host's time per call,
    not its kernel's (its calls queued behind the backlog would run back to back at kernel speed)."""
    a, b = _gemm()
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    fns = [_dispatched(a, b), lambda: big @ big]
    for fn in fns:
        fn()
    calls = kernel_time.gpu_calls(fns, 4, 20)
    host = kernel_time.median(calls.host_ms[0])
    assert host is not None and host > 0.2
    assert min(calls.latency_ms[0]) > 0.8 * host  # every batch, the ones after the control's too


@needs_cuda
@pytest.mark.gpu
def test_a_subject_that_synchronizes_falls_back_to_the_profiler(flush) -> None:
    a, b = _gemm()

    def syncs() -> torch.Tensor:
        c = a @ b
        c[0, 0].item()  # a synchronization: not allowed while a graph is captured
        return c

    got = kernel_time.gpu_kernel_times([syncs, lambda: a @ b], 5, flush)
    assert got.method == kernel_time.PROFILER and "graph capture failed" in got.fallback
    assert all(len(t) == 5 and all(0 < x < 1.0 for x in t) for t in got.times)
    after = kernel_time.gpu_kernel_times([lambda: a @ b], 5, flush)  # the context survived the failed capture
    assert after.method == kernel_time.GRAPH
    assert torch.randn(8, device="cuda").isfinite().all()  # and so did its random draws (a later shape's inputs)


@needs_cuda
@pytest.mark.gpu
def test_profiler_path_sums_each_calls_kernels(flush) -> None:
    a, b = _gemm()
    one = kernel_time.profiler_times([lambda: a @ b], 5, flush)[0]
    two = kernel_time.profiler_times([lambda: (a @ b, a @ b)], 5, flush)[0]
    assert kernel_time.median(two) > 1.5 * kernel_time.median(one)  # both kernels of a call counted


@needs_cuda
@pytest.mark.gpu
def test_cuda_trial_records_the_method_and_latency(tmp_path) -> None:
    latency = dict(spec(device="cuda", control="torch_cuda", flush_mb=64), timing={"gemm": "latency", "fa": "latency"})
    out = trial.run(latency, tmp_path / "out.json")
    for r in out["results"]:
        assert r["status"] == "ok" and r["kernel_method"] in kernel_time.DEVICE_METHODS, r
        assert len(r["subject_latency_ms"]) == 3 and len(r["subject_host_ms"]) == 3 * r["latency_calls"]
        assert r["latency_ratio"] > 0 and r["latency_start"] == IDLE_START
        # inputs drawn and first calls captured before the device was taken; the check ran
        assert r["precompile"] == "captured" and r["check"] == "done" and r["precompile_s"] > 0, r


def test_a_cpu_trial_never_settles(tmp_path) -> None:
    """`settle_ms` waits out a GPU's clock dip; a CPU trial has none to wait for and holds its core."""
    out = trial.run(dict(spec(), settle_ms={"gemm/a": 500.0}), tmp_path / "out.json")
    assert "settle" not in [p[0] for p in out["phases"]] and out["protocol"]["settle_ms"] == {"gemm/a": 500.0}


def test_shapes_with_a_settle_are_timed_first_keeping_their_index() -> None:
    one = dict(spec(), settle_ms={"gemm/b": 200.0, "gemm/a": 0.0})
    assert [(i, s["key"]) for i, s in trial.settled_first(one)] == [(1, "gemm/b"), (0, "gemm/a")]
    assert [s["key"] for _, s in trial.settled_first(spec())] == ["gemm/a", "gemm/b"]  # none: the spec's order


@needs_cuda
@pytest.mark.gpu
def test_a_settle_waits_only_what_is_left_since_the_last_timed_work() -> None:
    from benches.timing import Clock

    clock = Clock("cuda", 1 << 20)
    clock.worked()
    assert 0.08 <= clock.settle(100.0) <= 0.1
    time.sleep(0.12)
    assert clock.settle(100.0) == 0.0  # the trial's other work took as long already
    assert Clock("cpu", 1 << 20).settle(100.0) == 0.0


@needs_cuda
@pytest.mark.gpu
def test_a_cuda_trial_times_the_settled_shape_first_and_settles_before_its_timed_repetitions(tmp_path) -> None:
    """The device idle until `settle_ms` have passed since the device section began (its compile
    and warm-up count), after the warm-up and before the timed repetitions, of the shapes named
    only, and those shapes first (the demo's decode GEMM timed after the big GEMMs read 32 us,
    alone 25 us)."""
    one = spec(device="cuda", control="torch_cuda", flush_mb=64)
    key = one["shapes"][1]["key"]
    out = trial.run(dict(one, settle_ms={key: 400.0}), tmp_path / "out.json")
    device = next(start for name, _, start, _ in out["phases"] if name == "device")
    settles = [(shape, start, end) for name, shape, start, end in out["phases"] if name == "settle"]
    assert [shape for shape, _, _ in settles] == [key] and settles[0][2] - device >= 0.4, settles
    timed = [shape for name, shape, _, _ in out["phases"] if name == "timed"]
    assert timed == [key, one["shapes"][0]["key"]]
    order = [name for name, shape, _, _ in out["phases"] if shape == key and name in ("warmup", "settle", "timed")]
    assert order == ["warmup", "settle", "timed"]
    assert all(r["status"] == "ok" for r in out["results"]), out["results"]


@needs_cuda
@pytest.mark.gpu
def test_cuda_latency_batches_only_where_the_host_matters(tmp_path) -> None:
    """Kernel timing on device-bound shapes: the host's time per call is kept, the latency batches
    (device time) are not run; a host-bound call still gets them."""
    out = trial.run(spec(device="cuda", control="torch_cuda", flush_mb=64), tmp_path / "out.json")
    for r in out["results"]:
        kernel, host = kernel_time.median(r["subject_ms"]), kernel_time.median(r["subject_host_ms"])
        assert r["status"] == "ok" and host is not None and kernel is not None, r
        if host < 0.25 * kernel:
            assert r["subject_latency_ms"] == [] and r["latency_calls"] == 0, r
        else:
            assert len(r["subject_latency_ms"]) == 3, r


@needs_cuda
@pytest.mark.gpu
def test_a_subject_that_cannot_be_captured_compiles_under_the_lock(tmp_path) -> None:
    """Precompile is best effort: a first call that synchronizes is not captured, says why, and the
    trial measures it as before (its first call under the device lock)."""
    (tmp_path / "synckern.py").write_text(
        "import torch\n\ndef mm(a, b, **kwargs):\n    out = a @ b\n    torch.cuda.synchronize()\n    return out\n"
    )
    one = dict(spec(entry="synckern:mm", device="cuda", control="torch_cuda", flush_mb=64), source_dirs=[str(tmp_path)])
    out = trial.run(one, tmp_path / "out.json")
    for r in out["results"]:
        assert r["status"] == "ok" and r["precompile"].startswith("not captured"), r
    assert "precompile" in [p[0] for p in out["phases"]]


@needs_cuda
@pytest.mark.gpu
def test_a_precompile_unmaps_nothing_outside_the_lock(monkeypatch) -> None:
    """The precompile's captures leave the allocator's cache as it was: memory another trial's
    timed section would see unmapped stays mapped until the trial drops it under the device lock
    (torch.cuda.graph empties the cache on entry, and that unmapping disturbed other trials)."""
    import gc

    a, b = _gemm()
    gc.collect()  # earlier tests' graphs: a graph dropped here would release its pool and unmap it
    spare = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    del spare  # cached, not unmapped
    torch.cuda.synchronize()
    emptied: list[int] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    reserved = torch.cuda.memory_reserved()
    staged = trial.Staged({}, prepared(lambda: a @ b), prepared(lambda: torch.mm(a, b)), None)
    how, graphs = trial.precompile(staged)
    assert how["precompile"] == "captured" and len(graphs) == 2, how
    assert emptied == [] and torch.cuda.memory_reserved() >= reserved, (emptied, reserved, torch.cuda.memory_reserved())
    del graphs


HOG = (
    "import sys, torch; torch.cuda.init(); free, _ = torch.cuda.mem_get_info(); "
    "x = torch.empty(max(0, free - int(sys.argv[1])), dtype=torch.uint8, device='cuda'); "
    "torch.cuda.synchronize(); print('held', flush=True); sys.stdin.read()"
)


@contextlib.contextmanager
def device_memory_held(leave_free: int) -> Iterator[None]:
    """Another process holds the device's memory down to `leave_free` bytes free, as the trials set
    up ahead do, until the block ends. In a process of its own: a tensor of this one was still held
    after `del` when earlier tests of the file had run (the next tests' trials saw 8 of 79 GiB free)."""
    hog = subprocess.Popen(
        [sys.executable, "-c", HOG, str(leave_free)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "held"
        yield
    finally:
        hog.kill()
        hog.wait()


@needs_cuda
@pytest.mark.gpu
def test_a_setup_leaves_its_shapes_to_the_device_section_when_the_device_is_short_of_memory(tmp_path) -> None:
    """Trials set up ahead hold their staged inputs until their turn: with the device's free memory
    under the reserve, a setup stages nothing and the trial stages and measures under the lock."""
    _, total = torch.cuda.mem_get_info()
    with device_memory_held(int(0.1 * total)):  # ~10% left free, and no shape drawn to warm the process
        out = trial.run(
            dict(spec(device="cuda", control="torch_cuda", flush_mb=64), warming_floor=0.5), tmp_path / "out.json"
        )
    deferred = {shape for name, shape, _, _ in out["phases"] if name == "deferred"}
    assert deferred == {r["shape"] for r in out["results"]}
    for r in out["results"]:
        assert r["status"] == "ok" and "precompile" not in r, r  # staged and compiled under the lock
    roomy = trial.run(spec(device="cuda", control="torch_cuda", flush_mb=64), tmp_path / "roomy.json")
    assert not any(name == "deferred" for name, *_ in roomy["phases"])
    assert all(r["precompile"] == "captured" for r in roomy["results"])


@needs_cuda
@pytest.mark.gpu
def test_a_setup_short_of_memory_still_makes_the_process_first_calls_off_the_device(tmp_path) -> None:
    """Under the reserve but over the warming floor, the first shape is drawn, its first calls
    captured, and given back at once: the process's first-call work (7-11 s on a real library) is
    done in the setup; under the lock that shape is staged again and its first call is warm."""
    _, total = torch.cuda.mem_get_info()
    with device_memory_held(int(0.2 * total)):  # under the 30% reserve, over the 10% floor
        out = trial.run(spec(device="cuda", control="torch_cuda", flush_mb=64), tmp_path / "out.json")
    names = [(name, shape) for name, shape, _, _ in out["phases"]]
    first, second = (s["key"] for s in spec()["shapes"])
    assert ("warmed", first) in names and ("unmap", None) in names and ("deferred", second) in names
    assert ("deferred", first) not in names
    warmed = next(r for r in out["results"] if r["shape"] == first)
    assert warmed["status"] == "ok" and warmed["precompile"].startswith("warmed, given back: captured"), warmed
    assert warmed["compile_s"] >= warmed["precompile_s"] > 0
    assert all(r["status"] == "ok" for r in out["results"])


@needs_cuda
@pytest.mark.gpu
def test_a_setup_that_staged_past_the_reserve_gives_its_shapes_back(tmp_path) -> None:
    """Setups that pass the reserve together take the device under it with their captures: the one
    that finds the device under it after staging gives its shapes back and stages them under the lock."""
    big = {
        "key": "gemm/big",
        "suite": "gemm",
        "name": "big",
        "params": {"M": 16384, "N": 16384, "K": 16384, "dtype": "bf16", "layout": "nn"},
    }
    one = dict(spec(device="cuda", control="torch_cuda", flush_mb=64), shapes=[big], staging_reserve=0.2)
    _, total = torch.cuda.mem_get_info()
    with device_memory_held(int(0.2 * total) + (1 << 30)):  # 1 GiB over the line
        out = trial.run(one, tmp_path / "out.json")
    names = [(name, shape) for name, shape, _, _ in out["phases"]]
    assert ("inputs", "gemm/big") in names and ("unstaged", "gemm/big") in names and ("unmap", None) in names
    (r,) = out["results"]
    assert r["status"] == "ok" and "precompile" not in r, r


@needs_cuda
@pytest.mark.gpu
def test_a_launcher_bound_to_another_stream_is_an_error_not_a_measurement(flush) -> None:
    """A call whose kernel goes to a stream fixed when it was prepared (FlyDSL's launcher took the
    stream of that moment) runs outside the timing graph's side stream: its events hold no work."""
    from benches.backends.flydsl import on_current_stream

    a, b = _gemm()
    bound = torch.cuda.Stream()
    out = torch.empty(64, 7168, device="cuda", dtype=torch.bfloat16)

    def launch(x, y, o, stream):
        with torch.cuda.stream(stream):
            torch.matmul(x, y, out=o)

    stale = lambda: launch(a, b, out, bound)  # noqa: E731 - the stream fixed in advance
    with pytest.raises(kernel_time.NoDeviceWork, match="outside the timed stream"):
        kernel_time.gpu_kernel_times([lambda: a @ b, stale], 5, flush)
    current = on_current_stream(launch, (a, b, out))  # the stream current at each call
    got = kernel_time.gpu_kernel_times([lambda: a @ b, current], 5, flush)
    assert got.method == kernel_time.GRAPH
    assert kernel_time.idle_calls(got.times, kernel_time.empty_pair_ms(torch.cuda.Stream())) == []
    print(
        f"empty event pair {kernel_time.empty_pair_ms(torch.cuda.Stream()) * 1e3:.2f} us; "
        f"GEMM {sorted(got.times[1])[2] * 1e3:.1f} us"
    )

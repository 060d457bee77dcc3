"""Kernel time apart from call latency, for calls whose host-side dispatch may outlast their kernels.

Why: a short kernel (10-20 us) behind a Python dispatch of ~100 us, timed by "flush, event, call,
event", reads the kernel when the launch reaches the queue before the flush ends and the host's
time when it arrives later: on an H200 one commit's trials read 22 us or 150 us by the luck of the
process (/work/shared/H200-NOTES.md, issue 26). Here the three are measured apart:

- kernel time, cold cache, host out of the loop. CUDA: every repetition of subject and control
  (flush, start event, call, end event, interleaved as before) captured once into one CUDA graph
  and replayed, the events being *external* ones (`torch.cuda.Event(external=True)`: event-record
  nodes inside the graph, torch >= 2.8), so each repetition's pair holds the call's kernels and
  nothing of the host. Chosen over "graph of N x (flush + call) minus graph of N x flush" because
  it keeps one sample per repetition and does not subtract two ~150 us flushes to get 10 us, and
  over a graph of one call replayed per repetition because a graph launch still leaves its own
  device-side gap inside the events. Where capture fails (the subject synchronizes, calls
  `.item()`, allocates outside torch, launches on another stream, or this torch / ROCm cannot time
  events inside a graph: pytorch issue 168715), the same repetitions run eagerly under
  `torch.profiler` and each call's kernel time is the sum of its kernels' device durations (CUPTI on
  NVIDIA, roctracer / rocprofiler through the same kineto API on ROCm: unrun here). Where that fails
  too, the old event loop ("device_events"). The method is recorded; subject and control always
  share one, so their ratio compares like with like.
- call latency: back-to-back calls without a flush, one event pair around a batch, the launch
  queue kept ahead (what an eager caller sees per call);
- host time: `perf_counter` around each of those Python calls, no synchronization.

On the CPU the kernel is the call: kernel time is the cold call time and latency and host time are
the same samples (`cpu_calls`).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from benches.kernel_methods import DEVICE_METHODS, EVENTS, GRAPH, IDLE_START, PROFILER, median

CALL_PREFIX = "bisector.call"
LATENCY_BATCH_MS = 5.0  # device or host time a latency batch aims at
LATENCY_MIN_CALLS, LATENCY_MAX_CALLS = 2, 200

Fn = Callable[[], Any]


class KernelTimingFailed(RuntimeError):
    """One kernel-timing method could not time these calls; the message says why."""


class NoDeviceWork(RuntimeError):
    """A timed call left no more work between its events than an empty event pair: its kernels ran
    on a stream other than the one timed (a launcher bound to a stream fixed when it was prepared)
    or not at all. An error of the call, never a measurement, and no reason to try another method."""


IDLE_FACTOR = 2.0  # a call reading at most this many empty event pairs did no work on the timed stream


def idle_calls(times: Sequence[Sequence[float]], empty_ms: float, factor: float = IDLE_FACTOR) -> list[int]:
    """The fns whose median time is no more than `factor` times an empty event pair's, `empty_ms`."""
    return [i for i, per in enumerate(times) if per and statistics.median(per) <= factor * empty_ms]


_empty_pair: dict[int, float] = {}


def empty_pair_ms(stream: Any, pairs: int = 16) -> float:
    """What an event pair with nothing between reads inside a CUDA graph on this device (median of
    `pairs`, the second replay), measured once per process and device."""
    device = torch.cuda.current_device()
    if device not in _empty_pair:
        events = _events(pairs, external=True)
        graph = torch.cuda.CUDAGraph()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.graph(graph, stream=stream):
            for start, end in events:
                start.record()
                end.record()
        for _ in range(2):
            graph.replay()
        torch.cuda.synchronize()
        _empty_pair[device] = statistics.median(s.elapsed_time(e) for s, e in events)
        del graph
    return _empty_pair[device]


@dataclass(frozen=True)
class KernelTimes:
    method: str  # GRAPH | PROFILER | EVENTS, or the CPU clock's kind
    times: list[list[float]]  # ms per fn per repetition, cold cache
    fallback: str = ""  # why a better method was not used ("" when the first choice worked)
    faults: list[list[int]] | None = None  # CPU: minor page faults per fn per repetition (benches/timing.py)
    heat_calls: int = 0  # GRAPH: untimed calls of each fn ahead of the repetitions (graph_times' `heat`)
    set_aside: tuple[list[list[float]], ...] = ()  # earlier reads of the same calls, disturbed (benches/trial.py)


@dataclass(frozen=True)
class CallTimes:
    latency_ms: list[list[float]]  # per fn, per batch: ms per call, back to back
    host_ms: list[list[float]]  # per fn, per call: the host's own time
    calls: int  # calls per batch
    # how each batch began: "idle" (the device synchronized first: an eager caller's calls); "" where
    # latency is not batched apart (the CPU's kernel samples). Reports say how their trials were timed.
    start: str = ""


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _events(n: int, external: bool) -> list[tuple[Any, Any]]:
    kwargs = {"enable_timing": True, **({"external": True} if external else {})}
    return [(torch.cuda.Event(**kwargs), torch.cuda.Event(**kwargs)) for _ in range(n)]


def _timed_reps(fns: Sequence[Fn], reps: int, flush: Fn, events: list[list[tuple[Any, Any]]]) -> None:
    """Subject and control in turn, `reps` times: flush, start event, call, end event (queued only)."""
    for r in range(reps):
        for per_fn, fn in zip(events, fns):
            flush()
            start, end = per_fn[r]
            start.record()
            fn()
            end.record()


@contextlib.contextmanager
def rng_kept_on_failure() -> Iterator[None]:
    """A capture that fails (a subject that synchronizes) leaves the default CUDA generator marked as
    capturing: torch ends its capture in `capture_end`, which raises before the generator's epilogue,
    and every random draw after it in the process raised "Offset increment outside graph capture"
    (a later shape's inputs; seen on the H200). The generator's state is cloned before and put back
    on failure (torch >= 2.4; nothing on older ones)."""
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    saved = gen.clone_state() if hasattr(gen, "clone_state") else None
    try:
        yield
    except BaseException:
        if saved is not None:
            gen.graphsafe_set_state(saved)
        raise


def graph_times(
    fns: Sequence[Fn], reps: int, flush: Fn, reads: int = 1, stream: Any = None, warmed: bool = False, heat: int = 0
) -> list[list[float]]:
    """ms per fn per repetition: every (flush, event, call, event) captured into one CUDA graph and
    replayed twice. `reads` = 1: the graph holds `reps` repetitions and only the second replay is read
    (the first uploads the graph and brings a power-bound kernel to a steady clock); 2: it holds half
    of them and both replays are read, half the device time for the same samples
    (studies/graph_reads.py measures what that costs in trial noise). `heat` > 0 (with `reads` = 1):
    the graph starts with `heat` untimed calls of each fn in turn and is replayed once: a heater sized
    to the clock's settling time instead of a whole unread replay (studies/lean_timing.py).
    `stream`, `warmed`: the capture stream, on which the trial's warm-up calls already ran (else each
    fn is called once on it first)."""
    if reads not in (1, 2):
        raise ValueError(f"graph reads must be 1 or 2, got {reads}")
    if heat < 0 or (heat and reads != 1):
        raise ValueError(f"a graph's heater needs reads = 1 and heat >= 0, got heat {heat} with reads {reads}")
    per_graph = math.ceil(reps / reads)
    replays = 1 if heat else 2
    try:
        events = [_events(per_graph, external=True) for _ in fns]
    except TypeError as exc:  # torch < 2.8: no external events
        raise KernelTimingFailed(f"this torch cannot time events inside a graph ({_why(exc)})") from None
    stream = stream if stream is not None else torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    times: list[list[float]] = [[] for _ in fns]
    try:
        if not warmed:
            # Warm up on the capture stream (lazy per-stream state such as cuBLAS workspaces), as
            # torch.cuda.graph's documentation asks.
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for fn in fns:
                    fn()
            torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with rng_kept_on_failure(), torch.cuda.graph(graph, stream=stream):
            for _ in range(heat):
                for fn in fns:
                    fn()
            _timed_reps(fns, per_graph, flush, events)
        for replay in range(replays):
            graph.replay()
            torch.cuda.synchronize()
            if replay >= replays - reads:
                for out, per_fn in zip(times, events):
                    out.extend(s.elapsed_time(e) for s, e in per_fn)
        times, why = [t[:reps] for t in times], ""
    except Exception as exc:  # noqa: BLE001 - any failure to capture or read means: another method
        why = _why(exc)
    del graph
    if why:
        torch.cuda.synchronize()  # a broken context raises here: the shape records a crash
        raise KernelTimingFailed(f"CUDA graph capture failed: {why}")
    if not all(t > 0 and math.isfinite(t) for per_fn in times for t in per_fn):
        raise KernelTimingFailed("CUDA graph events gave non-positive times")
    empty = empty_pair_ms(stream)
    idle = idle_calls(times, empty)
    if idle:
        got = statistics.median(times[idle[0]])
        raise NoDeviceWork(
            f"timed call {idle[0]} read {got * 1e3:.2f} us, no more than {IDLE_FACTOR:g} empty event "
            f"pairs ({empty * 1e3:.2f} us): its kernels ran outside the timed stream (a launcher "
            "bound to a stream fixed in advance?) or not at all"
        )
    return times


def _device_total_us(event: Any) -> float:
    """Device time of a profiled range and everything launched under it, in us (the attribute was
    `cuda_time_total` before torch 2.4)."""
    for name in ("device_time_total", "cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def profiler_times(fns: Sequence[Fn], reps: int, flush: Fn) -> list[list[float]]:
    """ms per fn per repetition: the repetitions run eagerly, each call inside a named
    `record_function` range; a call's kernel time is the device time of every kernel (and memcpy /
    memset) launched inside its range, summed (gaps between its kernels left out)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    names = [[f"{CALL_PREFIX}.{i}.{r}" for r in range(reps)] for i in range(len(fns))]
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for r in range(reps):
                for i, fn in enumerate(fns):
                    flush()
                    with record_function(names[i][r]):
                        fn()
            torch.cuda.synchronize()
        found: dict[str, float] = {}
        for event in prof.events():
            if event.name.startswith(CALL_PREFIX) and event.device_type == DeviceType.CPU:
                found[event.name] = found.get(event.name, 0.0) + _device_total_us(event)
    except Exception as exc:  # noqa: BLE001 - no CUPTI / roctracer, or a profiler error
        torch.cuda.synchronize()
        raise KernelTimingFailed(f"torch.profiler failed: {_why(exc)}") from None
    missing = [n for per in names for n in per if found.get(n, 0.0) <= 0]
    if missing:
        raise KernelTimingFailed(
            f"torch.profiler saw no device time in {len(missing)} of {reps * len(fns)} calls (first: {missing[0]})"
        )
    return [[found[n] / 1e3 for n in per] for per in names]


def event_times(fns: Sequence[Fn], reps: int, flush: Fn) -> list[list[float]]:
    """The old protocol: flush, event, call, event, all queued and read once. Holds the host's
    time whenever a call's launch reaches the device after its flush has ended."""
    events = [_events(reps, external=False) for _ in fns]
    _timed_reps(fns, reps, flush, events)
    torch.cuda.synchronize()
    return [[s.elapsed_time(e) for s, e in per_fn] for per_fn in events]


METHODS: dict[str, Callable[[Sequence[Fn], int, Fn], list[list[float]]]] = {
    GRAPH: graph_times,
    PROFILER: profiler_times,
    EVENTS: event_times,
}


def gpu_kernel_times(
    fns: Sequence[Fn],
    reps: int,
    flush: Fn,
    order: Sequence[str] = (GRAPH, PROFILER, EVENTS),
    graph_reads: int = 1,
    stream: Any = None,
    warmed: bool = False,
    heat: int = 0,
) -> KernelTimes:
    """The first method in `order` that times every fn; `fallback` says why the earlier ones did not.
    `graph_reads`, `stream`, `warmed`, `heat`: the graph's (graph_times)."""
    why: list[str] = []
    for method in order:
        try:
            if method == GRAPH:
                times = graph_times(fns, reps, flush, graph_reads, stream, warmed, heat)
                return KernelTimes(method, times, "; ".join(why), heat_calls=heat)
            return KernelTimes(method, METHODS[method](fns, reps, flush), "; ".join(why))
        except KernelTimingFailed as exc:
            why.append(str(exc))
    raise KernelTimingFailed("; ".join(why) or "no kernel-timing method asked for")


def heat_calls(heat_ms: float, call_ms: Sequence[float] | None) -> int:
    """Untimed calls of each fn ahead of a timing graph's repetitions for about `heat_ms` of device
    time, from one synchronized call of each (the warm-up's); 0 (a whole unread replay instead) when
    no heater is asked for or the calls' times are unknown."""
    per_round = sum(c for c in call_ms or () if c > 0 and math.isfinite(c))
    if heat_ms <= 0 or per_round <= 0:
        return 0
    return max(1, math.ceil(heat_ms / per_round))


def batch_calls(per_call_ms: float, budget_ms: float = LATENCY_BATCH_MS) -> int:
    """Calls per latency batch: about `budget_ms` of work, at least 2 (back to back), at most 200."""
    if not per_call_ms > 0 or not math.isfinite(per_call_ms):
        return LATENCY_MAX_CALLS
    return max(LATENCY_MIN_CALLS, min(LATENCY_MAX_CALLS, int(budget_ms / per_call_ms)))


def gpu_calls(fns: Sequence[Fn], batches: int, calls: int) -> CallTimes:
    """Per fn, `batches` batches of `calls` back-to-back calls (subject and control batches in
    turn), each begun on an idle device and nothing synchronized inside it: latency per call from one
    event pair per batch, host time per call from perf_counter. Begun behind the other fn's batch,
    a batch's first calls were queued while the device still ran that backlog and then ran at kernel
    speed: on a host-bound RMSNorm (H100, 128 trials; 477 us of host a call, 154 us of kernels) the
    batch begun on an idle device read 751 us a call and the batches behind the control's 278 us,
    below the host's own time, and every latency pair of its range ended undecided."""
    events = [_events(batches, external=False) for _ in fns]
    host: list[list[float]] = [[] for _ in fns]
    for b in range(batches):
        for i, fn in enumerate(fns):
            start, end = events[i][b]
            torch.cuda.synchronize()  # an eager caller's calls, not the other fn's backlog
            start.record()
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                fn()
                host[i].append((time.perf_counter_ns() - t0) / 1e6)
            end.record()
    torch.cuda.synchronize()
    latency = [[s.elapsed_time(e) / calls for s, e in per_fn] for per_fn in events]
    return CallTimes(latency, host, calls, start=IDLE_START)


def cpu_calls(kernel_ms: Sequence[Sequence[float]]) -> CallTimes:
    """On the CPU the kernel is the call: latency and host time are the kernel-time samples."""
    return CallTimes([list(t) for t in kernel_ms], [list(t) for t in kernel_ms], 1)


def host_bound(kernel_ms: Sequence[float], host_ms: Sequence[float], method: str) -> bool:
    """Whether the host's own time per call (median) exceeds the kernel time (median). Only a
    method that keeps the host out of the kernel time can say so; on the CPU the two are one."""
    kernel, host = median(kernel_ms), median(host_ms)
    return method in DEVICE_METHODS and kernel is not None and host is not None and host > kernel

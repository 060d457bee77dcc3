"""Cold-protocol timing: first call (compile) apart, warm-up, a cache flush before every timed call,
subject and control interleaved (S C S C ...), one event pair per call, every raw sample kept.

The flush buffer is sized from the device: at least 2x (L2 + Infinity Cache) on GPUs (the MALL of
MI300/MI355X is 256 MiB), never below 256 MiB; on CPU a few times the last-level cache.
"""

from __future__ import annotations

import glob
import math
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from benches import kernel_time

MiB = 1 << 20
GPU_FLOOR = 256 * MiB
INFINITY_CACHE = {"gfx942": 256 * MiB, "gfx950": 256 * MiB}  # MI300X / MI325X, MI350X / MI355X
CPU_CAP = 512 * MiB


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG") or 0) * mult


def cpu_llc_bytes() -> int:
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as fh:
                sizes.append(_parse_size(fh.read()))
        except (OSError, ValueError):
            continue
    return max(sizes, default=32 * MiB)


def gpu_cache_bytes(index: int = 0) -> tuple[int, int]:
    """(L2, Infinity Cache) in bytes for a visible GPU."""
    props = torch.cuda.get_device_properties(index)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    arch = str(getattr(props, "gcnArchName", "")).split(":")[0]
    ic = INFINITY_CACHE.get(arch, 0) if torch.version.hip else 0
    return l2, ic


def flush_bytes(device: str, flush_mb: int = 0) -> int:
    if flush_mb > 0:
        return flush_mb * MiB
    if device == "cpu":
        return min(3 * cpu_llc_bytes(), CPU_CAP)
    l2, ic = gpu_cache_bytes()
    return max(2 * (l2 + ic), GPU_FLOOR)


CPU_CLOCKS = ("cpu", "wall")


HOST_SHARE = 0.25  # latency batches run where the host's time per call is at least this share of the kernel's
HOST_SAMPLES = 3
DEVICE_BOUND_MS = 1.0  # shorter calls are never device-bound: their latency is measured apart


@dataclass
class Clock:
    """Times calls on one device: CUDA/HIP events on a GPU; on the CPU the process's CPU time where
    torch runs one thread (`cpu_clock="cpu"`, the default), else wall time.

    Why CPU time: on a core shared with another process the OS gives each a slice of ~4 ms in turn,
    and wall time counts the other's slices: beside two busy loops on the 2-core CI VM a 2 ms control
    call read 2, 6, 10 or 14 ms (one slice lost or not), so each repetition's ratio took one of a few
    levels and a trial's median fell on one or the other by how the calls met the slices; a build's
    ratio moved 30-60% with no change in its code, and the CPU demo end to end missed a planted step
    (studies/results/cpu-slow-builds.txt, part 11). CPU time leaves those slices out: the ratio's
    trial-to-trial spread 2-5% against 10-37% under the same load, about equal on quiet cores
    (studies/results/cpu-clock-noise.txt). With several threads CPU time sums them: wall time then.
    Page faults are kernel time charged to the process, so a call that faults reads slow on either
    clock; each trial records them (`timed_faults`)."""

    device: str
    flush_size: int
    cpu_clock: str = "cpu"
    _buf: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        if self.cpu_clock not in CPU_CLOCKS:
            raise ValueError(f"cpu_clock must be one of {CPU_CLOCKS}, got {self.cpu_clock!r}")
        dev = "cpu" if self.device == "cpu" else "cuda"
        self._buf = torch.empty(self.flush_size, dtype=torch.int8, device=dev)
        self.gpu = dev == "cuda"
        self._cpu_time = not self.gpu and self.cpu_clock == "cpu" and torch.get_num_threads() == 1
        self._now = time.process_time_ns if self._cpu_time else time.perf_counter_ns
        # GPU: the warm-up runs on the stream the timing graph is captured on, so that the graph
        # needs no warm-up call of its own (one call of each fn fewer per shape).
        self._stream = torch.cuda.Stream() if self.gpu else None
        self._warmed = False
        # when the device last ran timed work: the clock is made as the trial takes the device, whose
        # last user synchronized before it let go
        self._worked = time.perf_counter()

    def settle(self, ms: float) -> float:
        """GPU: leave the device idle until `ms` have passed since its last timed work (this trial's
        shape before, or the trial that held the device before it); the seconds it waited. A short
        kernel timed in the clock dip a heavy one leaves reads slow (config.Protocol.settle_ms);
        what the trial did meanwhile (its compile, check and warm-up) counts toward the wait."""
        left = ms / 1000.0 - (time.perf_counter() - self._worked) if self.gpu and ms > 0 else 0.0
        if left <= 0:
            return 0.0
        torch.cuda.synchronize()
        time.sleep(left)
        return left

    def worked(self) -> None:
        """Timed work on the device ended now (`settle` counts from here)."""
        self._worked = time.perf_counter()

    @property
    def kind(self) -> str:
        if self.gpu:
            return "device_events"
        return "process_time_ns" if self._cpu_time else "perf_counter_ns"

    @property
    def host_timer(self) -> str:
        """This clock's host timer as `module.function` in seconds, for a tool that times calls
        itself (pytest-benchmark's `--benchmark-timer`): CPU time where the clock reads it."""
        return "time.process_time" if self._cpu_time else "time.perf_counter"

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def flush(self) -> None:
        self._buf.zero_() if self.gpu else self._buf.fill_(1)

    def warm(self, fns: list[Callable[[], Any]], rounds: int) -> HostShare | None:
        """At least `rounds` calls of each fn in turn, untimed for the kernel; on a GPU on the capture
        stream, each call launched on an idle queue and waited for, so the same calls give the host's
        own time per call and the synchronized call's time (`HostShare`; None on the CPU, where the
        call is the kernel). Up to HOST_SAMPLES rounds, but a round that shows every call
        device-bound ends it once `rounds` are done: its host time only says the kernel dominates,
        and two more rounds were 108 ms of device time a trial on the H200 demo's attention after
        its -60% step (the timing graph's own heater, not the warm-up, brings the clock to steady)."""
        if not self.gpu:
            for _ in range(rounds):
                for fn in fns:
                    fn()
            return None
        host: list[list[float]] = [[] for _ in fns]
        calls: list[list[float]] = [[] for _ in fns]
        self.sync()
        with torch.cuda.stream(self._stream):
            for done in range(1, max(rounds, HOST_SAMPLES, 1) + 1):
                for i, fn in enumerate(fns):
                    t0 = time.perf_counter_ns()
                    fn()
                    host[i].append((time.perf_counter_ns() - t0) / 1e6)
                    self.sync()
                    calls[i].append((time.perf_counter_ns() - t0) / 1e6)
                share = HostShare(host, [statistics.median(c) for c in calls])
                if done >= rounds and share.device_bound:
                    break
        self._warmed = True
        return share

    def wall(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        """One synchronized call: (result, seconds). Used for the first (compiling) call."""
        self.sync()
        start = time.perf_counter()
        result = fn()
        self.sync()
        return result, time.perf_counter() - start

    def interleaved(
        self, fns: list[Callable[[], Any]], reps: int, flush: bool = True
    ) -> tuple[list[list[float]], list[list[int]]]:
        """CPU: ms per call for each fn, called in turn `reps` times, each after a flush, and the
        minor page faults of each call (`minor_faults`). A GPU's calls are timed by
        benches/kernel_time.py."""
        times: list[list[float]] = [[] for _ in fns]
        faults: list[list[int]] = [[] for _ in fns]
        for _ in range(reps):
            for i, fn in enumerate(fns):
                if flush:
                    self.flush()
                f0 = minor_faults()
                t0 = self._now()
                fn()
                times[i].append((self._now() - t0) / 1e6)
                faults[i].append(minor_faults() - f0)
        return times, faults

    def kernel(
        self,
        fns: list[Callable[[], Any]],
        reps: int,
        graph_reads: int = 1,
        heat_ms: float = 0.0,
        host: HostShare | None = None,
        flush: bool = True,
    ) -> kernel_time.KernelTimes:
        """Cold-cache kernel time per call with the host out of the loop (benches/kernel_time.py):
        on a GPU from a CUDA graph, else the profiler, else events; on the CPU the call's time.
        Device-bound calls keep the graph too: its first replay brings a power-bound kernel to a
        steady clock before the read one. Plain events in one pass (tried for calls of 1 ms or more)
        caught GEMM 8192^3 switching clocks between the subject's and the control's repetitions:
        its ratio's trial noise went from 0.5% to 4.2% on the H200 demo, attention's from 1.1% to
        1.3% (studies/results/h200-timing-method.txt), which cost more trials than the pass saved.
        `heat_ms` (with one graph read): the graph's heater instead of its unread first replay, sized
        from the warm-up's synchronized calls (`host`). `flush` False: the cache left warm between
        calls (a suite's `cache = "warm"`, benches/warm_cache.py)."""
        if self.gpu:
            warmed, self._warmed = self._warmed, False  # a warm-up serves the next shape's graph only
            heat = kernel_time.heat_calls(heat_ms, host.call_ms if host else None) if graph_reads == 1 else 0
            return kernel_time.gpu_kernel_times(
                fns,
                reps,
                self.flush if flush else _no_flush,
                graph_reads=graph_reads,
                stream=self._stream,
                warmed=warmed,
                heat=heat,
            )
        times, faults = self.interleaved(fns, reps, flush)
        return kernel_time.KernelTimes(self.kind, times, faults=faults)

    def calls(
        self,
        fns: list[Callable[[], Any]],
        kernel: kernel_time.KernelTimes,
        batches: int,
        host: HostShare | None = None,
        always: bool = True,
    ) -> kernel_time.CallTimes:
        """The host's time per call and the latency of back-to-back calls beside the kernel time (on
        the CPU the same samples). The latency batches cost device time (0.7 s a trial on the H200
        demo's attention), so unless `always` they run only where the call is not device-bound:
        elsewhere the latency is the kernel time and only the host's time is kept (the report's
        host-bound figures need nothing more)."""
        if not self.gpu:
            return kernel_time.cpu_calls(kernel.times)
        if host is None:
            raise ValueError("a GPU's call latency needs the host samples of its warm-up (Clock.warm)")
        if not always and host.device_bound:
            return kernel_time.CallTimes([[] for _ in fns], host.host_ms, 0)
        slowest = max((kernel_time.median(t) or 0.0) for t in kernel.times)
        # a host-bound call is sized by its host time
        return kernel_time.gpu_calls(fns, batches, kernel_time.batch_calls(max(slowest, max(host.call_ms))))


def _no_flush() -> None:
    """The cache left as the last call left it."""


@dataclass(frozen=True)
class HostShare:
    """Per fn: the host's own time per call (ms, samples) and a synchronized call's time (ms, median)."""

    host_ms: list[list[float]]
    call_ms: list[float]

    @property
    def device_bound(self) -> bool:
        """Every fn's call takes at least DEVICE_BOUND_MS and its host time is under HOST_SHARE of
        it: the kernel dominates, and back-to-back latency would only repeat the kernel time. A
        synchronized call of a few microseconds is mostly launch and synchronization, which says
        nothing of its kernel (an H200 read a 3 us GEMM as 50 us), so short calls are never so."""
        return all(
            c >= DEVICE_BOUND_MS and statistics.median(h) < HOST_SHARE * c for h, c in zip(self.host_ms, self.call_ms)
        )


def minor_faults() -> int:
    """This thread's minor page faults so far. A CPU call that faults on every use of its temporaries
    (memory handed back to the kernel and mapped afresh each time) reads several times its own
    speed: kept per call, so that a trial shows it (studies/cpu_slow_builds.py)."""
    return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_minflt


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else float("nan")


DISTURBED = 0.10  # a peak-clock ratio this far from the fastest calls' ratio: calls disturbed one by one


def device_ratio(subject_ms: Sequence[float], control_ms: Sequence[float]) -> tuple[float, bool]:
    """(subject/control speed ratio on a GPU, whether its repetitions were disturbed).

    `peak_clock_ratio`, unless it is more than DISTURBED from the ratio of the two sides' fastest
    calls: then single calls were slowed, now the subject's, now the control's (another process's
    work time-sliced in: 1.4 ms calls read 1.8-6.5 ms in alternate repetitions), and the control's
    slow calls misled the clock anchor; the fastest call of each side is the undisturbed one. A
    clock drop slows both sides of a pair alike and leaves the two ratios together. On the raw
    repetitions of recorded H200 demo stores this cut a square GEMM's trials far off their build's
    median about fourfold, the median unchanged (studies/ratio_rules.py)."""
    peak = peak_clock_ratio(subject_ms, control_ms)
    fast_s, fast_c = (
        min((s for s in subject_ms if s > 0), default=0.0),
        min((c for c in control_ms if c > 0), default=0.0),
    )
    if not (fast_s > 0 and fast_c > 0) or not math.isfinite(peak):
        return peak, False
    fastest = fast_c / fast_s
    if abs(peak / fastest - 1.0) > DISTURBED:
        return fastest, True
    return peak, False


def peak_clock_ratio(
    subject_ms: Sequence[float], control_ms: Sequence[float], tolerance: float = 0.02, at_least: int = 3
) -> float:
    """Median subject/control speed ratio over the repetitions where the control ran at full clock.

    On the H200 a GEMM at 8192^3 is power-bound: after a few repetitions the clock drops and both
    kernels slow to the same power-limited speed, so their ratio drifts towards 1 (measured: 0.984
    at full clock, 0.999 throttled), which alone gave a 0.7% trial-to-trial ratio CV. The control is
    the clock probe: we keep the pairs whose control time is within `tolerance` of its
    `at_least`-th fastest repetition, as nvbench keeps only differences that hold at the same
    clock. Re-analysing the 12+12 recorded H200 trials of studies/results/h200-harness-noise.txt
    this gives ratio CV 0.13% (GEMM, was 0.70%) and 0.44% (attention, was 0.27%)."""
    pairs = sorted(((c, s) for s, c in zip(subject_ms, control_ms) if s > 0 and c > 0))
    if not pairs:
        return float("nan")
    # Anchor on the at_least-th fastest control, not the fastest: one early outlier must not decide.
    anchor = pairs[min(at_least, len(pairs)) - 1][0]
    keep = [p for p in pairs if p[0] <= anchor * (1 + tolerance)]
    return statistics.median(c / s for c, s in keep)

"""The report's "Kernel time and call latency" section: per shape, at the range's ends, the kernel
time (cold cache, host out of the loop), the latency of back-to-back calls and the host's own time
per call, the control's beside them, and a plain line for every shape whose calls are host-bound
(the host's time per call over the kernel's), with both figures. Pure: reads ReportData.calls.
"""

from __future__ import annotations

from benches.kernel_methods import DEVICE_METHODS, EVENTS, IDLE_START
from bisector.report.data import ReportData
from bisector.search.call_timing import CallFigures, split

METHOD_WORDS = {
    "cuda_graph": "CUDA graph",
    "profiler": "profiler (kernel durations summed per call)",
    "device_events": "events around each call (host included when it is slower)",
    "perf_counter_ns": "CPU: the call's wall time",
    "process_time_ns": "CPU: the call's CPU time",
}


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _where(data: ReportData, sha: str) -> str:
    role = " (good)" if sha == data.good.sha else " (bad)" if sha == data.bad.sha else ""
    return f"`{sha[:7]}`{role}"


def timing_words(data: ReportData) -> str:
    """Which time each suite's steps were tested on (and call latency too where a shape is host-bound)."""
    per: dict[str, str] = {}
    for shape in data.shapes:
        per.setdefault(shape.split("/", 1)[0], split(data.metric_of(shape))[1])
    if len(set(per.values())) == 1:
        words = f"steps tested on {'call latency' if next(iter(per.values())) == 'latency' else 'kernel time'}"
    else:
        words = "steps tested on " + ", ".join(
            f"{s}: {'call latency' if t == 'latency' else 'kernel time'}" for s, t in per.items()
        )
    bound = sorted({f.shape for f in data.calls if f.host_bound and per.get(f.shape.split("/", 1)[0]) != "latency"})
    return words + (f", and on call latency too where host-bound ({', '.join(bound)})" if bound else "")


def host_bound_line(f: CallFigures, data: ReportData) -> str:
    return (
        f"- **{f.shape} is host-bound** at {_where(data, f.sha)}: the host takes {f.host_us:.4g} µs a call, "
        f"the kernel {f.kernel_us:.4g} µs; an eager caller waits {_us(f.latency_us)} µs a call, a CUDA-graph "
        "caller the kernel time."
    )


def _batch_words(data: ReportData) -> str:
    """How the trials' latency batches began, as their records say (not as this code would time them)."""
    if all(f.latency_start == IDLE_START for f in data.calls if f.latency_us is not None):
        return "Latency: back-to-back calls, each batch begun on an idle device."
    return (
        "Latency: back-to-back calls in batches; these trials did not record how each batch began (timed "
        "before batches waited for an idle device, a batch's first calls could run behind the other "
        "function's backlog and read low)."
    )


def calls_section(data: ReportData) -> list[str]:
    if not data.calls:
        return []
    methods = sorted({f.method for f in data.calls})
    latency = (
        _batch_words(data) + " Host: the Python call's own time, not synchronized."
        if any(m in (*DEVICE_METHODS, EVENTS) for m in methods)
        else "Latency and host: the kernel's own samples (on the CPU the call is the kernel)."
    )
    lines = [
        "## Kernel time and call latency",
        "",
        f"Per call, µs, median over each commit's trials; {timing_words(data)}. Kernel: cold cache, the host "
        f"out of the loop ({'; '.join(METHOD_WORDS.get(m, m) for m in methods)}). {latency}",
        "",
    ]
    lines += [host_bound_line(f, data) for f in data.calls if f.host_bound]
    lines += [
        f"- the control of {f.shape} is host-bound at {_where(data, f.sha)} too: host "
        f"{f.control_host_us:.4g} µs, kernel {f.control_kernel_us:.4g} µs a call."
        for f in data.calls
        if f.control_host_bound
    ]
    if lines[-1] != "":
        lines.append("")
    lines += [
        "| shape | commit | kernel | latency | host | control kernel | control latency | control host | host-bound |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for f in data.calls:
        bound = "yes" if f.host_bound else "no" if f.method in DEVICE_METHODS else "— (one time)"
        lines.append(
            f"| {f.shape} | {_where(data, f.sha)} | {_us(f.kernel_us)} | {_us(f.latency_us)} | "
            f"{_us(f.host_us)} | {_us(f.control_kernel_us)} | {_us(f.control_latency_us)} | "
            f"{_us(f.control_host_us)} | {bound} |"
        )
    return lines

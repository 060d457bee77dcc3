"""The names of the (metric, timing) pairs the search compares, and the per-shape figures of kernel
time, call latency and host time that the report shows beside it.

The config's `metric` ("ratio" | "speed") and `timing` ("kernel" | "latency") are carried through
the search and the report as one name: "ratio", "speed" (kernel time, as before) or
"latency_ratio", "latency_speed" (the same on the latency of back-to-back calls).
Pure: TrialRecords in, numbers out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benches.kernel_methods import DEVICE_METHODS, median
from bisector.model import TrialRecord, TrialStatus
from bisector.search.samples import LATENCY


def combined(metric: str, timing: str) -> str:
    """("ratio", "latency") -> "latency_ratio"; the kernel timing keeps the plain name."""
    return f"{LATENCY}{metric}" if timing == "latency" else metric


def split(name: str) -> tuple[str, str]:
    """ "latency_ratio" -> ("ratio", "latency"); "speed" -> ("speed", "kernel")."""
    return (name[len(LATENCY) :], "latency") if name.startswith(LATENCY) else (name, "kernel")


def latency_tflops(trial: TrialRecord) -> float | None:
    """The subject's TFLOP/s at its call latency (its kernel TFLOP/s scaled by kernel / latency time)."""
    kernel, latency = median(trial.subject_ms), median(trial.subject_latency_ms)
    if not trial.subject_tflops or not kernel or not latency:
        return None
    return trial.subject_tflops * kernel / latency


@dataclass(frozen=True)
class CallFigures:
    """One shape at one commit, medians over its OK trials, in microseconds."""

    shape: str
    sha: str
    method: str  # how the kernel time was taken (benches/kernel_time.py), "" when not recorded
    kernel_us: float | None
    latency_us: float | None
    host_us: float | None
    control_kernel_us: float | None = None
    control_latency_us: float | None = None
    control_host_us: float | None = None
    trials: int = 0
    # how the latency batches began, if every trial recorded it: "idle" (benches/kernel_time.py
    # IDLE_START); "" for trials timed before it was recorded, whose batches began behind the backlog
    latency_start: str = ""

    @property
    def host_bound(self) -> bool:
        return (
            self.host_us is not None
            and self.kernel_us is not None
            and self.method in DEVICE_METHODS
            and self.host_us > self.kernel_us
        )

    @property
    def control_host_bound(self) -> bool:
        return (
            self.control_host_us is not None
            and self.control_kernel_us is not None
            and self.method in DEVICE_METHODS
            and self.control_host_us > self.control_kernel_us
        )


def _us(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) * 1e3 if got else None


def figures(trials: Sequence[TrialRecord], shape: str, sha: str) -> CallFigures | None:
    """Medians over the OK trials of (sha, shape) that recorded latency; None when none did
    (a store written before kernel time and latency were measured apart)."""
    ok = [
        t
        for t in trials
        if t.sha == sha and t.shape == shape and t.status is TrialStatus.OK and t.kernel_method and t.subject_latency_ms
    ]
    if not ok:
        return None
    methods = sorted({t.kernel_method for t in ok})
    return CallFigures(
        shape,
        sha,
        methods[0] if len(methods) == 1 else "/".join(methods),
        _us([median(t.subject_ms) for t in ok]),
        _us([median(t.subject_latency_ms) for t in ok]),
        _us([median(t.subject_host_ms) for t in ok]),
        _us([median(t.control_ms) for t in ok]),
        _us([median(t.control_latency_ms) for t in ok]),
        _us([median(t.control_host_ms) for t in ok]),
        len(ok),
        starts.pop() if len(starts := {str(t.protocol.get("latency_start", "")) for t in ok}) == 1 else "",
    )

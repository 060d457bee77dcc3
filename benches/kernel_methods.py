"""The names of the ways a trial times a kernel, and the median its figures use: importable without
torch, so that the bot's report and publish steps can read stored trials on a machine without it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

GRAPH = "cuda_graph"
PROFILER = "profiler"
EVENTS = "device_events"
DEVICE_METHODS = (GRAPH, PROFILER)  # kernel time with the host out of the loop
IDLE_START = "idle"  # latency batches begun on a synchronized device (kernel_time.CallTimes.start)


def median(values: Sequence[float]) -> float | None:
    """The median of the positive, finite values; None when there is none."""
    good = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return statistics.median(good) if good else None

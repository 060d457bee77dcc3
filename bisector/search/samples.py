"""One commit's kept trials on one shape, as the statistics every part reads them: the metric of
each trial, their median, their CV, and the trial noise pooled over the measured series.
pytest-benchmark's `Stats` is the model: one object over the raw samples, the figures derived.

The search compares these values, the report prints them, `bisector bench` and `/perf` summarize
them; computing them here once keeps what decided a step and what the report shows the same.
Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from bisector.model import Measurement, TrialRecord, TrialStatus
from bisector.search.stats import full_clock_time, log_sd

# Degrees of freedom from which the pooled noise replaces each pair's own (Welch) estimate.
POOLED_MIN_DF = 12


# The config's `timing = "latency"` prefixes the metric's name: "latency_ratio", "latency_speed".
LATENCY = "latency_"


def trial_metric(trial: TrialRecord, metric: str, speed_scale: float = 1.0) -> float | None:
    """The value one trial gives the search (config.Thresholds.metric on its timing): the
    subject/control ratio of kernel times, or for "speed" `speed_scale` over the full-clock kernel
    time (1: the search's own sample; the trial's TFLOP/s times its median time: full-clock
    TFLOP/s, the same change in percent); "latency_ratio" / "latency_speed" the same on the
    latency of back-to-back calls. None for a trial that did not run right."""
    if trial.status is not TrialStatus.OK:
        return None
    if metric == LATENCY + "ratio":
        return trial.latency_ratio
    if metric == LATENCY + "speed":
        latency = [t for t in trial.subject_latency_ms if t > 0]
        return speed_scale / statistics.median(latency) if latency else None
    if metric == "speed":
        return speed_scale / full_clock_time(trial.subject_ms) if trial.subject_ms else None
    return trial.ratio


def cv_pct(values: Sequence[float]) -> float | None:
    """Coefficient of variation over trials in percent; None for fewer than two or a zero mean."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values) / mean if mean else None


def pooled_noise(measurements: Iterable[Measurement], shape: str,
                 pair: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """The trial noise of `shape` (log sd, df): pooled over every measured commit once that pool is
    large, never below the pair's own spread. With 3 trials a side, Welch's t has ~4 degrees of
    freedom and its interval is 40% wider than the pooled one; the floor keeps a noisier stretch
    of history from borrowing the calm of the rest."""
    groups = [m.samples.get(shape, ()) for m in measurements if shape not in m.wrong]
    sd, df = log_sd([g for g in groups if len(g) > 1])
    if df < POOLED_MIN_DF or not math.isfinite(sd):
        return None
    own, _ = log_sd([p for p in pair if len(p) > 1])
    return (max(sd, own if math.isfinite(own) else 0.0), df)


@dataclass(frozen=True)
class SampleStats:
    """The kept per-trial values of one commit on one shape, in the order measured."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    @property
    def cv_pct(self) -> float | None:
        return cv_pct(self.values)

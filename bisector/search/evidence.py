"""What the report shows as evidence for its steps, computed from stored trials and the search's
result: per commit and shape the value the search compared (with its spread), and for each pair
left unsure at the trial cap, what its trials said.

Pure: TrialRecords and a SearchResult in, report dataclasses out. bisector/report/assemble.py
calls it from `report_data`; the renderers in bisector/report/ only read what it made.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bisector.model import Commit, Comparison, SearchResult, TrialRecord, TrialStatus
from bisector.search.call_timing import latency_tflops
from bisector.search.samples import compare_pooled, pooled_noise, trial_metric


@dataclass(frozen=True)
class CommitRow:
    """One measured commit: medians over its OK trials, per shape."""

    commit: Commit
    subject_tflops: Mapping[str, float]
    control_tflops: Mapping[str, float]
    ratio: Mapping[str, float]
    trials: Mapping[str, int]
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # per-trial subject TFLOP/s
    # Per trial, in the order measured, the value the search compared (ReportData.metric): the
    # subject/control ratio, or the full-clock speed as full-clock TFLOP/s. It is what decided the
    # steps, so the report shows it with its spread beside the TFLOP/s a reader knows.
    metric: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class UnsurePair:
    """Two neighbouring measured commits still undecided at the trial cap, with what their trials
    said per unsure shape (change, 95% interval, trials each side): how large a step could hide."""

    before: str
    after: str
    shapes: tuple[str, ...]
    comparisons: tuple[Comparison, ...] = ()  # per shape of `shapes` whose samples are known


def metric_value(trial: TrialRecord, metric: str) -> float | None:
    """The per-trial value the search compared, in units a reader knows: the subject/control ratio
    (of kernel times, or of latencies), the subject's TFLOP/s at its latency for "latency_speed",
    or for "speed" the full-clock speed as full-clock TFLOP/s (the search's 1 / full-clock time,
    scaled by the trial's own TFLOP/s at its median time: the same change in percent)."""
    if metric == "latency_speed" and trial.status is TrialStatus.OK:
        return latency_tflops(trial)
    if metric != "speed" or trial.status is not TrialStatus.OK:
        return trial_metric(trial, metric)
    times = [t for t in trial.subject_ms if t > 0]
    if not times or not trial.subject_tflops:
        return None
    return trial_metric(trial, metric, trial.subject_tflops * statistics.median(times))


def metric_samples(
    trials: Sequence[TrialRecord], keys: Sequence[str], metric_of: Callable[[str], str]
) -> dict[str, tuple[float, ...]]:
    """Per shape key, the metric of each OK trial in the order measured."""
    out: dict[str, tuple[float, ...]] = {}
    for key in keys:
        values = tuple(v for t in trials if t.shape == key and (v := metric_value(t, metric_of(key))) is not None)
        if values:
            out[key] = values
    return out


def unsure_pairs(result: SearchResult, max_trials: int, min_step: Callable[[str], float]) -> tuple[UnsurePair, ...]:
    """Each pair in `result.uncertain`, compared again on the samples the search had at its cap
    (the first `max_trials` of each commit): the difference and interval a reader weighs against
    the minimum step."""
    out = []
    for u in result.uncertain:
        a, b = result.measurements.get(u.before), result.measurements.get(u.after)
        comparisons: list[Comparison] = []
        for shape in u.shapes:
            before = tuple(a.samples.get(shape, ()))[:max_trials] if a else ()
            after = tuple(b.samples.get(shape, ()))[:max_trials] if b else ()
            if before and after:
                comparisons.append(
                    compare_pooled(
                        before, after, min_step(shape), 1.0, shape, pooled_noise(result.measurements.values(), shape)
                    )
                )
        out.append(UnsurePair(u.before, u.after, u.shapes, tuple(comparisons)))
    return tuple(out)

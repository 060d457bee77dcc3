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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from scipy import special  # the F distribution's inverse; scipy.stats takes ~1 s to import

from benches.kernel_methods import DEVICE_METHODS
from bisector.model import Comparison, Measurement, TrialRecord, TrialStatus
from bisector.search.stats import WILD_MIN_TRIALS, compare, full_clock_time, log_sd, mad_sd, without_wild

# Degrees of freedom from which the pooled noise replaces each pair's own (Welch) estimate.
POOLED_MIN_DF = 12
# ... and that the screened pool (the wild commits left out) needs to stand for it: fewer degrees of
# freedom only widen the t interval, and a pool of 12 with two wild commits left out is still right.
SCREENED_MIN_DF = 4
# A pair's own spread this unlikely against the pooled noise (F test) is the pair's noise instead.
OWN_BEYOND_CHANCE = 0.01


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


def trial_views(
    kept: Mapping[str, Sequence[TrialRecord]], latency: bool = False
) -> tuple[dict[str, dict[str, tuple[float, ...]]], dict[str, tuple[float, ...]]]:
    """The views of a measurement's trials (model.Measurement.views, in the order of its samples) and
    when each ran (epoch seconds): "subject" and "control" the full-clock speed of each alone,
    "ratio" their ratio, for the search's drift check; with `latency`, "latency" the latency ratio
    of eager calls, from the trials that timed it apart from a kernel time taken with the host out of
    the loop (the trial does where a call is not device-bound; on the CPU they are one), so it may
    hold fewer samples than its shape;
    "warm" the ratio of kernel times with the cache left warm, where the suite asked for it.
    A view some trial cannot give is left out for that shape."""
    views: dict[str, dict[str, tuple[float, ...]]] = {}
    times: dict[str, tuple[float, ...]] = {}

    def put(view: str, shape: str, values: Sequence[float | None]) -> None:
        if values and all(v is not None and v > 0 for v in values):
            views.setdefault(view, {})[shape] = tuple(values)  # type: ignore[arg-type]

    for shape, trials in kept.items():
        put("subject", shape, [trial_metric(t, "speed") for t in trials])
        put("control", shape, [1.0 / full_clock_time(t.control_ms) if t.control_ms else None for t in trials])
        put("ratio", shape, [t.ratio for t in trials])
        warm = [t.protocol.get("warm_ratio") for t in trials]  # where the suite asked for cache = "warm" too
        put("warm", shape, [float(v) if isinstance(v, (int, float)) else None for v in warm])
        if latency and all(t.kernel_method in DEVICE_METHODS for t in trials):
            # a latency apart from the kernel time: on the CPU the call is the kernel, one figure.
            # Kept from the trials that timed it: a trial that judged its call device-bound times no
            # latency, and one such trial dropped the view of its whole commit (the GPU demo's two
            # steps went unverified: their fresh looks came back one latency sample short).
            timed = [t.latency_ratio for t in trials if t.subject_latency_ms and (t.latency_ratio or 0) > 0]
            put("latency", shape, timed)
        stamps = [_epoch(t.started_at) for t in trials]
        if stamps and all(s is not None for s in stamps):
            times[shape] = tuple(stamps)  # type: ignore[arg-type]
    return views, times


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except ValueError:
        return None


def cv_pct(values: Sequence[float]) -> float | None:
    """Coefficient of variation over trials in percent; None for fewer than two or a zero mean."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values) / mean if mean else None


@dataclass(frozen=True)
class PooledNoise:
    """The run's trial noise of one shape, as log sds: `sd` over the commits whose trials are all
    ordinary (stats.log_sd with its screen), `raw_sd` over every commit, wild trials in; `df` the
    degrees of freedom of the screened pool."""

    sd: float
    raw_sd: float
    df: float


def pooled_noise(measurements: Iterable[Measurement], shape: str) -> PooledNoise | None:
    """The trial noise of `shape` pooled over every measured commit, once that pool is large. With
    3 trials a side, Welch's t has ~4 degrees of freedom and its interval is 40% wider than the
    pooled one."""
    groups = [g for m in measurements if shape not in m.wrong and len(g := m.samples.get(shape, ())) > 1]
    raw, raw_df = log_sd(groups)
    sd, df = log_sd(groups, screen=True)
    if raw_df < POOLED_MIN_DF or not math.isfinite(raw):
        return None
    if df < SCREENED_MIN_DF or not math.isfinite(sd):
        sd, df = raw, raw_df
    return PooledNoise(sd, raw, df)


def run_noise(measurements: Iterable[Measurement], shapes: Iterable[str]) -> dict[str, PooledNoise | None]:
    """Each shape's trial noise pooled over a run's measurements: what the stages after the search
    (reverts, hunks) compare their few side-by-side trials with, as the search does."""
    measurements = list(measurements)
    return {shape: pooled_noise(measurements, shape) for shape in dict.fromkeys(shapes)}


def compare_pooled(
    before: Sequence[float],
    after: Sequence[float],
    min_step_pct: float,
    alpha: float,
    shape: str,
    pool: PooledNoise | None,
    null_pct: float = 0.0,
) -> Comparison:
    """The search's comparison of two commits. With the run's pooled noise known and 3 trials or
    more a side (stats.WILD_MIN_TRIALS), their wild trials are left out against the screened pool
    (stats.without_wild: far from both commits); with fewer, a wild trial cannot be told, so the
    pool with wild trials in is the noise. Either way the pair's own spread replaces the pool
    where it is wider beyond chance (`pair_sd`). Before the pool is known,
    Welch's t on the pair alone, less the trials wild against the pair's own robust spread
    (stats.mad_sd: 5 trials a side on). The counts are the trials given, wild ones in: how many
    the commits have, which the search reads to know fresh trials came."""
    given = len(before), len(after)
    if pool is None:
        scale = mad_sd((before, after))
        out = compare(*_without_wild_pair(before, after, scale), min_step_pct, alpha, shape, null_pct=null_pct)
    else:
        sd = pool.raw_sd
        if min(given) >= WILD_MIN_TRIALS:
            (before, after), sd = _without_wild_pair(before, after, pool.sd), pool.sd
        own, own_df = log_sd([side for side in (before, after) if len(side) > 1])
        out = compare(before, after, min_step_pct, alpha, shape, (pair_sd(sd, pool.df, own, own_df), pool.df), null_pct)
    return replace(out, n_before=given[0], n_after=given[1])


def pair_sd(pool_sd: float, pool_df: float, own: float, own_df: float) -> float:
    """The noise a pair is compared with: the run's pooled sd, or the pair's own where it is wider
    beyond chance (an F test at OWN_BEYOND_CHANCE). A noisier stretch of history does not borrow
    the calm of the rest; and two trials a side, whose own spread has 2 degrees of freedom and
    exceeds the pool's by chance in a third of pairs, do not widen the interval for nothing (the
    plain floor max(pool, own) did: ~5% more trials on the H200's ranges)."""
    if not math.isfinite(own) or own_df <= 0 or own <= pool_sd:
        return pool_sd
    beyond = (own / pool_sd) ** 2 > float(special.fdtri(own_df, max(1.0, pool_df), 1.0 - OWN_BEYOND_CHANCE))
    return own if beyond else pool_sd


def _without_wild_pair(
    before: Sequence[float], after: Sequence[float], sd: float
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each side less its trials wild against its own median and the other side's (stats.without_wild)."""
    if len(before) < WILD_MIN_TRIALS or len(after) < WILD_MIN_TRIALS:
        return tuple(before), tuple(after)
    return (
        without_wild(before, sd, (statistics.median(after),)),
        without_wild(after, sd, (statistics.median(before),)),
    )


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

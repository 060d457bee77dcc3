"""Pure statistics for comparing two commits: a three-way verdict per shape.

Samples are ratios (subject/control TFLOP/s per trial), so changes are multiplicative. We test on
log values with Welch's t: the change estimate and its 95% interval come back as percent of the
parent's value, and a test on logs is symmetric for regressions and improvements.

The verdict:
- DIFFERENT: the change is significant (p < alpha) and its estimate is at least `min_step_pct`.
- SAME: the 95% interval of the change lies inside +-min_step_pct (an equivalence test), so no
  step of the minimum size can hide there.
- UNKNOWN: neither yet; the caller buys more trials.

A pure module: no I/O, no imports of builds, stores or devices.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import special  # the t distribution's cdf and its inverse; scipy.stats takes ~1 s to import

from bisector.model import Comparison, Verdict

__all__ = ["full_clock_time", "compare", "holds", "welch_log", "noise_cv", "log_sd", "LogWelch"]


def full_clock_time(ms: Sequence[float], tolerance: float = 0.02, at_least: int = 3) -> float:
    """Median time of the repetitions run at full clock: within `tolerance` of the `at_least`-th
    fastest. A power-bound kernel throttles after a few repetitions (H200, GEMM 8192^3: 1.40 ms at
    full clock, 1.52 ms throttled); its full-clock time is steady to 0.1% from process to process."""
    times = sorted(t for t in ms if t > 0)
    if not times:
        return math.nan
    anchor = times[min(at_least, len(times)) - 1]
    return float(np.median([t for t in times if t <= anchor * (1 + tolerance)]))


class LogWelch:
    """Welch's t on log samples: difference of mean logs, its standard error, and df."""

    __slots__ = ("diff", "se", "df", "n_before", "n_after")

    def __init__(self, before: Sequence[float], after: Sequence[float],
                 noise: tuple[float, float] | None = None) -> None:
        a = np.log(np.asarray(before, dtype=float))
        b = np.log(np.asarray(after, dtype=float))
        self.n_before, self.n_after = len(a), len(b)
        self.diff = float(b.mean() - a.mean())
        if noise is not None:
            # A per-trial log-sd known from elsewhere (e.g. pooled over a whole series) and its df.
            self.se, self.df = noise[0] * math.sqrt(1.0 / len(a) + 1.0 / len(b)), max(1.0, noise[1])
            return
        va = float(a.var(ddof=1)) / len(a) if len(a) > 1 else 0.0
        vb = float(b.var(ddof=1)) / len(b) if len(b) > 1 else 0.0
        if len(a) < 2 and len(b) < 2:
            # No spread can be estimated from one sample each: nothing is significant.
            self.se, self.df = math.inf, 1.0
            return
        self.se = math.sqrt(va + vb)
        num = (va + vb) ** 2
        den = (va**2 / (len(a) - 1) if len(a) > 1 else 0.0) + (vb**2 / (len(b) - 1) if len(b) > 1 else 0.0)
        self.df = max(1.0, num / den) if den > 0 else float(max(1, len(a) + len(b) - 2))

    def p_value(self) -> float:
        if self.se == 0.0:
            return 0.0 if self.diff != 0.0 else 1.0
        if math.isinf(self.se):
            return 1.0
        return float(2.0 * special.stdtr(self.df, -abs(self.diff) / self.se))

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Interval of the change in percent of the parent's value."""
        if math.isinf(self.se):
            return (-math.inf, math.inf)
        half = float(special.stdtrit(self.df, 0.5 + level / 2.0)) * self.se
        return (_pct(self.diff - half), _pct(self.diff + half))


def _pct(log_ratio: float) -> float:
    return (math.exp(log_ratio) - 1.0) * 100.0


def welch_log(before: Sequence[float], after: Sequence[float]) -> LogWelch:
    return LogWelch(before, after)


def compare(before: Sequence[float], after: Sequence[float], min_step_pct: float = 1.0,
            alpha: float = 0.01, shape: str = "", noise: tuple[float, float] | None = None) -> Comparison:
    """Three-way verdict of `after` against `before` (see the module docstring).

    `alpha` is the per-shape significance level; the search divides its own budget across shapes
    and comparisons before calling this. `noise` = (per-trial sd of log values, its degrees of
    freedom) replaces Welch's per-sample variances when the noise is known better from elsewhere,
    as in a fully sampled series where one side may hold a single commit.
    """
    if len(before) == 0 or len(after) == 0:
        return Comparison(shape, Verdict.UNKNOWN, 0.0, (-math.inf, math.inf), 1.0, len(before), len(after))
    if min(before) <= 0 or min(after) <= 0:
        raise ValueError(f"{shape or 'samples'}: values must be positive ratios or TFLOP/s")
    w = LogWelch(before, after, noise)
    change = _pct(w.diff)
    lo, hi = w.interval(0.95)
    p = w.p_value()
    if p < alpha and abs(change) >= min_step_pct:
        verdict = Verdict.DIFFERENT
    elif -min_step_pct < lo and hi < min_step_pct:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.UNKNOWN
    return Comparison(shape, verdict, change, (lo, hi), p, len(before), len(after))


def holds(comparison: Comparison, direction: float, min_step_pct: float, alpha: float) -> bool:
    """Does a fresh comparison confirm a step seen before in `direction` (sign of the change)?

    Confirmation is looser than detection on size (hysteresis): significant, same sign, and an
    interval that reaches the minimum size. A true step just above the minimum would otherwise be
    confirmed only half of the time, since its fresh estimate falls below the minimum as often as
    above it.
    """
    if comparison.p_value >= alpha or comparison.change_pct * direction <= 0:
        return False
    lo, hi = comparison.ci95
    reach = max(abs(lo), abs(hi))
    return reach >= min_step_pct


def log_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Per-trial sd of log values pooled over groups of repeats (one group per commit), and its df.

    Within-commit spread is blind to steps between commits. With single trials per commit, the
    median absolute first difference of the per-commit logs / (0.6745 sqrt 2) is used instead,
    which steps barely move either.
    """
    num, den = 0.0, 0
    for g in groups:
        if len(g) < 2:
            continue
        x = np.log(np.asarray(g, dtype=float))
        num += float(((x - x.mean()) ** 2).sum())
        den += len(g) - 1
    if den > 0:
        return math.sqrt(num / den), den
    singles = np.log(np.asarray([g[0] for g in groups if len(g) == 1], dtype=float))
    if len(singles) < 3:
        return float("nan"), 0
    d = np.diff(singles)
    return float(np.median(np.abs(d - np.median(d)))) / 0.6745 / math.sqrt(2.0), len(singles) - 1


def noise_cv(groups: Sequence[Sequence[float]]) -> float:
    """Pooled per-trial coefficient of variation from repeated trials of several commits."""
    sd, df = log_sd([g for g in groups if len(g) >= 2])
    if df == 0:
        return float("nan")
    return math.sqrt(math.exp(sd**2) - 1.0)

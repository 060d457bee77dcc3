"""Pure statistics for comparing two commits: a three-way verdict per shape.

Samples are ratios (subject/control TFLOP/s per trial), so changes are multiplicative. We test on
log values with Welch's t: the change estimate and its 95% interval come back as percent of the
parent's value, and a test on logs is symmetric for regressions and improvements.

The verdict:
- DIFFERENT: the change is significant (p < alpha) and its estimate is at least `min_step_pct`.
- SAME: the 90% interval of the change lies inside +-min_step_pct: an equivalence test, two
  one-sided tests at 5% each (TOST, as bioequivalence uses), so no step of the minimum size can
  hide there. The 95% interval (SAME at 2.5% a side) cost the search ~10% more trials on the
  H200's noise for no culprit found more often (studies/results/search-accuracy.txt).
- UNKNOWN: neither yet; the caller buys more trials.

Wild trials. On a GPU host about one trial in thirty reads 5-10% off its commit (another process
mapping memory or drawing inputs on the device during its timed section:
studies/results/h200-setup-parts.txt), against a per-trial noise of 0.3-2%. With means and their
sd, one such trial widens its pair's interval until the pair runs to the trial cap, unsure. So
where the noise is known from the whole run, a trial more than WILD_SD pooled sds from its
commit's median and from the other commit's (WILD_MIN_TRIALS or more a side) is left out of the
search's comparison (`without_wild`, used by samples.compare_pooled), against a pool that leaves
out the commits whose spread is beyond chance (`log_sd(screen=True)`). A pair with fewer trials
cannot tell a wild one: it is compared against the pool with the wild trials in, as before.
Ordinary noise, even a uniform one, never reaches WILD_SD: on clean trials nothing changes.

A pure module: no I/O, no imports of builds, stores or devices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special  # the t distribution's cdf and its inverse; scipy.stats takes ~1 s to import

from bisector.model import Comparison, Verdict

SAME_LEVEL = 0.90  # the interval that must lie inside +-min_step for SAME (TOST at 5% a side)

__all__ = [
    "full_clock_time",
    "compare",
    "holds",
    "welch_log",
    "noise_cv",
    "log_sd",
    "LogWelch",
    "without_wild",
    "mad_sd",
]


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

    __slots__ = ("df", "diff", "levels", "n_after", "n_before", "se")

    def __init__(
        self, before: Sequence[float], after: Sequence[float], noise: tuple[float, float] | None = None
    ) -> None:
        a = np.log(np.asarray(before, dtype=float))
        b = np.log(np.asarray(after, dtype=float))
        self.n_before, self.n_after = len(a), len(b)
        self.diff = float(b.mean() - a.mean())
        self.levels = (math.exp(float(a.mean())), math.exp(float(b.mean())))
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

    def p_beyond(self, size: float) -> float:
        """Two-sided p of a change farther than `size` (log) from none, against one of exactly `size`."""
        far = abs(self.diff) - size
        if far <= 0.0 or math.isinf(self.se):
            return 1.0
        return 0.0 if self.se == 0.0 else float(2.0 * special.stdtr(self.df, -far / self.se))

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


def compare(
    before: Sequence[float],
    after: Sequence[float],
    min_step_pct: float = 1.0,
    alpha: float = 0.01,
    shape: str = "",
    noise: tuple[float, float] | None = None,
    null_pct: float = 0.0,
) -> Comparison:
    """Three-way verdict of `after` against `before` (see the module docstring).

    `alpha` is the per-shape significance level; the search divides its own budget across shapes
    and comparisons before calling this. `noise` = (per-trial sd of log values, its degrees of
    freedom) replaces Welch's per-sample variances when the noise is known better from elsewhere,
    as in a fully sampled series where one side may hold a single commit. `null_pct`: the size of
    change the test's null allows (an indifference zone's middle, bisector/search/zone.py): p is
    then the chance of a change this far beyond it, either way; 0: beyond none.
    """
    if len(before) == 0 or len(after) == 0:
        return Comparison(shape, Verdict.UNKNOWN, 0.0, (-math.inf, math.inf), 1.0, len(before), len(after))
    if min(before) <= 0 or min(after) <= 0:
        raise ValueError(f"{shape or 'samples'}: values must be positive ratios or TFLOP/s")
    w = LogWelch(before, after, noise)
    change = _pct(w.diff)
    lo, hi = w.interval(0.95)
    same_lo, same_hi = w.interval(SAME_LEVEL)
    p = w.p_value() if null_pct <= 0 else w.p_beyond(math.log1p(null_pct / 100.0))
    if p < alpha and abs(change) >= min_step_pct:
        verdict = Verdict.DIFFERENT
    elif -min_step_pct < same_lo and same_hi < min_step_pct:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.UNKNOWN
    return Comparison(shape, verdict, change, (lo, hi), p, len(before), len(after), w.levels)


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


WILD_SD = 6.0  # a trial this many pooled sds from its commit's median is left out
WILD_MIN_TRIALS = 3  # below this a median is no anchor
WILD_GROUP = 0.001  # a commit whose spread is this unlikely against the others' leaves the pool


def without_wild(values: Sequence[float], sd: float, elsewhere: Sequence[float] = ()) -> tuple[float, ...]:
    """`values` less the trials more than WILD_SD x `sd` (log) from their median and from every
    level in `elsewhere` (the other commit of a pair): of three trials two wild ones would be the
    median, and the quiet one, near the other commit, must not be thrown out for them. Only with
    WILD_MIN_TRIALS or more, and never more than a third of them: a commit whose trials split that
    much is bimodal, not disturbed, and the comparison must see it."""
    values = tuple(values)
    if len(values) < WILD_MIN_TRIALS or not math.isfinite(sd) or sd <= 0.0:
        return values
    logs = np.log(np.asarray(values, dtype=float))
    far = np.abs(logs - np.median(logs)) > WILD_SD * sd
    for level in elsewhere:
        far &= np.abs(logs - math.log(level)) > WILD_SD * sd
    if not far.any() or far.sum() > len(values) // 3:
        return values
    return tuple(v for v, wild in zip(values, far) if not wild)


def mad_sd(groups: Sequence[Sequence[float]], at_least: int = 5) -> float:
    """A robust per-trial sd of log values from groups of `at_least` trials or more: 1.4826 x the
    median absolute deviation from each group's median (NaN with no such group). The scale a pair
    can give itself before the run's pooled noise is known: a wild trial does not move it."""
    residuals = [
        np.abs(x - np.median(x)) for g in groups if len(g) >= at_least for x in [np.log(np.asarray(g, dtype=float))]
    ]
    return 1.4826 * float(np.median(np.concatenate(residuals))) if residuals else math.nan


def log_sd(groups: Sequence[Sequence[float]], screen: bool = False) -> tuple[float, int]:
    """Per-trial sd of log values pooled over groups of repeats (one group per commit), and its df.

    Within-commit spread is blind to steps between commits. With `screen`, a group whose variance
    is beyond what chance gives one group in a thousand (chi-square) against the groups' median
    variance is left out of the pool: one trial read 10% off among three would otherwise count for
    as much as a hundred quiet groups. With single trials per commit, the median absolute first
    difference of the per-commit logs / (0.6745 sqrt 2) is used instead, which steps barely move
    either.
    """
    spreads = []  # (sum of squares, df) per group
    for g in groups:
        if len(g) < 2:
            continue
        x = np.log(np.asarray(g, dtype=float))
        spreads.append((float(((x - x.mean()) ** 2).sum()), len(g) - 1))
    kept = _without_wild_groups(spreads) if screen else spreads
    num, den = sum(ss for ss, _ in kept), sum(df for _, df in kept)
    if den > 0:
        return math.sqrt(num / den), den
    singles = np.log(np.asarray([g[0] for g in groups if len(g) == 1], dtype=float))
    if len(singles) < 3:
        return float("nan"), 0
    d = np.diff(singles)
    return float(np.median(np.abs(d - np.median(d)))) / 0.6745 / math.sqrt(2.0), len(singles) - 1


def _without_wild_groups(spreads: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The groups whose variance is within chance (chi-square, WILD_GROUP) of the groups' scale,
    taken as the median of variance / median(chi2_df / df): a few wild groups do not move it."""
    if len(spreads) < 3:
        return spreads
    scale = float(np.median([ss / df / (float(special.chdtri(df, 0.5)) / df) for ss, df in spreads]))
    if scale <= 0.0:
        return spreads
    return [(ss, df) for ss, df in spreads if ss / df <= scale * float(special.chdtri(df, WILD_GROUP)) / df]


def noise_cv(groups: Sequence[Sequence[float]]) -> float:
    """Pooled per-trial coefficient of variation from repeated trials of several commits."""
    sd, df = log_sd([g for g in groups if len(g) >= 2])
    if df == 0:
        return float("nan")
    return math.sqrt(math.exp(sd**2) - 1.0)

"""The minimum step a latency shape is decided at: its own, or the smallest change the trial cap can
resolve on the run's measured noise of that latency, whichever is larger.

An eager call's latency carries its host time, which can vary between trials far more than the
kernel time does: on a lent H100 a Triton RMSNorm's latency varied by +-56% a trial against 0.4%
for its kernel time (most of it, it turned out, from latency batches begun behind the control's
backlog, since mended in benches/kernel_time.gpu_calls; a busy host adds its own). At 8 trials a
side such a pair's interval spans +-50%: no trial the search buys tells a 3% step from none, and
every latency pair ran to the cap and was reported undecided (10 of 10 on that range, 16 on a
LayerNorm range). So once the run's noise of a latency shape is known (samples.pooled_noise, the screened
sd the comparisons use), its minimum step is raised to the change whose absence the cap's trials
show (the equivalence test at stats.SAME_LEVEL) with POWER: a pair of unchanged commits then ends
SAME at the cap, or sooner, not undecided; a step well above it (a dispatch plant's -35%) is still
found and verified. Kernel-time shapes keep their own minimum step. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import special

from bisector.model import LATENCY_KEY
from bisector.search.samples import PooledNoise
from bisector.search.stats import SAME_LEVEL

__all__ = ["POWER", "LatencyFloor", "resolvable_pct", "latency_min_step", "floor_of"]

# The chance that a pair of unchanged commits is shown SAME at the cap on the raised minimum step.
POWER = 0.8


def resolvable_pct(pool: PooledNoise, cap: int) -> float:
    """The smallest minimum step (percent, whole) whose equivalence test a pair of unchanged commits
    passes at `cap` trials a side with POWER: the test's half-width at SAME_LEVEL plus the spread of
    the pair's estimate that POWER allows."""
    se = pool.sd * math.sqrt(2.0 / max(1, cap))
    t = float(special.stdtrit(max(1.0, pool.df), 0.5 + SAME_LEVEL / 2.0))
    z = float(special.ndtri(0.5 + POWER / 2.0))
    return float(math.ceil(math.expm1((t + z) * se) * 100.0))


def latency_min_step(shape: str, configured: float, pool: PooledNoise | None, cap: int) -> float:
    """`configured`, or for a latency shape whose noise is known what the cap resolves, if larger."""
    if not shape.endswith(LATENCY_KEY) or pool is None or not math.isfinite(pool.sd):
        return configured
    return max(configured, resolvable_pct(pool, cap))


@dataclass(frozen=True)
class LatencyFloor:
    """A latency shape decided at a raised minimum step, and why: its noise and the cap."""

    shape: str
    noise_pct: float  # one trial's sd, in percent of the latency
    asked: float  # the configured minimum step
    tested_at: float
    cap: int

    def line(self) -> str:
        """ "gemm/decode:latency: call latency varies +-38% between trials (an eager call carries the
        host's time): latency steps tested at >= 25% only, what 8 trials a side resolve (3% asked)"."""
        return (
            f"{self.shape}: call latency varies ±{self.noise_pct:.0f}% between trials (an eager call carries "
            f"the host's time): latency steps tested at >= {self.tested_at:g}% only, what "
            f"{self.cap} trials a side resolve ({self.asked:g}% asked)"
        )


def floor_of(shape: str, configured: float, pool: PooledNoise | None, cap: int) -> LatencyFloor | None:
    """The raise of `shape`'s minimum step, None where it is decided at its own."""
    tested = latency_min_step(shape, configured, pool, cap)
    if tested <= configured or pool is None:
        return None
    return LatencyFloor(shape, math.expm1(pool.sd) * 100.0, configured, tested, cap)

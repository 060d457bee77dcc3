"""What a report shows, assembled by report/assemble.py from the stages' results; every renderer reads only this."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bisector.measure.time_spent import Throughput
from bisector.model import LATENCY_KEY, WARM_KEY, Commit, Step, Uncertain, min_step_for
from bisector.search.call_timing import CallFigures
from bisector.search.evidence import CommitRow, UnsurePair
from bisector.search.wrong_results import WrongResult, WrongWindow
from bisector.why.cause import Cause
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.fixes import FixResult
from bisector.why.interactions import Interaction
from bisector.why.kernel_diff.diff import StepKernels

if TYPE_CHECKING:
    from bisector.store.totals import RunTotals
    from bisector.why.facts import Action, StepMove

METRIC_WORDS = {
    "ratio": "the subject/control ratio",
    "speed": "the subject's own speed at full clock",
    "latency_ratio": "the subject/control ratio of call latencies",
    "latency_speed": "the subject's own call latency",
}
METRIC_SHORT = {
    "ratio": "ratio",
    "speed": "full-clock speed",
    "latency_ratio": "latency ratio",
    "latency_speed": "latency speed",
    "warm_ratio": "warm ratio",
}
# What a row shows for each metric: the ratio as it is, the full-clock speed as full-clock TFLOP/s,
# the latency as TFLOP/s at the latency.
METRIC_UNIT = {
    "ratio": "ratio",
    "speed": "full-clock TFLOP/s",
    "latency_ratio": "latency ratio",
    "latency_speed": "TFLOP/s at the latency",
}
# Each metric defined where the report first names it.
METRIC_DEFINITIONS = {
    "ratio": "ratio = subject TFLOP/s / control TFLOP/s, per repetition in the same process (median over the "
    "repetitions)",
    "speed": "full-clock TFLOP/s = the subject's TFLOP/s over its repetitions at full clock (those within 2% of "
    "its third fastest, before a power-bound kernel throttles; steady to 0.1% between processes)",
    "latency_ratio": "latency ratio = control latency / subject latency, each the time per call of back-to-back "
    "calls (host dispatch included)",
    "latency_speed": "TFLOP/s at the latency = the subject's FLOPs over its time per call of back-to-back calls "
    "(host dispatch included)",
}


@dataclass(frozen=True)
class ReportData:
    title: str
    config_name: str
    upstream: str
    branch: str
    good: Commit
    bad: Commit
    device: str
    control: str
    machine: Mapping[str, object]
    protocol: Mapping[str, object]
    shapes: tuple[str, ...]
    range_commits: tuple[Commit, ...]  # the whole range, GOOD first
    rows: tuple[CommitRow, ...]  # measured commits, in range order
    steps: tuple[Step, ...]
    dropped: tuple[Step, ...] = ()
    uncertain: tuple[Uncertain, ...] = ()  # pairs still unsure at the trial cap
    unsure: tuple[UnsurePair, ...] = ()  # the same pairs with their last comparison, where known
    decided: tuple[str, ...] = ()  # what decided: drift and the metric, latency steps, the zone (search/decisions.py)
    skipped: Mapping[str, str] = field(default_factory=dict)  # sha -> reason (log tail)
    wrong: tuple[WrongResult, ...] = ()
    fixes: tuple[FixResult, ...] = ()
    hunks: tuple[HunkFinding, ...] = ()
    commits_probed: int = 0
    trials: int = 0
    wall_s: float = 0.0  # this run; a resumed run measures only what was missing
    trial_s: float = 0.0  # every trial process of the campaign, earlier runs included
    min_step_pct: float = 1.0
    min_steps: Mapping[str, float] = field(default_factory=dict)  # a suite's or shape's own (config.Thresholds)
    # What the steps were tested on, per suite ("fa" -> "speed"); a suite not named: "ratio".
    metric: Mapping[str, str] = field(default_factory=dict)
    alpha: float = 0.01  # the search's chance of one false step (config.Thresholds.alpha)
    reproduce: tuple[str, ...] = ()
    build_logs: Mapping[str, str] = field(default_factory=dict)  # sha -> log path
    wrong_windows: tuple[WrongWindow, ...] = ()  # where wrong results start and stop
    notes: tuple[str, ...] = ()  # caveats a reader must see first (e.g. an offline replay)
    throughput: Throughput | None = None  # this run's trial processes and device time
    kernels: tuple[StepKernels, ...] = ()  # the compiled kernels across each verified step
    causes: tuple[Cause, ...] = ()  # each such step's cause in one sentence (bisector/why/cause.py)
    interactions: tuple[Interaction, ...] = ()  # verified steps on the same shapes, reverts combined
    totals: RunTotals | None = None  # the counts and times every output names (bisector/store/totals.py)
    moves: tuple[StepMove, ...] = ()  # each step's subject and control TFLOP/s beside the metric
    actions: tuple[Action, ...] = ()  # per verified regression, its revert on the tip: the summary first
    # Per shape at the range's ends: kernel time, call latency and host time (report/calls.py).
    calls: tuple[CallFigures, ...] = ()
    isolation: str = ""  # what confined the code under test (bisector/isolation/sandbox.py), probed at start
    # the steps' fresh trials came from a new worker lineage (bisector/runner/workers.py: ForkSource.renew)
    fresh_lineage: bool = False

    def commit(self, sha: str) -> Commit | None:
        return next((c for c in self.range_commits if c.sha == sha), None)

    def row(self, sha: str) -> CommitRow | None:
        return next((r for r in self.rows if r.commit.sha == sha), None)

    def min_step(self, shape: str) -> float:
        return min_step_for(shape, self.min_step_pct, self.min_steps)

    @property
    def min_step_text(self) -> str:
        """The minimum step as the report states it: "3%", or "3% (gemm/decode 6%)" with exceptions."""
        own = ", ".join(f"{k} {v:g}%" for k, v in sorted(self.min_steps.items()))
        return f"{self.min_step_pct:g}%" + (f" ({own})" if own else "")

    def metric_of(self, shape: str) -> str:
        """ "ratio" or "speed": what the search compared in this shape's suite; a latency shape
        ("gemm/decode:latency", search/drift.py) is decided on its eager calls' latency ratio."""
        if shape.endswith(LATENCY_KEY):
            return "latency_ratio"
        if shape.endswith(WARM_KEY):
            return "warm_ratio"  # the kernel times with the cache left warm (config/warm_cache_key.py)
        return self.metric.get(shape.split("/", 1)[0], "ratio")

"""What a report shows, assembled by the pipeline; every renderer reads only this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from bisector.correctness import WrongWindow
from bisector.model import Commit, Comparison, Step, Uncertain, Verdict
from bisector.report.findings import HunkGroup, Interaction, StepKernels
from bisector.throughput import Throughput

METRIC_WORDS = {"ratio": "the subject/control ratio", "speed": "the subject's own speed at full clock"}
METRIC_SHORT = {"ratio": "ratio", "speed": "full-clock speed"}
# What a row shows for each metric: the ratio as it is, the full-clock speed as full-clock TFLOP/s.
METRIC_UNIT = {"ratio": "ratio", "speed": "full-clock TFLOP/s"}


def metric_of_shape(metric: str, shape: str) -> str:
    """The metric of one shape's suite, from "speed" or "fa: speed, gemm: ratio"."""
    per = dict((p.split(":")[0].strip(), p.split(":")[1].strip()) for p in metric.split(",")) if ":" in metric else {}
    return per.get(shape.split("/", 1)[0], metric)


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


@dataclass(frozen=True)
class WrongResult:
    sha: str
    shape: str
    max_abs_err: float | None
    max_rel_err: float | None


@dataclass(frozen=True)
class FixResult:
    """A candidate patch (the culprit's revert carried to the tip), measured on the tip side by side
    with the tip as it is and the culprit's parent (one trial of each per round)."""

    step_commit: str
    patch_path: str | None
    applied: bool
    conflict: str = ""  # why the patch did not apply, with the files
    shapes: tuple[str, ...] = ()
    baseline: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s: the culprit's parent
    tip: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s: the tip as it is
    restored: Mapping[str, float] = field(default_factory=dict)  # TFLOP/s: the tip with the patch
    vs_parent: Mapping[str, Comparison] = field(default_factory=dict)  # patched tip against the parent (the metric)
    vs_tip: Mapping[str, Comparison] = field(default_factory=dict)  # patched tip against the tip (the metric)
    trials: int = 0  # side-by-side trials of each of the three
    correct: bool = True
    error: str = ""

    def remaining_pct(self, shape: str) -> float | None:
        """How far the patched tip still is from the pre-step commit on the search's metric (negative: below)."""
        c = self.vs_parent.get(shape)
        return c.change_pct if c is not None else None

    def verdict(self, shape: str) -> str:
        """restored | partly restored | not restored | slower than the tip | not measured."""
        par, tip = self.vs_parent.get(shape), self.vs_tip.get(shape)
        if par is None or tip is None:
            return "not measured"
        if tip.verdict is Verdict.DIFFERENT and tip.change_pct < 0:
            return "slower than the tip"
        if not (par.verdict is Verdict.DIFFERENT and par.change_pct < 0):
            return "restored"
        if tip.verdict is Verdict.DIFFERENT and tip.change_pct > 0:
            return "partly restored"
        return "not restored"


@dataclass(frozen=True)
class HunkTry:
    """The parent with some of the culprit's hunks applied, measured against the parent."""

    hunks: tuple[str, ...]  # labels: path and hunk header
    carries: bool | None  # sat nearer the culprit than the parent (median over the step's shapes); None: unresolved
    change_pct: Mapping[str, float] = field(default_factory=dict)  # per step shape; empty if it did not run
    error: str = ""
    trials: int = 0  # trials of the subset (the parent had as many, side by side)


@dataclass(frozen=True)
class HunkFinding:
    """Which of a culprit's hunks carry its step, found by measuring patched builds of its parent."""

    step_commit: str
    n_hunks: int
    hunks: tuple[str, ...]  # labels of the hunks found
    alone: bool  # one hunk carries it; False: `hunks` carry it only together
    tries: tuple[HunkTry, ...]
    patch_path: str | None = None  # the found hunks as a patch on the parent
    diff: str = ""  # the same patch's text
    complete: bool = True  # False: stopped at a budget; the step is within `hunks`
    stopped_at: str = ""  # the budget that stopped it: "builds" (build.max_hunk_builds) or "trials"
    groups: tuple[HunkGroup, ...] = ()  # hunks searched as one, and why (bisector/hunk_groups.py)
    unresolved: int = 0  # subsets that did not build, import, run or give right results
    shown_minimal: bool = True  # removing any one of `hunks` was measured and lost the step
    one_group: bool = False  # `hunks` are one group, searched as one (never apart)

    @property
    def summary(self) -> str:
        if not self.complete and self.stopped_at == "offline":
            return (f"the step is within {len(self.hunks)} of {self.n_hunks} hunks (the run ended after "
                    f"{len(self.tries)} subsets were measured; replayed offline)")
        if not self.complete:
            budget = "trials, `build.max_hunk_trials`" if self.stopped_at == "trials" else \
                "patched builds, `build.max_hunk_builds`"
            return (f"the step is within {len(self.hunks)} of {self.n_hunks} hunks (the search stopped after "
                    f"{len(self.tries)} subsets: its budget of {budget}, was spent)")
        how = "alone" if self.alone else "together, as one group of hunks that must travel together" \
            if self.one_group else "only together (without any one of them it is gone)" if self.shown_minimal \
            else "together (a smaller set was unresolved: it did not build, run or give right results)"
        return f"{len(self.hunks)} of {self.n_hunks} hunks carry the step {how}"


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
    skipped: Mapping[str, str] = field(default_factory=dict)  # sha -> reason (log tail)
    wrong: tuple[WrongResult, ...] = ()
    fixes: tuple[FixResult, ...] = ()
    hunks: tuple[HunkFinding, ...] = ()
    commits_probed: int = 0
    trials: int = 0
    wall_s: float = 0.0  # this run; a resumed run measures only what was missing
    trial_s: float = 0.0  # every trial process of the campaign, earlier runs included
    min_step_pct: float = 1.0
    metric: str = "ratio"  # what the steps were tested on: "speed", or per suite "fa: speed, gemm: ratio"
    alpha: float = 0.01  # the search's chance of one false step (config.Thresholds.alpha)
    reproduce: tuple[str, ...] = ()
    build_logs: Mapping[str, str] = field(default_factory=dict)  # sha -> log path
    wrong_windows: tuple[WrongWindow, ...] = ()  # where wrong results start and stop
    notes: tuple[str, ...] = ()  # caveats a reader must see first (e.g. an offline replay)
    throughput: Throughput | None = None  # this run's trial processes and device time
    kernels: tuple[StepKernels, ...] = ()  # the compiled kernels across each verified step
    interactions: tuple[Interaction, ...] = ()  # verified steps on the same shapes, reverts combined
    isolation: str = ""  # what confined the code under test (bisector/runner/sandbox.py), probed at start

    def commit(self, sha: str) -> Commit | None:
        return next((c for c in self.range_commits if c.sha == sha), None)

    def row(self, sha: str) -> CommitRow | None:
        return next((r for r in self.rows if r.commit.sha == sha), None)

    def metric_of(self, shape: str) -> str:
        """"ratio" or "speed": what the search compared in this shape's suite."""
        return metric_of_shape(self.metric, shape)

"""Frozen data shared by every layer. Nothing here does I/O.

The flow is one way: config -> Commit -> BuildResult -> TrialRecord -> Measurement -> Step -> report.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Verdict(enum.Enum):
    """Three-way answer of a comparison: UNKNOWN buys more trials."""

    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


class BuildStatus(enum.Enum):
    OK = "ok"
    FAILED = "failed"


class TrialStatus(enum.Enum):
    """How one trial process ended. Only OK trials carry timings the search may use."""

    OK = "ok"
    WRONG = "wrong"  # ran, but the subject's output disagreed with the control's
    CRASH = "crash"  # non-zero exit, illegal memory access, OOM, import error
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"  # a backend cannot run on this machine


class ProbeStatus(enum.Enum):
    """What the search learns about a commit as a whole."""

    OK = "ok"
    SKIP = "skip"  # did not build or import: the search goes around it


@dataclass(frozen=True)
class Commit:
    sha: str
    date: str  # ISO 8601 committer date
    author: str
    subject: str
    pr: int | None = None

    @property
    def short(self) -> str:
        return self.sha[:7]


def for_shape(shape: str, default: Any, by: Mapping[str, Any]) -> Any:
    """A setting of `shape` ("suite/name") given per suite or shape: its own entry in `by`, else its
    suite's, else `default`."""
    return by.get(shape, by.get(shape.split("/", 1)[0], default))


def min_step_for(shape: str, default: float, by: Mapping[str, float]) -> float:
    """The smallest change that counts as a step on `shape`, in percent (`for_shape`). A short decode
    GEMM whose trials vary by 2% from process to process pays ~8 trials a commit to settle a 3% step
    that a large GEMM at 0.5% settles in one; a shape's own resolution keeps it from setting every
    commit's price. A latency or warm shape ("gemm/decode:latency") has its own entry, else its shape's."""
    step: float = by.get(shape) or for_shape(base_shape(shape), default, by)
    return step


# A shape's call latency decided on as a shape of its own ("gemm/decode" -> "gemm/decode:latency"):
# the search finds, verifies and reports a latency step as it does a kernel-time step.
LATENCY_KEY = ":latency"
# Its kernel time with the L2 left warm, where a suite asks for `cache = "warm"` (bisector/config/warm_cache_key.py).
WARM_KEY = ":warm"


def base_shape(key: str) -> str:
    """The benchmark shape a search shape measures: "gemm/decode:latency" -> "gemm/decode"."""
    for tail in (LATENCY_KEY, WARM_KEY):
        if key.endswith(tail):
            return key[: -len(tail)]
    return key


@dataclass(frozen=True)
class Shape:
    """One benchmark point. `key` ("suite/name") is how every layer refers to it."""

    suite: str  # "fa" | "gemm"
    name: str
    params: tuple[tuple[str, object], ...]  # sorted (key, value) pairs, e.g. (("B", 2), ("S", 4096))

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"

    def param(self, name: str, default: object = None) -> object:
        return dict(self.params).get(name, default)

    def as_dict(self) -> dict[str, object]:
        return dict(self.params)


@dataclass(frozen=True)
class BuildResult:
    sha: str
    status: BuildStatus
    source_dir: str  # put first on the trial's sys.path
    prefix: str | None = None  # pip prefix (site-packages dir) for the `pip` recipe
    log_path: str | None = None
    seconds: float = 0.0
    cache_hit: bool = False
    patch_hash: str | None = None
    log_tail: str = ""


@dataclass(frozen=True)
class TrialRecord:
    """One trial of one shape in one fresh process, with every raw sample kept."""

    sha: str
    shape: str  # Shape.key
    status: TrialStatus
    subject_ms: tuple[float, ...] = ()
    control_ms: tuple[float, ...] = ()
    subject_tflops: float | None = None  # median over repetitions
    control_tflops: float | None = None
    ratio: float | None = None  # median of per-repetition subject/control TFLOP/s ratios
    compile_s: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    error: str = ""
    log_tail: str = ""
    telemetry: Mapping[str, object] = field(default_factory=dict)
    machine: Mapping[str, object] = field(default_factory=dict)
    protocol: Mapping[str, object] = field(default_factory=dict)
    patch_hash: str | None = None
    started_at: str = ""
    finished_at: str = ""
    slot: int | None = None  # which trial process of its (commit, patch) this was: 0, 1, ...
    # How subject_ms / control_ms were timed (benches/kernel_time.py): "cuda_graph" or "profiler"
    # (kernel time, host out of the loop), "device_events", or a CPU clock; "" in older stores.
    kernel_method: str = ""
    # Beside the kernel time: per batch the latency of back-to-back calls, per call the host's own time.
    subject_latency_ms: tuple[float, ...] = ()
    control_latency_ms: tuple[float, ...] = ()
    subject_host_ms: tuple[float, ...] = ()
    control_host_ms: tuple[float, ...] = ()
    latency_ratio: float | None = None  # median over batches of control/subject latency


# TrialRecord's per-call sample lists beside the kernel time (stored together as the call_ms column).
CALL_KEYS = ("subject_latency_ms", "control_latency_ms", "subject_host_ms", "control_host_ms")


@dataclass(frozen=True)
class Measurement:
    """All usable samples of one commit so far: what a probe hands the search.

    `samples[shape]` holds one value per OK trial: the trial's median subject/control ratio
    (or raw TFLOP/s when there is no control). `wrong` names shapes whose output was wrong.
    """

    sha: str
    status: ProbeStatus
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    wrong: frozenset[str] = frozenset()
    reason: str = ""
    # Beside `samples`, of the same trials in the same order: other values the search may decide on
    # or watch for drift (`views`: "subject", "control", "ratio", "latency" -> shape -> values; the
    # search's drift and latency checks, bisector/search/drift.py), and when each trial ran (`times`:
    # shape -> seconds on one clock). Empty where the probe does not say.
    views: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    times: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def count(self) -> int:
        return min((len(v) for v in self.samples.values()), default=0)

    def known(self) -> frozenset[str]:
        """The shapes this measurement says right or wrong of: a split point the search measured on
        some shapes only (`SearchSettings.split_on_moved`) lacks the others."""
        return frozenset(self.samples) | self.wrong


def processes_beyond(had: Mapping[str, int], m: Measurement) -> int:
    """Trial processes `m` holds beyond `had` (its samples per shape before): a process measures
    every shape it was asked for, so a probe call's processes are its largest gain over them."""
    return max(0, max((len(v) - had.get(k, 0) for k, v in m.samples.items()), default=0))


class SampleCounts:
    """The samples per commit and shape a wrapped probe has handed on so far, for the wrappers that
    count trial processes as the search does (schedule.Clocked, the studies' Announcing)."""

    def __init__(self) -> None:
        self._by_sha: dict[str, dict[str, int]] = {}

    def __contains__(self, sha: object) -> bool:
        return sha in self._by_sha

    def add(self, sha: str, m: Measurement) -> int:
        """Record `m` as sha's latest; the trial processes it adds (`processes_beyond`)."""
        had = self._by_sha.setdefault(sha, {})
        new = processes_beyond(had, m)
        had.update({k: max(had.get(k, 0), len(v)) for k, v in m.samples.items()})
        return new


# probe(sha, repeats) -> Measurement with at least `repeats` samples per shape (or SKIP).
# Calls are cumulative: asking again with a larger `repeats` adds trials, never repeats them.
Probe = Callable[[str, int], Measurement]


@dataclass(frozen=True)
class Comparison:
    """One shape, parent vs child: change in percent of the parent's value."""

    shape: str
    verdict: Verdict
    change_pct: float
    ci95: tuple[float, float]
    p_value: float
    n_before: int
    n_after: int
    # The two sides' geometric means over the samples compared (the test's own levels, wild trials
    # left out where it leaves them): change_pct is after / before - 1 of these, to the rounding.
    levels: tuple[float, float] | None = field(default=None, compare=False)


def regression(change_pct: Mapping[str, float]) -> bool:
    """A change, per shape in percent, that is a regression on the whole: its sum is negative."""
    return sum(change_pct.values()) < 0


@dataclass(frozen=True)
class Step:
    """A localized change: `commit` is the first commit after which the shapes moved."""

    commit: str
    parent: str
    shapes: tuple[str, ...]
    change_pct: Mapping[str, float]
    ci95: Mapping[str, tuple[float, float]]
    p_value: Mapping[str, float]
    candidates: tuple[str, ...] = ()  # when SKIPs bracket the step: every commit it could be
    verified: bool = True
    pr: int | None = None
    # per shape, the parent's and the culprit's levels its change was read from (Comparison.levels)
    levels: Mapping[str, tuple[float, float]] = field(default_factory=dict, compare=False)

    @property
    def is_regression(self) -> bool:
        return regression(self.change_pct)


@dataclass(frozen=True)
class Uncertain:
    """An adjacent measured pair still UNKNOWN in `shapes` at the trial cap: taken as SAME, so a
    step below what those trials resolve could hide between the two commits."""

    before: str
    after: str
    shapes: tuple[str, ...]


@dataclass(frozen=True)
class SearchResult:
    steps: tuple[Step, ...]
    dropped: tuple[Step, ...]  # steps that did not hold on re-measurement
    probes: tuple[tuple[str, int], ...]  # (sha, repeats) in the order asked
    measurements: Mapping[str, Measurement]
    skipped: tuple[str, ...]
    wrong: Mapping[str, frozenset[str]]  # sha -> shapes with wrong results
    uncertain: tuple[Uncertain, ...] = ()
    processes: int | None = None  # trial processes the search's measurements came from (None: not counted)

    @property
    def commits_probed(self) -> int:
        return len({sha for sha, _ in self.probes})

    @property
    def trials(self) -> int:
        """Trial processes the search took, as it counted them (`processes`); a result made
        elsewhere counts each commit's smallest per-shape count, which misses processes that
        measured some shapes only."""
        if self.processes is not None:
            return self.processes
        return sum(m.count() for m in self.measurements.values())

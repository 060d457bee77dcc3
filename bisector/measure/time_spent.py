"""Where a run's time went: trial processes, the device time they held, and what the rest was.

Pure: it reads the executor's timelines (bisector/runner/executor.py), one per trial process of
this run, and the run's stages (search, fixes, hunks) as wall-clock spans. `device_s` is the time
trials held a device (go to release: compile, correctness check, warm-up, timed repetitions;
and the brief loans of their setups, their inputs drawn); `device_busy_fraction` is device_s over
(measuring wall time x devices).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bisector.runner.executor import ON_DEVICE, TEARDOWN_GRACE_S, Timeline
from bisector.store.totals import RunTotals

# Phases of a trial process, in order, with the Timeline marks that bound them.
SPANS = (
    ("start_imports", "started", "ready"),
    ("setup", "assigned", "want"),
    ("queue", "queued", "go"),
    ("device", "go", "release"),
    ("teardown", "release", "ended"),
)
# inside `device`, from the trial
DEVICE_PHASES = ("staging", "inputs", "compile", "check", "warmup", "settle", "timed", "calls")


@dataclass(frozen=True)
class Stage:
    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Throughput:
    trials: int
    trial_wall_s: float  # each process's own time: its start and imports, then its trial (not idle in the pool)
    device_s: float
    wall_s: float  # the measuring stages' wall time
    devices: int
    median_s: Mapping[str, float] = field(default_factory=dict)  # per trial, per phase (SPANS, DEVICE_PHASES)
    total_s: Mapping[str, float] = field(default_factory=dict)  # summed over trials
    stages: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # stage -> trials, wall_s, busy
    per_device: Mapping[int, Mapping[str, float]] = field(default_factory=dict)  # device -> trials, device_s, busy
    # A commit's later trials (slot > 0): their device time against their warm-up and timed work, the
    # share of a device section that measures (issue 23: at most 2x)
    later: Mapping[str, float] = field(default_factory=dict)
    # the later trials' device time part by part (`device_breakdown`): what a later trial still does there
    later_parts: Mapping[str, object] = field(default_factory=dict)

    @property
    def device_busy_fraction(self) -> float:
        return self.device_s / (self.wall_s * self.devices) if self.wall_s > 0 and self.devices else 0.0

    @property
    def trials_per_minute(self) -> float:
        return 60.0 * self.trials / self.wall_s if self.wall_s > 0 else 0.0

    def as_json(self) -> dict[str, object]:
        return {
            "trials": self.trials,
            "trial_wall_s": round(self.trial_wall_s, 2),
            "device_s": round(self.device_s, 2),
            "device_busy_fraction": round(self.device_busy_fraction, 4),
            "wall_s": round(self.wall_s, 2),
            "devices": self.devices,
            "trials_per_minute": round(self.trials_per_minute, 2),
            "median_s": {k: round(v, 3) for k, v in self.median_s.items()},
            "total_s": {k: round(v, 2) for k, v in self.total_s.items()},
            "stages": {k: {m: round(x, 4) for m, x in v.items()} for k, v in self.stages.items()},
            "per_device": {str(k): {m: round(x, 4) for m, x in v.items()} for k, v in self.per_device.items()},
            "later_trials": {k: round(v, 4) for k, v in self.later.items()},
            "later_device_parts": dict(self.later_parts),
        }


def _own_wall(t: Timeline) -> float:
    return t.span("started", "ready") + t.span("assigned", "ended")


def summarize(timelines: Sequence[Timeline], stages: Sequence[Stage], devices: int) -> Throughput:
    """The run's throughput; a trial belongs to the stage during which it was asked for."""
    wall = sum(s.end - s.start for s in stages)
    per: dict[str, list[float]] = {}
    for t in timelines:
        for name, a, b in SPANS:
            per.setdefault(name, []).append(t.span(a, b))
        for name in DEVICE_PHASES:
            per.setdefault(name, []).append(float(t.phases.get(name, 0.0)))
    by_stage = {}
    for s in stages:
        mine = [t for t in timelines if s.start <= t.asked <= s.end]
        device = sum(t.device_s for t in mine)
        span = s.end - s.start
        by_stage[s.name] = {
            "trials": float(len(mine)),
            "wall_s": span,
            "device_s": device,
            "device_busy_fraction": device / (span * devices) if span > 0 and devices else 0.0,
        }
    return Throughput(
        trials=len(timelines),
        trial_wall_s=sum(_own_wall(t) for t in timelines),
        device_s=sum(t.device_s for t in timelines),
        wall_s=wall,
        devices=devices,
        median_s={k: statistics.median(v) for k, v in per.items() if v},
        total_s={k: sum(v) for k, v in per.items()},
        stages=by_stage,
        per_device=per_device(timelines, wall),
        later=later_trials(timelines),
        later_parts=device_breakdown([t for t in timelines if t.slot]).as_json(),
    )


def later_trials(timelines: Sequence[Timeline]) -> dict[str, float]:
    """A commit's later trials (their first compiled cold): trials, device_s, the warm-up and timed
    work inside it, and device_s over that work. Empty when there are none or their slot is unknown."""
    later = [t for t in timelines if t.slot]
    work = sum(float(t.phases.get("warmup", 0.0)) + float(t.phases.get("timed", 0.0)) for t in later)
    if not later or work <= 0:
        return {}
    device = sum(t.device_s for t in later)
    return {
        "trials": float(len(later)),
        "device_s": device,
        "warmup_timed_s": work,
        "device_over_warmup_timed": device / work,
    }


# The parts of a device section besides its phases: what no phase of the trial names, the brief loans
# of its setup, and its process's exit after the release (the next trial waits for it: on a GPU at
# most TEARDOWN_GRACE_S, on the CPU all of it).
UNNAMED, LOANS, AFTER = "unnamed", "setup_loans", "after_release"


def device_parts(t: Timeline, after_cap_s: float = TEARDOWN_GRACE_S) -> dict[str, float]:
    """Seconds per part of one trial's time on its device: each phase inside go..release, what no
    phase names there, its setup's brief loans, and its exit that the device waited for."""
    parts = {name[len(ON_DEVICE) :]: s for name, s in t.phases.items() if name.startswith(ON_DEVICE)}
    parts[UNNAMED] = max(0.0, t.span("go", "release") - sum(parts.values()))
    parts[LOANS] = sum(max(0.0, b - a) for a, b in t.briefs)
    parts[AFTER] = min(t.span("release", "ended"), after_cap_s)
    return parts


@dataclass(frozen=True)
class DeviceBreakdown:
    """A run's device sections part by part (`device_parts`), median and total over its trials, and
    each trial's device time over its warm-up + timed work: the figure issue 60 sets at 2x."""

    trials: int
    median_s: Mapping[str, float]
    total_s: Mapping[str, float]
    ratios: tuple[float, ...]  # per trial with warm-up or timed work, device_s / (warm-up + timed)
    held_ratios: tuple[float, ...]  # the same with its exit after the release, which the device waited for
    deferred: int  # trials that staged some shape under the lock (setup short of device memory)

    def as_json(self) -> dict[str, object]:
        if not self.trials:
            return {}
        return {
            "trials": self.trials,
            "deferred": self.deferred,
            "median_s": {k: round(v, 4) for k, v in self.median_s.items()},
            "total_s": {k: round(v, 3) for k, v in self.total_s.items()},
            "ratio_median": round(statistics.median(self.ratios), 3) if self.ratios else None,
            "ratio_with_exit_median": round(statistics.median(self.held_ratios), 3) if self.held_ratios else None,
        }

    def lines(self) -> list[str]:
        """The breakdown as text: parts by total, largest first."""
        if not self.trials:
            return ["no trial held a device"]
        ratio = (
            f", device / (warm-up + timed): median {statistics.median(self.ratios):.2f}x, with the exit the "
            f"device waited for {statistics.median(self.held_ratios):.2f}x"
            if self.ratios
            else ""
        )
        out = [
            f"{self.trials} trials ({self.deferred} staged some shape under the lock){ratio}",
            f"{'part':<18} {'median s':>9} {'total s':>9}",
        ]
        for name in sorted((k for k, v in self.total_s.items() if v >= 0.005), key=lambda k: -self.total_s[k]):
            out.append(f"{name:<18} {self.median_s[name]:>9.3f} {self.total_s[name]:>9.2f}")
        return out


def device_breakdown(timelines: Sequence[Timeline], after_cap_s: float = TEARDOWN_GRACE_S) -> DeviceBreakdown:
    """Per part, the median (a trial without it counts 0) and total over `timelines` that held a device."""
    held = [t for t in timelines if t.go is not None]
    each = [device_parts(t, after_cap_s) for t in held]
    names = sorted({k for parts in each for k in parts})
    work = [float(t.phases.get("warmup", 0.0)) + float(t.phases.get("timed", 0.0)) for t in held]
    return DeviceBreakdown(
        trials=len(held),
        median_s={k: statistics.median(p.get(k, 0.0) for p in each) for k in names} if each else {},
        total_s={k: sum(p.get(k, 0.0) for p in each) for k in names},
        ratios=tuple(t.device_s / w for t, w in zip(held, work) if w > 0),
        held_ratios=tuple((t.device_s + p[AFTER]) / w for t, p, w in zip(held, each, work) if w > 0),
        deferred=sum(1 for t in held if t.phases.get("deferred") is not None),
    )


def per_device(timelines: Sequence[Timeline], wall_s: float) -> dict[int, dict[str, float]]:
    """Per device: its trials, the time they held it, and that over the measuring wall time."""
    out: dict[int, dict[str, float]] = {}
    for t in timelines:
        d = out.setdefault(t.device, {"trials": 0.0, "device_s": 0.0, "device_busy_fraction": 0.0})
        d["trials"] += 1
        d["device_s"] += t.device_s
    for d in out.values():
        d["device_busy_fraction"] = d["device_s"] / wall_s if wall_s > 0 else 0.0
    return dict(sorted(out.items()))


def describe(t: Throughput, totals: RunTotals | None = None) -> str:
    """One paragraph for the report's header: this call's trial processes (a resumed call's are
    only what was missing; `totals` has every call's)."""
    if not t.trials:
        if totals is not None and totals.trials:
            return (
                f"This call ran no trial process: the {totals.trials} trials above came from the store, "
                f"measured by earlier calls."
            )
        return "No trial process ran in this call (everything came from the store)."
    m = t.median_s
    inside = ", ".join(f"{k} {m.get(k, 0.0):.2f} s" for k in DEVICE_PHASES if m.get(k))
    stages = "; ".join(
        f"{name} {v['trials']:.0f} trials in {v['wall_s'] / 60:.1f} min, busy {v['device_busy_fraction']:.0%}"
        for name, v in t.stages.items()
        if v["trials"]
    )
    call = f" (this call; {totals.trials} over every call)" if totals is not None and totals.trials != t.trials else ""
    return (
        f"Where the time went{call}: {t.trials} trial processes in {t.wall_s / 60:.1f} min of measuring "
        f"({t.trials_per_minute:.1f} a minute), holding the device{'s' if t.devices > 1 else ''} "
        f"{t.device_s / 60:.1f} min: busy {t.device_busy_fraction:.0%} of the time"
        f"{f' over {t.devices} devices' if t.devices > 1 else ''}. Per trial (median): start and imports "
        f"{m.get('start_imports', 0):.2f} s, setup {m.get('setup', 0):.2f} s (both off the device, overlapped "
        f"with other trials), waiting for the device {m.get('queue', 0):.2f} s, on the device "
        f"{m.get('device', 0):.2f} s ({inside}), teardown {m.get('teardown', 0):.2f} s."
        + (f" By stage: {stages}." if stages else "")
        + (
            f" A later trial held the device {t.later['device_s'] / t.later['trials']:.2f} s for "
            f"{t.later['warmup_timed_s'] / t.later['trials']:.2f} s of warm-up and timed work "
            f"({t.later['device_over_warmup_timed']:.2f}x)."
            if t.later
            else ""
        )
    )


def from_records(records: Sequence[object], gap_s: float = 120.0) -> tuple[list[Timeline], list[Stage]]:
    """Timelines of stored trials (one per trial process) and the runs they came from, for a report
    re-made offline: a pause of more than `gap_s` between two trials starts a new run."""
    seen: dict[tuple[object, ...], Timeline] = {}
    for r in records:
        proto = getattr(r, "protocol", {}) or {}
        t = proto.get("timeline")
        key = (getattr(r, "sha", ""), getattr(r, "patch_hash", None), getattr(r, "slot", None), proto.get("log_path"))
        if not isinstance(t, dict) or key in seen or t.get("submitted") is None:
            continue
        from bisector.runner.executor import phase_seconds

        fields = {k: t.get(k) for k in ("started", "ready", "assigned", "want", "go", "release", "ended", "unheld")}
        seen[key] = Timeline(
            str(key[0]),
            key[1],
            int(t.get("device", 0)),
            float(t["submitted"]),
            **fields,
            source=str(t.get("source", "")),
            phases=phase_seconds(proto.get("phases") or (), t.get("go"), t.get("release")),
            briefs=tuple((float(a), float(b)) for a, b in t.get("briefs") or ()),
            slot=int(key[2]) if key[2] is not None else None,
        )
    timelines = sorted(seen.values(), key=lambda t: t.submitted)
    stages: list[Stage] = []
    for t in timelines:
        end = t.ended or t.submitted
        if stages and t.submitted - stages[-1].end <= gap_s:
            stages[-1] = Stage(stages[-1].name, stages[-1].start, max(stages[-1].end, end))
        else:
            stages.append(Stage(f"run {len(stages) + 1}", t.submitted, end))
    return timelines, stages

"""Estimate what a bisection of a real range will cost, by running the search on simulated ranges.

Given the range's length, the measured per-trial noise, the expected number of steps and their
size, we simulate `runs` ranges (steps at random commits in random shapes, SKIPs at `fail_rate`)
and report the distinct commits probed (builds), trials (one trial process covers every shape of
a suite) and GPU time = trials x seconds per trial. With `devices` W the search probes W commits a
round (k-ary, bisector/search/__init__.py) and the wall time is the rounds laid out on W devices
(bisector/search/schedule.py). Pure apart from the simulation's RNG.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from bisector.search import SearchSettings, localize
from bisector.search.schedule import Clocked
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel
from bisector.search.stats import noise_cv

__all__ = ["Plan", "estimate", "noise_from_rows"]


@dataclass(frozen=True)
class Plan:
    commits: int
    steps: int
    step_pct: float
    noise_cv: float
    runs: int
    probes_mean: float
    probes_p90: float
    trials_mean: float
    trials_p90: float
    found_rate: float  # share of simulated steps found at the exact commit
    trial_seconds: float
    build_seconds: float
    devices: int = 1
    rounds_mean: float = 0.0  # probe rounds one after the other
    rounds_p90: float = 0.0
    wall_s_mean: float = 0.0  # rounds laid out on `devices` devices (builds of a round side by side)
    wall_s_p90: float = 0.0

    @property
    def gpu_hours_mean(self) -> float:
        return self.trials_mean * self.trial_seconds / 3600.0

    @property
    def gpu_hours_p90(self) -> float:
        return self.trials_p90 * self.trial_seconds / 3600.0

    @property
    def wall_hours_mean(self) -> float:
        return self.wall_s_mean / 3600.0

    @property
    def build_hours_mean(self) -> float:
        return self.probes_mean * self.build_seconds / 3600.0

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = dict(self.__dict__)
        out.update(
            gpu_hours_mean=self.gpu_hours_mean,
            gpu_hours_p90=self.gpu_hours_p90,
            build_hours_mean=self.build_hours_mean,
            wall_hours_mean=self.wall_hours_mean,
            probes_bound=self.steps * math.ceil(math.log2(max(2, self.commits))) + 4,
        )
        return out


def estimate(
    n_commits: int,
    noise: float,
    steps: int = 1,
    step_pct: float = 5.0,
    shapes: int = 3,
    fail_rate: float = 0.0,
    trial_seconds: float = 60.0,
    build_seconds: float = 0.0,
    settings: SearchSettings = SearchSettings(),
    runs: int = 40,
    seed: int = 0,
    devices: int = 1,
) -> Plan:
    """Simulate `runs` ranges like the real one and summarize the search's cost on `devices` devices."""
    if n_commits < 2:
        raise ValueError("a range needs at least 2 commits")
    steps = max(0, min(steps, n_commits - 1))
    names = [f"shape{j}" for j in range(max(1, shapes))]
    settings = replace(settings, width=max(1, devices))
    probes, trials, rounds, walls, hits, total = [], [], [], [], 0, 0
    for run in range(runs):
        rng = np.random.default_rng([seed, run])
        shas = [hashlib.sha1(f"{seed}/{run}/{i}".encode()).hexdigest() for i in range(n_commits)]
        at = sorted(rng.choice(np.arange(1, n_commits), size=steps, replace=False).tolist()) if steps else []
        sim = tuple(SimStep(shas[i], {names[int(rng.integers(len(names)))]: 1 - step_pct / 100}) for i in at)
        fails = frozenset(s for s in shas[1:-1] if rng.random() < fail_rate)
        model = StepModel({n: 1.0 for n in names}, sim, fails)
        clocked = Clocked(SimulatedProbe(shas, model, noise, seed=run), devices, trial_seconds, build_seconds)
        r = localize(shas, clocked, settings)
        probes.append(r.commits_probed)
        trials.append(r.trials)
        rounds.append(clocked.rounds)
        walls.append(clocked.wall_s)
        got = {s.commit for s in r.steps}
        hits += sum(s.commit in got for s in sim)
        total += len(sim)
    return Plan(
        commits=n_commits,
        steps=steps,
        step_pct=step_pct,
        noise_cv=noise,
        runs=runs,
        probes_mean=float(np.mean(probes)),
        probes_p90=float(np.percentile(probes, 90)),
        trials_mean=float(np.mean(trials)),
        trials_p90=float(np.percentile(trials, 90)),
        found_rate=hits / total if total else 1.0,
        trial_seconds=trial_seconds,
        build_seconds=build_seconds,
        devices=max(1, devices),
        rounds_mean=float(np.mean(rounds)),
        rounds_p90=float(np.percentile(rounds, 90)),
        wall_s_mean=float(np.mean(walls)),
        wall_s_p90=float(np.percentile(walls, 90)),
    )


def noise_from_rows(rows: Iterable[Mapping[str, object]]) -> tuple[float, int]:
    """Per-trial CV pooled over (commit, shape) groups of OK trials, and how many groups had repeats."""
    groups: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if str(row.get("status") or "ok").lower() != "ok" or row.get("patch_hash"):
            continue
        value = row.get("value", row.get("ratio"))
        if value is None or not isinstance(value, (int, float)) or not value > 0:
            continue
        groups.setdefault((str(row.get("sha")), str(row.get("shape"))), []).append(float(value))
    usable: Sequence[list[float]] = [g for g in groups.values() if len(g) >= 2]
    return noise_cv(usable), len(usable)

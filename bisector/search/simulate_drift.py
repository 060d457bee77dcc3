"""A simulated probe that times a subject and a control in each trial on a simulated clock, the
control drifting with time: what the search must tell apart from a step (bisector/search/drift.py).

Each trial process takes `trial_s` seconds of the clock and times every shape it is asked for: the
subject's speed is its commit's level (the product of the step model's factors up to the commit)
times lognormal noise; the control's is 1 plus `control_drift_pct` reached linearly over
`drift_s` seconds and flat after, times its own noise. The sample is their ratio (the configured
metric); the views hold the subject, the control and the ratio, the times when each trial ran, and
with a latency model the latency of eager calls (its own levels, its own noise). Pure but for the
seeded generator.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from bisector.model import Measurement, ProbeStatus
from bisector.search.prober import ProbeBase
from bisector.search.simulate import StepModel

__all__ = ["DriftingProbe"]


def _levels(commits: Sequence[str], model: StepModel) -> dict[str, dict[str, float]]:
    at = {s.commit: s for s in model.steps}
    current = {name: 1.0 for name in model.shapes}
    out = {}
    for sha in commits:
        for name, f in at[sha].factors.items() if sha in at else ():
            current[name] *= f
        out[sha] = dict(current)
    return out


class DriftingProbe(ProbeBase):
    """probe(sha, repeats) and `shaped` over a step model, with a control that drifts in time."""

    shapes_alone = True

    def __init__(
        self,
        commits: Sequence[str],
        model: StepModel,
        *,
        subject_cv: float = 0.005,
        control_cv: float = 0.005,
        control_drift_pct: float = 4.0,
        drift_s: float = 120.0,
        trial_s: float = 3.0,
        seed: int = 0,
        latency: StepModel | None = None,
        latency_cv: float = 0.02,
        latency_view: str = "latency",
        latency_missed: float = 0.0,
    ) -> None:
        self.level = _levels(commits, model)
        self.latency = _levels(commits, latency) if latency is not None else None
        self.model, self.trial_s, self.drift_s, self.drift = model, trial_s, drift_s, control_drift_pct / 100.0
        self.latency_view = latency_view  # the view the latency model feeds ("warm": a warm-cache time's ratio)
        self.latency_missed = latency_missed  # the share of trials that time no latency (judged device-bound)
        self.sigmas = (
            math.sqrt(math.log1p(subject_cv**2)),
            math.sqrt(math.log1p(control_cv**2)),
            math.sqrt(math.log1p(latency_cv**2)),
        )
        self.rng = np.random.default_rng(seed)
        self.clock = 0.0
        self.trials = 0
        # sha -> shape -> [(ratio, subject, control, latency, time)]
        self.kept: dict[str, dict[str, list[tuple[float, float, float, float, float]]]] = {}

    def control_at(self, t: float) -> float:
        return 1.0 + self.drift * min(1.0, t / self.drift_s) if self.drift_s > 0 else 1.0 + self.drift

    def _noise(self, k: int) -> float:
        s = self.sigmas[k]
        return float(math.exp(self.rng.normal(-s * s / 2.0, s)))

    def _trial(self, sha: str, shapes: Sequence[str]) -> None:
        """One trial process: every shape in `shapes` timed at this moment of the clock."""
        self.trials += 1
        self.clock += self.trial_s
        have = self.kept.setdefault(sha, {name: [] for name in self.model.shapes})
        for name in shapes:
            subject = self.level[sha][name] * self._noise(0)
            control = self.control_at(self.clock) * self._noise(1)
            lat = self.latency[sha][name] * self._noise(2) if self.latency is not None else math.nan
            if self.latency_missed and self.rng.random() < self.latency_missed:
                lat = math.nan
            have[name].append((subject / control, subject, control, lat, self.clock))

    def _measurement(self, sha: str, cut: Mapping[str, int]) -> Measurement:
        have = self.kept[sha]
        rows = {k: have[k][:n] for k, n in cut.items()}
        views = {
            v: {k: tuple(r[q] for r in rs) for k, rs in rows.items()}
            for q, v in ((0, "ratio"), (1, "subject"), (2, "control"))
        }
        if self.latency is not None:
            # as samples.trial_views: from the trials that timed it
            views[self.latency_view] = {k: tuple(r[3] for r in rs if not math.isnan(r[3])) for k, rs in rows.items()}
        return Measurement(
            sha,
            ProbeStatus.OK,
            {k: tuple(r[0] for r in rs) for k, rs in rows.items()},
            views=views,
            times={k: tuple(r[4] for r in rs) for k, rs in rows.items()},
        )

    def __call__(self, sha: str, repeats: int) -> Measurement:
        have = self.kept.setdefault(sha, {name: [] for name in self.model.shapes})
        while min(len(v) for v in have.values()) < repeats:
            self._trial(sha, [k for k, v in have.items() if len(v) < repeats])
        return self._measurement(sha, {k: len(v) for k, v in have.items()})

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        """Each commit's own count per shape, of those shapes only; commits side by side, in turns."""
        for sha in wants:
            self.kept.setdefault(sha, {name: [] for name in self.model.shapes})
        while True:
            short = {sha: [k for k, n in per.items() if len(self.kept[sha][k]) < n] for sha, per in wants.items()}
            short = {sha: ks for sha, ks in short.items() if ks}
            if not short:
                break
            for sha, ks in short.items():
                self._trial(sha, ks)
        return {sha: self._measurement(sha, dict(per)) for sha, per in wants.items()}

    @contextmanager
    def independent(self) -> Iterator[None]:
        yield

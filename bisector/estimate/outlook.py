"""How many more trials a running search will take: the search itself run on to its end, in worlds
drawn from what its trials have shown.

The event forecast (forecast.py) sees where the search is but no measurement, so it cannot tell a
range of one step from a range of five, nor a pair that will double to the cap from one that is
decided at once; its estimate rests on a prior until the search has walked the range
(studies/results/estimate-accuracy.txt). The search is cheap to run (10-120 ms for a 500-commit
simulated range) and deterministic: given the trials it had, in the order it had them, it takes
the same path again. So the outlook runs `localize` over a probe that hands back the recorded
trials first (`_Replay`); where the search asks for more, it draws them from a world consistent
with the measurements (`_World`):

- each measured commit's level per shape is its mean (in log), pooled with its measured neighbours
  where no step is drawn between them; a pair of measured neighbours holds a step with the
  posterior chance of one given their difference, its standard error from the run's pooled noise,
  and a prior of `steps_prior` steps a range spread over the commits (a step's size ~ N(0, tau^2),
  tau a few minimum steps); the step sits at a commit drawn uniformly between them, one for each
  suite whose shapes it moves (a kernel change moves its own kernel: on the H100 demo the first
  grid part's attention and GEMM moves were two steps, #108 and #115, and a world that drew one
  there left the estimate at 0.67 of the final after a minute; 0.80 with a step per suite);
- a new trial is the level times a noise residual drawn from the run's own (heavy tails and all);
- a commit not measured yet fails to build at the rate the measured ones did, and is wrong on a
  shape where both its measured neighbours are.

`draws` such runs give the trials still to come: their mean and spread. Pure: no clock, no I/O.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from bisector.model import Measurement, ProbeStatus
from bisector.search import SearchSettings, localize
from bisector.search.drift import merged_measurement
from bisector.search.prober import ProbeBase

__all__ = ["Outlook", "SearchBasis", "outlook"]

STEP_SIZE_IN_MIN_STEPS = 4.0  # tau, the sd of a step's size, in minimum steps (the regimes' steps: 1-15x theirs)
WILD = 4.0  # a trial further off its commit than this many robust sds is wild: not the noise new trials are drawn with


@dataclass(frozen=True)
class SearchBasis:
    """What the outlook runs the search again on: its range (GOOD..BAD), its settings, and whether
    its probe measures commits side by side (`together`) and shapes alone (`shaped`): the search
    takes another path without them."""

    commits: tuple[str, ...]
    settings: SearchSettings
    together: bool = True
    shaped: bool = True


@dataclass(frozen=True)
class Outlook:
    """Trials still to come, over `draws` runs of the search to its end."""

    remaining: float  # their mean
    low: float  # 10th percentile
    high: float  # 90th percentile
    steps: float  # steps the runs verified, their mean (the later stages' culprits)
    draws: int


class _World:
    """One draw of what the commits not measured yet (and more trials of those measured) read."""

    def __init__(
        self,
        commits: Sequence[str],
        measured: Mapping[str, Measurement],
        settings: SearchSettings,
        rng: np.random.Generator,
        steps_prior: float,
    ) -> None:
        self.commits, self.rng, self.settings, self.steps_prior = commits, rng, settings, steps_prior
        self.index = {sha: i for i, sha in enumerate(commits)}
        self.span = max(1, len(commits) - 1)
        ok = {self.index[s]: m for s, m in measured.items() if s in self.index and m.status is ProbeStatus.OK}
        failed = sum(1 for s, m in measured.items() if s in self.index and m.status is ProbeStatus.SKIP)
        self.fail_rate = (failed + 0.5) / (len(ok) + failed + 5.0)
        self.fails: dict[int, bool] = {}
        self.known = sorted(ok)
        self.wrong = {i: m.wrong for i, m in ok.items()}
        shapes = sorted({s for m in ok.values() for s in m.samples})
        self.logs = {
            shape: _screened(
                {
                    i: np.log(np.asarray(ok[i].samples[shape], dtype=float))
                    for i in self.known
                    if shape not in ok[i].wrong and ok[i].samples.get(shape)
                }
            )
            for shape in shapes
        }
        self.sds: dict[str, float] = {}
        self.residuals: dict[str, np.ndarray] = {}
        for shape in shapes:
            res = [(v - v.mean()) * math.sqrt(len(v) / (len(v) - 1)) for v in self.logs[shape].values() if len(v) > 1]
            pooled = np.concatenate(res) if res else np.zeros(0)
            guess = math.log1p(settings.min_step(shape) / 100.0) / 2  # before two trials of a commit: half a step
            self.sds[shape] = float(np.sqrt(np.mean(pooled**2))) if len(pooled) >= 4 else guess
            self.residuals[shape] = pooled if len(pooled) >= 4 else rng.normal(0.0, guess, 64)
        drawn = self._steps(shapes)
        self.levels = {shape: self._levels(shape, drawn) for shape in shapes}  # shape -> (points, levels, steps at)

    def _ratio(self, shape: str, a: int, b: int) -> float:
        """log of how much better a step (of size ~N(0, tau^2)) explains the difference of a and b than none."""
        la, lb = self.logs[shape][a], self.logs[shape][b]
        tau = STEP_SIZE_IN_MIN_STEPS * math.log1p(self.settings.min_step(shape) / 100.0)
        return _log_ratio(
            float(lb.mean() - la.mean()), self.sds[shape] ** 2 * (1.0 / len(la) + 1.0 / len(lb)), tau * tau
        )

    def _steps(self, shapes: Sequence[str]) -> dict[int, list[tuple[int, set[str]]]]:
        """A step or none between each two measured neighbours (a -> where each suite's part of it
        is, the shapes it moves), on every shape measured at both: a step moves each shape with even
        odds before the trials show it, so each brings (R + 1) / 2 of its own likelihood ratio R."""
        drawn: dict[int, list[tuple[int, set[str]]]] = {}
        for a, b in zip(self.known, self.known[1:]):
            ratios = {s: self._ratio(s, a, b) for s in shapes if a in self.logs[s] and b in self.logs[s]}
            shown = sum(math.log(0.5) + np.logaddexp(r, 0.0) for r in ratios.values())
            if self.rng.random() < _chance(_log_odds(self.steps_prior * (b - a) / self.span) + shown):
                moved = {s for s in shapes if self.rng.random() < (_chance(ratios[s]) if s in ratios else 0.5)}
                suites: dict[str, set[str]] = {}
                for s in moved:
                    suites.setdefault(_suite(s), set()).add(s)
                drawn[a] = [(self._between(a, b), group) for group in suites.values()] or [(self._between(a, b), set())]
        return drawn

    def _between(self, a: int, b: int) -> int:
        return int(a + 1 + math.floor(self.rng.random() * (b - a)))

    def _levels(
        self, shape: str, drawn: Mapping[int, list[tuple[int, set[str]]]]
    ) -> tuple[list[int], list[float], list[int]]:
        """The shape's measured commits, their levels and the commits its steps sit at: measured
        commits with no step between them share one level (their trials pooled)."""
        logs = self.logs[shape]
        pts = sorted(logs)
        steps_at: list[int] = []
        blocks: list[list[int]] = [[pts[0]]] if pts else []
        for a, b in zip(pts, pts[1:]):
            inside = [step for g in self.known if a <= g < b and g in drawn for step in drawn[g]]
            if self.known[self.known.index(a) + 1] == b:  # neighbours in the run: the gap's own draw
                at = next((where for where, moved in inside if shape in moved), None)
            else:  # a window of wrong results between: this shape's own trials decide
                odds = _log_odds(0.5 * self.steps_prior * (b - a) / self.span) + self._ratio(shape, a, b)
                at = None if self.rng.random() >= _chance(odds) else inside[0][0] if inside else self._between(a, b)
            if at is None:
                blocks[-1].append(b)
            else:
                steps_at.append(at)
                blocks.append([b])
        level: dict[int, float] = {}
        for block in blocks:
            weight = sum(len(logs[i]) for i in block)
            level.update(dict.fromkeys(block, sum(float(logs[i].sum()) for i in block) / weight))
        return pts, [level[i] for i in pts], steps_at

    def fails_at(self, sha: str) -> bool:
        i = self.index[sha]
        if i not in self.fails:
            self.fails[i] = bool(self.rng.random() < self.fail_rate)
        return self.fails[i]

    def wrong_at(self, sha: str) -> frozenset[str]:
        """A shape wrong at both measured neighbours is wrong here too (a window of wrong results)."""
        i = self.index[sha]
        if i in self.wrong:
            return self.wrong[i]
        j = np.searchsorted(self.known, i)
        if j == 0 or j == len(self.known):
            return frozenset()
        return self.wrong[self.known[j - 1]] & self.wrong[self.known[j]]

    def level(self, sha: str, shape: str) -> float:
        if shape not in self.levels or not self.levels[shape][0]:
            return 0.0  # a shape wrong wherever it was measured: its values are never compared
        pts, levels, steps_at = self.levels[shape]
        i = self.index[sha]
        j = int(np.searchsorted(pts, i))
        if j < len(pts) and pts[j] == i:
            return levels[j]
        if j == 0:
            return levels[0]
        if j == len(pts):
            return levels[-1]
        a, b = pts[j - 1], pts[j]
        at = next((s for s in steps_at if a < s <= b), None)
        return levels[j] if at is None or i >= at else levels[j - 1]

    def draw(self, sha: str, shape: str) -> float:
        res = self.residuals.get(shape, np.zeros(1))
        return float(math.exp(self.level(sha, shape) + res[int(self.rng.integers(len(res)))]))


def _suite(shape: str) -> str:
    """A shape key's suite ("fa/s16384" -> "fa"); "" for a key without one (one suite for all)."""
    return shape.split("/", 1)[0] if "/" in shape else ""


def _screened(logs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Each commit's trials without its wild ones (further from its median than WILD robust sds of
    the run's noise). A commit's level and the noise new trials are drawn with are the ordinary
    trials': one cold first trial read 52% fast on the H200 demo made a step of its commit in
    every world, and drawn at their rate the wild trials doubled pairs the run did not."""
    spread = np.concatenate(
        [(v - v.mean()) * math.sqrt(len(v) / (len(v) - 1)) for v in logs.values() if len(v) > 1] or [np.zeros(0)]
    )  # about the mean: of three about their median, one is 0
    robust = 1.4826 * float(np.median(np.abs(spread))) if len(spread) else 0.0
    if robust <= 0:
        return logs
    return {i: kept if len(kept := v[np.abs(v - np.median(v)) <= WILD * robust]) else v for i, v in logs.items()}


def _log_ratio(d: float, se2: float, tau2: float) -> float:
    """log N(d; 0, se2 + tau2) / N(d; 0, se2): how much better a step explains the difference d."""
    if se2 <= 0:
        return 50.0 if d else 0.0
    both = se2 + tau2
    return 0.5 * math.log(se2 / both) + 0.5 * d * d * (1.0 / se2 - 1.0 / both)


def _log_odds(expected: float) -> float:
    """The prior log odds of a step where `expected` steps are expected (Poisson: at least one)."""
    p = -math.expm1(-max(expected, 1e-9))
    return math.log(p) - math.log1p(-p) if p < 1.0 else 50.0


def _chance(log_odds: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, log_odds))))


class _Replay(ProbeBase):
    """A cumulative probe that gives the recorded trials first, in order, then the world's."""

    def __init__(self, measured: Mapping[str, Measurement], world: _World, together: bool, shaped: bool) -> None:
        self.measured, self.world = measured, world
        self.served: dict[str, dict[str, int]] = {}
        self.drawn: dict[str, dict[str, list[float]]] = {}
        self.trials = 0  # trial processes beyond the recorded ones
        self.side_by_side, self.shapes_alone = together, shaped  # the run's probe's, so the search takes its path

    def _serve(self, sha: str, per: Mapping[str, int], full: bool) -> Measurement:
        rec = self.measured.get(sha)
        if (rec is not None and rec.status is not ProbeStatus.OK) or (rec is None and self.world.fails_at(sha)):
            return Measurement(sha, ProbeStatus.SKIP, reason="replayed")
        wrong = rec.wrong if rec is not None else self.world.wrong_at(sha)
        served = self.served.setdefault(sha, {})
        drawn = self.drawn.setdefault(sha, {})
        new = 0
        for shape, n in per.items():
            have = rec.samples.get(shape, ()) if rec is not None else ()
            extra = drawn.setdefault(shape, [])
            while len(have) + len(extra) < n:
                extra.append(self.world.draw(sha, shape))
            before = served.get(shape, 0)
            served[shape] = max(before, n)
            new = max(new, served[shape] - max(before, len(have)))
        self.trials += new
        had = rec.samples if rec is not None else {}
        return Measurement(
            sha,
            ProbeStatus.OK,
            {s: (*had.get(s, ()), *drawn.get(s, ()))[: served[s]] for s in (served if full else per)},
            wrong=wrong,
        )

    def _shapes(self, sha: str) -> list[str]:
        rec = self.measured.get(sha)
        return list(rec.samples) if rec is not None and rec.samples else list(self.world.levels)

    def __call__(self, sha: str, repeats: int) -> Measurement:
        return self._serve(sha, dict.fromkeys(self._shapes(sha), repeats), True)

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        return {sha: self(sha, n) for sha, n in wants.items()}

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        return {sha: self._serve(sha, per, False) for sha, per in wants.items()}

    @contextmanager
    def independent(self) -> Iterator[None]:
        yield


def outlook(
    basis: SearchBasis, measured: Mapping[str, Measurement], *, draws: int = 8, seed: int = 0, steps_prior: float = 2.0
) -> Outlook | None:
    """The trials the search will still take, given the measurements it has (`measured`: each
    commit's latest, as the search holds them). None before GOOD or BAD is measured: nothing to
    draw a world from."""
    commits = basis.commits
    if (
        not (measured.get(commits[0]) or measured.get(commits[-1]))
        or sum(1 for m in measured.values() if m.status is ProbeStatus.OK) < 2
    ):
        return None
    key = hashlib.sha1(repr(sorted((s, m.count()) for s, m in measured.items())).encode()).digest()
    rng = np.random.default_rng([seed, int.from_bytes(key[:8], "big")])
    left, steps = [], []
    for _ in range(draws):
        world = _World(commits, measured, basis.settings, rng, steps_prior)
        replay = _Replay(measured, world, basis.together, basis.shaped)
        steps.append(len(localize(commits, replay, basis.settings).steps))
        left.append(replay.trials)
    return Outlook(
        float(np.mean(left)),
        float(np.percentile(left, 10)),
        float(np.percentile(left, 90)),
        float(np.mean(steps)),
        draws,
    )


def merged(have: Measurement | None, new: Measurement) -> Measurement:
    """A commit's measurement as the search holds it after `new` (a probe of some shapes only
    replaces those: search/drift.py merged_measurement); a SKIP does not replace trials already had."""
    if have is None or have.status is not ProbeStatus.OK:
        return new
    return merged_measurement(have, new) if new.status is ProbeStatus.OK else have

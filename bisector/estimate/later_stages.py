"""How many trials the stages after the search take, for the progress line's whole-run estimate.

Each later stage measures checks side by side in rounds (bisector/why/):
- "fixes": verify_fixes measures the tip, each culprit's parent, each revert carried to the tip and
  each interacting group's combinations of two or more reverts (2^k - 1 - k builds for k steps on
  shared shapes; the tip and the single reverts are shared), n = max(2, protocol.trials) trials
  each (fixes.expected_trials); while a revert's place is open, it, its parent and the tip get as
  many trials again, and while a group's pair is unclear its combinations and single reverts do:
  n, 2n, 4n, ... up to protocol.max_trials.
- "hunks": per culprit, delta debugging over its hunk groups (or a plumbing base, then the pieces on
  top of it): a level measures two subsets and the parent, n = protocol.trials each; a subset
  still unclear gets n more, up to MAX_ROUNDS rounds (culprit_hunks.expected_trials counts the
  levels at one round each).

So a stage costs its first rounds (what it announces when it starts) times the growth of a check
that is still open after a round with chance q: doubling to the cap (fixes), or one more round of n
(hunks). q per device kind and stage is measured on the recorded demo runs
(studies/later_stages.py, studies/results/later-stages.txt): the H200 demo's 3% minimum step
keeps a check open more often than the CPU demo's 15-20%. Before the culprits are known (during the
search) the first rounds per culprit are the demos' (most culprits regressions with a revert, two
groups of steps on shared shapes, two-hunk commits and one plumbed one).

StageTracker follows a stage's trials as they start and corrects its count with what they show:
first rounds still to come, batches under way, a check that went on to another round. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["StageCost", "LaterModel", "StageTracker", "CALIBRATED", "model_for"]

#: culprit_hunks.MAX_ROUNDS: rounds of trials a hunk subset may get (tests/test_later_stages.py ties them)
HUNK_ROUNDS = 4


@dataclass(frozen=True)
class StageCost:
    """One later stage: its first rounds per culprit, in the stage's n trials a check, and the chance
    that a check is still open after a round (it then gets another: `rule`)."""

    first: float  # checks' first rounds per culprit, each n trials
    q: float  # chance a check is still open after a round
    rule: Literal["double", "rounds"]  # another round doubles the check's trials (up to the cap), or adds n


@dataclass(frozen=True)
class LaterModel:
    """The later stages of one device kind."""

    stages: dict[str, StageCost] = field(default_factory=dict)

    def side(self, stage: str, trials: int) -> int:
        """The trials of a check's first round: fixes and interactions take two at least."""
        return max(2, trials) if stage == "fixes" else max(1, trials)

    def growth(self, stage: str, trials: int, cap: int) -> float:
        """What a check costs over all its rounds, in its first round's trials."""
        cost = self.stages.get(stage)
        if cost is None:
            return 1.0
        n = self.side(stage, trials)
        return 1.0 + onward(cost, n, n, cap) / n

    def trials(self, steps: float, trials: int, cap: int, stages: Iterable[str]) -> float:
        """Trials the later `stages` take after a search that found `steps` culprits."""
        return sum(
            steps * self.stages[s].first * self.side(s, trials) * self.growth(s, trials, cap)
            for s in stages
            if s in self.stages
        )


def onward(cost: StageCost, n: int, level: int, cap: int) -> float:
    """Trials a check at `level` trials is expected to take from here: each further round with
    chance q times the last's."""
    top = max(n, cap) if cost.rule == "double" else HUNK_ROUNDS * n
    more, chance = 0.0, 1.0
    while level < top:
        step = min(level, top - level) if cost.rule == "double" else min(n, top - level)
        chance *= cost.q
        more += chance * step
        level += step
    return more


# Measured on the recorded demo runs (python -m studies.later_stages; studies/results/later-stages.txt),
# per device kind ("cpu"; "gpu": any other): the first rounds per verified culprit as the stages
# announce them, and the q whose growth is what the stages took over those. The fixes stage with
# the interactions' combinations in its rounds (18122bb): on the H200 2.3 first rounds a culprit,
# x2.81 (two runs). On the CPU from 81a933b (fresh samples after each shape's own count, the search
# on a pair's unclear shapes): 2.7 first rounds, and not one check went on past its first round in
# seven runs at cc7a9ff (five quiet, two with both cores busy), so q = 0 (x1.94 at f6f2e2c, q 0.44,
# over-estimated those runs by 1.56x at one minute). Hunks x0.86-0.97 on the CPU, x1.35 on the H200.
CALIBRATED = {
    "cpu": LaterModel({"fixes": StageCost(2.7, 0.0, "double"), "hunks": StageCost(4.3, 0.0, "rounds")}),
    "gpu": LaterModel({"fixes": StageCost(2.3, 0.73, "double"), "hunks": StageCost(4.2, 0.26, "rounds")}),
}


def model_for(device: str | None) -> LaterModel:
    """The calibrated later stages of a config's device kind (None: a GPU's)."""
    return CALIBRATED["cpu" if device == "cpu" else "gpu"]


@dataclass
class _Check:
    """One build (commit, patch) measured in the stage: its trials before this part of the stage
    (`start`), what its latest batch asks for (`level`) and has started (`got`)."""

    start: int
    level: int
    got: int
    open: bool = True


class StageTracker:
    """A later stage's trials as they start (each its check's k-th of n asked for now): the trials
    still to come are the first rounds not yet started (at the stage's growth), what the batches
    under way still lack, and each open check's further rounds.

    A new round of a check is a batch that doubles it ("double") or adds n ("rounds"); a batch past
    that starts the check anew (the same build in the stage's next part: the tip and the single
    reverts again in the interactions). The first pass of every round names the checks still open:
    a check whose batch is done and that is not measured in it is closed."""

    def __init__(self, stage: str, model: LaterModel, announced: int, trials: int, cap: int) -> None:
        self.cost = model.stages.get(stage)
        self.n = model.side(stage, trials)
        self.cap = max(self.n, cap)
        self.growth = model.growth(stage, trials, cap)
        self.announced = announced
        self.checks: dict[tuple[str, str | None], _Check] = {}
        self.first_seen = 0
        self.passing: set[tuple[str, str | None]] | None = None  # the checks of a round's first pass
        self.opened = self.closed = 0  # rounds a check went on to, and checks decided short of the cap

    def trial(self, key: tuple[str, str | None], k: int, n: int | None = None) -> None:
        c = self.checks.get(key)
        wanted = max(k, n or k)
        if c is not None and wanted <= c.start + c.level:  # a trial of the batch under way
            c.got = max(c.got, k - c.start)
            self._end_pass()
            return
        if c is not None and c.open and self._next_round(c, wanted - c.start, key[1] is not None):
            c.level, c.got = wanted - c.start, k - c.start
            self.opened += 1
        else:  # a new check, or this build again in the next part of the stage
            if c is not None and c.open:
                self._close(c)
            c = self.checks[key] = _Check(k - 1, wanted - (k - 1), 1)
            self.first_seen += min(c.level, self.n)
        if self.passing is None:
            self.passing = set()
        self.passing.add(key)

    def _next_round(self, c: _Check, level: int, patched: bool) -> bool:
        """The batch is the check's next round (not its build measured again in the next part).
        A hunk search's parent gets n more at every round and every level alike: a new part."""
        if self.cost is None or c.got < c.level:
            return False
        if self.cost.rule == "double":
            return level == min(2 * c.level, self.cap) and c.level < self.cap
        return patched and level == c.level + self.n and level <= HUNK_ROUNDS * self.n

    def _end_pass(self) -> None:
        """The round's first pass is over: a check done with its batch and not in it is decided."""
        if self.passing is None:
            return
        for key, c in self.checks.items():
            if c.open and key not in self.passing and c.got >= c.level:
                self._close(c)
        self.passing = None

    def _close(self, c: _Check) -> None:
        c.open = False
        top = self.cap if self.cost is None or self.cost.rule == "double" else HUNK_ROUNDS * self.n
        self.closed += c.level < top

    def end(self) -> None:
        """The stage is over: every check is decided (for the counts of `opened` and `closed`)."""
        self._end_pass()
        for c in self.checks.values():
            if c.open:
                self._close(c)

    def remaining(self) -> float:
        """Trials the stage is still expected to start."""
        first_left = max(0, self.announced - self.first_seen) * self.growth
        under_way = sum(c.level - c.got for c in self.checks.values() if c.open)
        more = (
            sum(onward(self.cost, self.n, c.level, self.cap) for c in self.checks.values() if c.open)
            if self.cost is not None
            else 0.0
        )
        return first_left + under_way + more

"""How long a search takes on W devices: rounds of probes, and each round's wall time. Pure.

The search asks its probe for one commit, or for several at once (`together`); each call is a
round, and the next one cannot start before it ends (the search decides from its answer). A
round's wall time is its trials laid out on W devices the way the executor runs them: a commit's
first trial compiles cold and its other trials wait for it; otherwise any trial takes the first
free device. `Clocked` wraps any probe (a simulated one, in `plan` and `simulate`) and adds up
rounds, trials and wall time, so 1 device and W devices can be put side by side.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from bisector.model import Measurement, Probe, SampleCounts
from bisector.search.prober import ProbeBase, Prober, as_prober

__all__ = ["Cost", "Clocked", "makespan"]


def makespan(trials: Sequence[int], devices: int) -> int:
    """Wall time, in trial lengths, of one round that runs `trials[i]` trials of commit i on
    `devices` devices: trials handed out one per commit in turn, each to the device free first,
    a commit's later trials no earlier than its first has ended."""
    free = [0] * max(1, devices)
    heapq.heapify(free)
    first_end: dict[int, int] = {}
    end = 0
    for r in range(max(trials, default=0)):
        for i, n in enumerate(trials):
            if r >= n:
                continue
            start = max(heapq.heappop(free), first_end.get(i, 0) if r else 0)
            done = start + 1
            if r == 0:
                first_end[i] = done
            heapq.heappush(free, done)
            end = max(end, done)
    return end


@dataclass(frozen=True)
class Cost:
    """What a search cost: rounds (probe calls one after the other), trials, and wall seconds."""

    devices: int
    rounds: int
    trials: int
    wall_s: float

    def as_dict(self) -> dict[str, float | int]:
        return {"devices": self.devices, "rounds": self.rounds, "trials": self.trials, "wall_s": round(self.wall_s, 1)}


class Clocked(ProbeBase):
    """A probe that counts the rounds and trial processes it is asked for and their wall time on
    `devices` devices (`trial_s` a trial, `build_s` once per round that needs a new build: builds of
    one round run side by side on the workers). Calls that measure some shapes alone (`shaped`) and
    fresh lineages (`independent`) go through where the wrapped probe has them, so the search takes
    the path it takes through the pipeline's StoreProbe."""

    side_by_side = True

    def __init__(self, probe: Prober | Probe, devices: int = 1, trial_s: float = 60.0, build_s: float = 0.0) -> None:
        self.probe, self.devices, self.trial_s, self.build_s = as_prober(probe), max(1, devices), trial_s, build_s
        self.counts = SampleCounts()
        self.rounds = 0
        self.trials = 0
        self.wall_s = 0.0
        self.shapes_alone = self.probe.shapes_alone

    def __call__(self, sha: str, repeats: int) -> Measurement:
        return self.together({sha: repeats})[sha]

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        return self._round({sha: self.probe(sha, n) for sha, n in wants.items()})

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        return self._round(self.probe.shaped(wants))

    def independent(self) -> AbstractContextManager[None]:
        return self.probe.independent()

    def _round(self, got: dict[str, Measurement]) -> dict[str, Measurement]:
        built = any(sha not in self.counts for sha in got)
        new = [self.counts.add(sha, m) for sha, m in got.items()]
        self.rounds += 1
        self.trials += sum(new)
        self.wall_s += makespan(new, self.devices) * self.trial_s + (self.build_s if built else 0.0)
        return got

    def cost(self) -> Cost:
        return Cost(self.devices, self.rounds, self.trials, self.wall_s)

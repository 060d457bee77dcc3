"""What measuring a split point (or a verification's look) on open shapes only costs and saves, on
simulated ranges.

    python -m studies.split_shapes [--ranges 40] [--seed 0] [--setting split_on_moved|verify_on_open]

Why: `SearchSettings.split_on_moved` measures a commit the search splits a part at on the shapes
not shown the same between the part's ends, where the probe can time shapes alone. On the H200
demo's six shapes a GEMM step's split points timed attention, ~3 s of a first trial's 4.3 s on the
device. Each simulated range (150-400 commits, three shapes of unequal cost, 1-3 steps on one or two
shapes each, some commits that do not build, the H200's noise regimes) is searched both ways with
the same seed: printed per regime, the ranges whose steps were all found at their exact commits,
the false steps, the candidates dropped at verification, the trial processes, and the shape-trials
weighted by each shape's cost (attention 0.8, the GEMMs 0.2 and 0.03 device s a trial: the H200
demo's medians), and the found steps that name exactly the shapes their step moves.
`--setting verify_on_open` compares the same way a verification's fresh looks on the step's shapes
and those its pair has not shown the same (`SearchSettings.verify_on_open`) against every shape.
The pipeline's probe times shapes alone (`StoreProbe.shaped`), as
`SimulatedProbe.shaped` does here; `Clocked` (studies/search_accuracy.py) does not, so those
figures are of every-shape searches.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass

import numpy as np

from bisector.search import SearchSettings, localize
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel

COST = {"fa/s16384": 0.8, "gemm/m54560": 0.2, "gemm/m8192": 0.03}  # device s a trial (H200 demo medians)
REGIMES = {"quiet": (0.005, 0.0), "default": (0.01, 0.02), "noisy": (0.02, 0.05)}  # (noise CV, wild share)


@dataclass(frozen=True)
class Tally:
    exact: int = 0
    shapes_exact: int = 0
    false_steps: int = 0
    dropped: int = 0
    trials: int = 0
    cost_s: float = 0.0

    def plus(self, other: Tally) -> Tally:
        return Tally(*(a + b for a, b in zip(vars(self).values(), vars(other).values())))


def shas(n: int, seed: int) -> list[str]:
    return [hashlib.sha1(f"range {seed} commit {i}".encode()).hexdigest() for i in range(n)]


def model(commits: list[str], rng: np.random.Generator) -> StepModel:
    """1-3 steps of 5-25% either way, each on one or two shapes; 2% of commits do not build."""
    at = sorted(rng.choice(np.arange(5, len(commits) - 5), size=int(rng.integers(1, 4)), replace=False))
    steps = []
    for k in at:
        shapes = rng.choice(list(COST), size=int(rng.integers(1, 3)), replace=False)
        steps.append(
            SimStep(commits[k], {str(s): float(1.0 + rng.choice((-1, 1)) * rng.uniform(0.05, 0.25)) for s in shapes})
        )
    fails = frozenset(c for c in commits[1:-1] if rng.random() < 0.02 and c not in {s.commit for s in steps})
    return StepModel(dict.fromkeys(COST, 1.0), tuple(steps), fails)


def one(commits: list[str], truth: StepModel, noise: float, wild: float, seed: int, setting: str, on: bool) -> Tally:
    probe = SimulatedProbe(commits, truth, noise_cv=noise, seed=seed, wild=wild)
    r = localize(commits, probe, SearchSettings(min_step_pct=3.0, max_repeats=8, **{setting: on}))
    want = {s.commit: set(s.factors) for s in truth.steps}
    got = {s.commit for s in r.steps}
    named = sum(set(s.shapes) == want[s.commit] for s in r.steps if s.commit in want)
    cost = sum(COST[s] * len(v) for per in probe.samples.values() for s, v in per.items())
    return Tally(int(got == set(want)), named, len(got - set(want)), len(r.dropped), r.trials, cost)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--setting", choices=("split_on_moved", "verify_on_open"), default="split_on_moved")
    args = parser.parse_args(argv)
    what = {"split_on_moved": "split points on", "verify_on_open": "verifications on"}[args.setting]
    print(
        f"| regime | {what} | ranges exact | steps naming exactly their shapes | false steps | dropped | "
        "trial processes | device s (weighted) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, (noise, wild) in REGIMES.items():
        totals = {False: Tally(), True: Tally()}
        planted = 0
        for k in range(args.ranges):
            rng = np.random.default_rng([args.seed, k])
            commits = shas(int(rng.integers(150, 400)), args.seed * 1000 + k)
            truth = model(commits, rng)
            planted += len(truth.steps)
            for on in totals:
                totals[on] = totals[on].plus(one(commits, truth, noise, wild, args.seed + k, args.setting, on))
        for on, t in totals.items():
            print(
                f"| {name} | {'open shapes' if on else 'every shape'} | {t.exact}/{args.ranges} | "
                f"{t.shapes_exact}/{planted} | "
                f"{t.false_steps} | {t.dropped} | {t.trials} | {t.cost_s:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

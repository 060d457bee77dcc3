"""The 389-commit range's search, replayed on the trials an H200 run of it stored: how many trials the
search needs on the machine's real noise, and whether it names the culprit, without a GPU.

    python -m studies.long_range_replay STORE [STORE ...] [--replays 200] [--seed 1]

STORE is the results.sqlite of `python -m studies.long_range --device cuda --dir DIR` (one step, at
commit 247 of 389, on fa/s16384). The stored commits fall in two classes, before and after the step,
told apart by their median full-clock speed (the step is -7%, the noise ~1%). A replay runs the
search of `configs/h200-demo.toml` (its thresholds and trial counts, verification included) over 389
commits with a probe that draws every trial, with replacement, from the stored trials of the
commit's class: the per-trial metric the search decides fa on (full-clock speed), its tails included.
Prints per store: how often the exact culprit came out, steps invented, and trials per replay.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bisector.demo.demo_config import demo_config
from bisector.errors import BadInput
from bisector.model import Measurement, ProbeStatus
from bisector.pipeline import search_settings
from bisector.search import localize
from bisector.search.samples import trial_metric
from studies.stored_trials import over_stores, trial_processes

COMMITS, STEP_AT, SHAPE = 389, 247, "fa/s16384"


def pools(store: Path, metric: str) -> tuple[list[float], list[float]]:
    """The search metric of every OK trial of an unpatched commit, split at the step: (before, after)."""
    per: dict[str, list[float]] = {}
    for (sha, patch, _), records in trial_processes(store).items():
        for r in records:
            value = trial_metric(r, metric) if r.shape == SHAPE and patch is None else None
            if value is not None:
                per.setdefault(sha, []).append(value)
    if len(per) < 2:
        raise BadInput(f"{store}: fewer than two commits with {SHAPE} trials: not a long_range store")
    medians = {sha: statistics.median(v) for sha, v in per.items()}
    cut = (max(medians.values()) + min(medians.values())) / 2
    before = [v for sha, vals in per.items() if medians[sha] > cut for v in vals]
    after = [v for sha, vals in per.items() if medians[sha] <= cut for v in vals]
    return before, after


class PoolProbe:
    """probe(sha, repeats): cumulative draws from the commit's class pool, seeded per replay."""

    def __init__(self, commits: Sequence[str], before: Sequence[float], after: Sequence[float], seed: int) -> None:
        self.index = {sha: i for i, sha in enumerate(commits)}
        self.before, self.after = np.asarray(before), np.asarray(after)
        self.rng = np.random.default_rng(seed)
        self.have: dict[str, list[float]] = {}
        self.trials = 0

    def __call__(self, sha: str, repeats: int) -> Measurement:
        pool = self.before if self.index[sha] < STEP_AT else self.after
        have = self.have.setdefault(sha, [])
        while len(have) < repeats:
            have.append(float(self.rng.choice(pool)))
            self.trials += 1
        return Measurement(sha, ProbeStatus.OK, {SHAPE: tuple(have)})


def replay(store: Path, replays: int, seed: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        config = demo_config("cuda", Path(tmp, "demo"))
    settings = search_settings(config)
    before, after = pools(store, config.thresholds.decision_of(SHAPE.split("/")[0]))
    commits = [hashlib.sha1(f"lr {i}".encode()).hexdigest() for i in range(COMMITS)]
    exact = invented = 0
    trials = []
    for r in range(replays):
        probe = PoolProbe(commits, before, after, seed * 100_003 + r)
        found = [commits.index(s.commit) for s in localize(commits, probe, settings).steps]
        exact += found == [STEP_AT]
        invented += sum(i != STEP_AT for i in found)
        trials.append(probe.trials)
    cv = lambda v: statistics.pstdev(v) / statistics.mean(v) * 100  # noqa: E731
    return (
        f"{store}: pools {len(before)} / {len(after)} trials (CV {cv(before):.2f}% / {cv(after):.2f}%); "
        f"{replays} replays: exact culprit {exact / replays:.0%}, steps invented {invented}, "
        f"trials per replay median {statistics.median(trials):.0f}, p90 {np.percentile(trials, 90):.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--replays", type=int, default=200)
        parser.add_argument("--seed", type=int, default=1)

    return over_stores(
        "long_range_replay",
        __doc__,
        argv,
        options,
        lambda args: [],
        lambda store, args: replay(store, args.replays, args.seed),
    )


if __name__ == "__main__":
    sys.exit(main())

"""How close any estimate of a search's trials can come at a point of the search, on
studies/search_accuracy.py's ranges: what bounds the progress line's "within 1.5x" target.

    python -m studies.estimate_bound [--ranges 40] [--seed 1] [--regimes default,quiet,busy-cpu]
        [--at 0.1,0.25] [--futures 32] [--jobs 2] [--outlook studies/results/outlook-regimes-029ae9d.json]

Why: studies/outlook_accuracy.py found 60-78% of ranges always within 1.5x from 10% of their trials
on; this asks how much of the rest any estimate could win. Each range is searched once (its final
count, as outlook_accuracy searches it). At each share of its trials in `--at`, the search is run
again `--futures` times in the same true world (the same steps, build failures and noise level):
the measurements up to that point the same (each commit's samples so far kept: the search is
deterministic over them, so it takes the same path), fresh draws after. Their final counts are the
futures that point still allows. An oracle that knew the true world would say their median; no
estimate made from the same measurements does better on average. Per regime and point: the share
of ranges whose actual final is within 1.5x of the oracle's median, the share whose futures span
more than 2.25x (then no single number is within 1.5x of every one of them), the futures' spread
(p90 / p10, median over ranges), and beside them the outlook's share within 1.5x at the same point,
read from an `outlook_accuracy --save` file of the same ranges (its finals must agree).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bisector.measure.probe import ProbeEvent
from bisector.search import SearchSettings, localize
from bisector.search.simulate import SimulatedProbe
from studies import estimate_accuracy as ea
from studies import search_accuracy as sa
from studies.outlook_accuracy import WITHIN, within

Samples = dict[str, dict[str, list[float]]]


def copied(samples: Samples) -> Samples:
    return {sha: {k: list(v) for k, v in shapes.items()} for sha, shapes in samples.items()}


def kept_at(
    case: sa.Case, settings: SearchSettings, seed: int, shares: list[float]
) -> tuple[int, dict[float, Samples]]:
    """(the search's final trials, {share: every commit's samples once the search had that share of
    its trials}), taken at the first measurement handed to the search past each share."""
    final = ea.reference_trials(case, seed, settings)
    marks = {share: max(1, math.ceil(share * final)) for share in shares}
    probe = SimulatedProbe(case.commits, case.model, case.cv, seed=seed)
    trials, kept = 0, {}

    def watch(event: ProbeEvent) -> None:
        nonlocal trials
        if event.action == "trial":
            trials += 1
        elif event.action == "measured":
            for share, mark in marks.items():
                if share not in kept and trials >= mark:
                    kept[share] = copied(probe.samples)

    assert localize(case.commits, ea.Announcing(probe, watch), settings).trials == final
    return final, kept


def future(case: sa.Case, settings: SearchSettings, kept: Samples, seed: int) -> int:
    """The search's final trials in the true world with `kept` as every commit's first samples and
    fresh noise (`seed`) after them."""
    probe = SimulatedProbe(case.commits, case.model, case.cv, seed=seed)
    probe.samples = copied(kept)
    return localize(case.commits, probe, settings).trials


def one(args: tuple[str, int, tuple[float, ...], int]) -> tuple[int, dict[str, list[int]]]:
    """(final trials, {share: the futures' final trials})."""
    regime, seed, shares, futures = args
    sa.REGIME = sa.REGIMES[regime]
    r, case = sa.REGIME, sa.make_case(seed)
    settings = SearchSettings(min_step_pct=r.min_step, initial_repeats=r.trials, max_repeats=r.max_trials)
    final, kept = kept_at(case, settings, seed, list(shares))
    return final, {
        str(share): [future(case, settings, kept[share], 10_000_000 + seed * 1000 + j) for j in range(futures)]
        for share in shares
    }


def outlook_within(saved: dict, regime: str, share: float, finals: list[int]) -> str:
    """The outlook's share of ranges within 1.5x at `share` of their trials, from a --save file."""
    runs = saved["rows"].get(regime)
    if not runs or [f for f, _ in runs[: len(finals)]] != finals:
        return "n/a (other ranges)"
    xs = np.array([min(pts, key=lambda p: abs(p[0] - share))[1] for _, pts in runs[: len(finals)]])
    return f"{np.mean(within(xs)):.0%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--regimes", default="default,quiet,busy-cpu")
    ap.add_argument("--at", default="0.1,0.25")
    ap.add_argument("--futures", type=int, default=32)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--outlook", type=Path, default=None, help="an outlook_accuracy --save file of the same ranges")
    args = ap.parse_args()
    shares = tuple(float(x) for x in args.at.split(","))
    saved = json.loads(args.outlook.read_text()) if args.outlook else {"rows": {}}
    print(
        "| regime | ranges | at | final within 1.5x of the oracle's median | futures spanning > 2.25x "
        "| futures p90 / p10 (median) | the outlook within 1.5x |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    with mp.get_context("fork").Pool(args.jobs) as pool:
        for regime in args.regimes.split(","):
            work = [(regime, args.seed * 100_000 + k, shares, args.futures) for k in range(args.ranges)]
            runs = pool.map(one, work)
            finals = [final for final, _ in runs]
            for share in shares:
                fut = [np.array(f[str(share)], dtype=float) for _, f in runs]
                oracle = np.array([final / np.median(f) for final, f in zip(finals, fut)])
                hit = np.mean(within(oracle))
                wide = np.mean([f.max() / f.min() > WITHIN**2 for f in fut])
                spread = np.median([np.percentile(f, 90) / np.percentile(f, 10) for f in fut])
                print(
                    f"| {regime} | {len(runs)} | {share:.0%} | {hit:.0%} | {wide:.0%} | {spread:.2f} "
                    f"| {outlook_within(saved, regime, share, finals)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""Simulated rounds and wall time of a bisection on W devices (k-ary probes), for N commits.

    python -m studies.parallel_rounds [--runs 20] [--trial-seconds 7] > studies/results/parallel-rounds.txt

Per N in 50, 500, 5000 and W in 1, 2, 4, 8: `bisector.search.cost.estimate` on simulated ranges with one
5% step in one of 3 shapes, per-trial noise CV 1% (an H200's ratio CV is 0.1-0.7%, the CPU's
1.6-2.4%), trials laid out on W devices (bisector/search/schedule.py). A trial is `--trial-seconds` of
device time (the H200 demo: ~7 s a trial process, ~3.3 s of it on the device).
"""

from __future__ import annotations

import argparse
import time

from bisector.search.cost import estimate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--trial-seconds", type=float, default=7.0)
    ap.add_argument("--noise", type=float, default=0.01)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(
        f"# one 5% step, 3 shapes, noise CV {args.noise:.1%}, {args.trial_seconds:g} s a trial, {args.runs} ranges each"
    )
    print("| N | W | rounds | trials | wall | wall vs W=1 | exact culprit |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (50, 500, 5000):
        base = None
        for w in (1, 2, 4, 8):
            p = estimate(
                n,
                args.noise,
                steps=1,
                step_pct=5.0,
                shapes=3,
                trial_seconds=args.trial_seconds,
                runs=args.runs,
                devices=w,
            )
            base = base or p.wall_s_mean
            print(
                f"| {n} | {w} | {p.rounds_mean:.1f} | {p.trials_mean:.0f} | {p.wall_s_mean / 60:.1f} min "
                f"| {p.wall_s_mean / base:.0%} | {p.found_rate:.0%} |",
                flush=True,
            )
    print(f"# {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

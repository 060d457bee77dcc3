"""Decisions on a range with no step of the minimum size, a control that drifts with time, and a
change inside the indifference zone; simulated clocks.

    python -m studies.decisions_drift [--ranges 20] [--cv 0.005] [--drift 4] [--trial-s 3]

Why: on a lent H100 a decode GEMM's range of 390 commits (ends 2% apart, no step of 3%) ran 520 s
and 139 trials and was still searching: its cuBLAS control read 4% faster after the run's first
two minutes (the ratio looked like a step that moved as the search moved), and neighbours 2-3%
apart on a 3% minimum step were doubled to 24 trials each. Here: 390 commits, two shapes (M = 64
and M = 128), a -2.5% subject change at one commit and +0.5% at another on both (ends -2%), the
control +`drift`% over the first 120 s and flat after, per-trial CV `cv` for subject and control,
one device, `trial_s` seconds a trial (bisector/search/simulate_drift.py); `--step 0.965` plants a
3.5% step instead, which must be found. Each range is searched with the same seeds as before (no
anchor, pairs double to `max_trials`) and with the decisions of issue #59 (`anchor_s`,
`decision_trials` 6 or 8, `zone`). Printed per mode: ranges that report a step (and the planted
commit exactly), ranges that say "no step >= 3%", trials and simulated minutes (median, max), the
ranges within 40 trials and 2 minutes, the shapes decided on the subject alone, and the first
range's decision lines.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from bisector.config import DECISION_TRIALS, DRIFT_ANCHOR_S
from bisector.search import SearchSettings, localize
from bisector.search.decisions import decision_lines
from bisector.search.schedule import Clocked
from bisector.search.simulate import SimStep, StepModel
from bisector.search.simulate_drift import DriftingProbe

N = 390
SHAPES = ("gemm/m64", "gemm/m128")
BASE = SearchSettings(min_step_pct=3.0, initial_repeats=3, max_repeats=24, first_look=1)
# the shipped defaults (bisector/config: [protocol] decision_trials, drift_anchor_s, [thresholds] indifference_zone)
NEW = replace(BASE, anchor_s=DRIFT_ANCHOR_S, decision_trials=DECISION_TRIALS, zone=True)
MODES = (
    ("before (the decisions off)", BASE),
    (f"the defaults: anchor_s {DRIFT_ANCHOR_S:g}, decision_trials {DECISION_TRIALS}, zone", NEW),
    (f"anchor_s {DRIFT_ANCHOR_S:g}, decision_trials 8, zone", replace(NEW, decision_trials=8)),
)


def one(
    seed: int,
    settings: SearchSettings,
    cv: float,
    drift: float,
    trial_s: float,  # type: ignore[no-untyped-def]
    step: float = 0.975,
):
    commits = [f"{k:04d}{seed:04d}".ljust(40, "0") for k in range(1, N + 1)]
    model = StepModel(
        shapes=dict.fromkeys(SHAPES, 100.0),
        steps=(
            SimStep(commits[150 + seed % 40], dict.fromkeys(SHAPES, step)),
            SimStep(commits[300 + seed % 30], dict.fromkeys(SHAPES, 1.005)),
        ),
        fails=frozenset(),
    )
    probe = DriftingProbe(
        commits, model, subject_cv=cv, control_cv=cv, control_drift_pct=drift, trial_s=trial_s, seed=seed
    )
    clocked = Clocked(probe, 1, trial_s)
    result = localize(commits, clocked, settings)
    return result, clocked.cost()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.decisions_drift", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", type=int, default=20)
    ap.add_argument("--cv", type=float, default=0.005)
    ap.add_argument("--drift", type=float, default=4.0)
    ap.add_argument("--trial-s", type=float, default=3.0)
    ap.add_argument(
        "--step", type=float, default=0.975, help="the subject's factor at the step commit (0.955: a 4.5%% step)"
    )
    args = ap.parse_args(argv)
    print(
        f"{args.ranges} ranges of {N} commits, shapes {', '.join(SHAPES)}, min step 3%, per-trial CV "
        f"{args.cv:.1%}, control +{args.drift:g}% over 120 s, {args.trial_s:g} s a trial, one device, the subject "
        f"{(args.step - 1) * 100:+.1f}% at one commit and +0.5% at another"
    )
    for name, settings in MODES:
        runs = [one(seed, settings, args.cv, args.drift, args.trial_s, args.step) for seed in range(args.ranges)]
        stepped = sum(bool(r.steps) for r, _ in runs)
        exact = sum([s.commit[:4] for s in r.steps] == [f"{151 + seed % 40:04d}"] for seed, (r, _) in enumerate(runs))
        said = sum(any(line.startswith("no step >=") for line in decision_lines(r)) for r, _ in runs)
        trials = [c.trials for _, c in runs]
        minutes = [c.wall_s / 60.0 for _, c in runs]
        views = [f.decided_on for r, _ in runs for f in r.decisions.drift]
        print(
            f"\n## {name}\nranges with a step: {stepped}/{len(runs)}, exactly the planted one: {exact}; "
            f"saying 'no step >= 3%': {said}/{len(runs)}; "
            f"trials median {statistics.median(trials):g}, max {max(trials)}; simulated minutes median "
            f"{statistics.median(minutes):.1f}, max {max(minutes):.1f}; within 40 trials and 2 minutes: "
            f"{sum(c.trials <= 40 and c.wall_s <= 120.0 for _, c in runs)}/{len(runs)}; shapes decided on the "
            f"subject alone: {views.count('subject')}/{len(runs) * len(SHAPES)}"
        )
        first, cost = runs[0]
        done = sum(
            not r.steps
            and c.trials <= 40
            and c.wall_s <= 120.0
            and any(line.startswith("no step >=") for line in decision_lines(r))
            for r, c in runs
        )
        print(
            f"'no step >= 3%' (small changes and undecided pairs listed with their intervals) within 40 trials "
            f"and 2 minutes: {done}/{len(runs)}"
        )
        print(
            f"range 0: {cost.trials} trials, {cost.wall_s:.0f} s; steps "
            + (
                ", ".join(
                    f"{s.commit[:4]} " + ", ".join(f"{k} {v:+.1f}%" for k, v in s.change_pct.items())
                    for s in first.steps
                )
                or "none"
            )
        )
        for line in decision_lines(first):
            print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How many timed repetitions a trial needs: the trial-to-trial noise from the first r of its kept samples.

    python -m studies.reps_noise STORE [--reps 3,5,8,10,15] [--metric ratio|speed] [--min-trials 4]

Why: a trial's value is the median of its repetitions, and the search decides on trials, whose
values differ from process to process by more than a median of many repetitions can remove. Every
stored trial keeps its raw samples, so the value it would have had with fewer repetitions is the
median of its first r samples (the repetitions are interleaved subject, control, in order).
Printed per shape: the median over commits (unpatched, with at least --min-trials usable trials)
of the CV across trials of that value, for each r. Where the CV stops falling, more repetitions
buy device time and no resolution.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from bisector.search.samples import cv_pct
from bisector.search.stats import full_clock_time


def value(subject: list[float], control: list[float], r: int, metric: str) -> float | None:
    s, c = subject[:r], control[:r]
    if metric == "speed":
        return 1.0 / full_clock_time(s) if s else None
    return statistics.median(c) / statistics.median(s) if s and c else None


def table(store: Path, reps: list[int], metric: str, min_trials: int) -> list[str]:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    rows = db.execute(
        "select sha, shape, subject_ms, control_ms from trials where status = 'ok' and patch_hash is null"
    ).fetchall()
    trials: dict[tuple[str, str], list[tuple[list[float], list[float]]]] = defaultdict(list)
    for sha, shape, subject, control in rows:
        trials[(shape, sha)].append((json.loads(subject or "[]"), json.loads(control or "[]")))
    kept = max((len(s) for group in trials.values() for s, _ in group), default=0)
    lines = [
        f"# {store.name}: {len(rows)} trials; metric {metric}; CV across trials of one commit, "
        f"median over commits with >= {min_trials} trials; samples kept per trial: up to {kept}",
        "",
        "| shape | commits | " + " | ".join(f"r={r}" for r in reps) + " |",
        "|---|---:|" + "---:|" * len(reps),
    ]
    for shape in sorted({shape for shape, _ in trials}):
        groups = [g for (sh, _), g in trials.items() if sh == shape and len(g) >= min_trials]
        cells = []
        for r in reps:
            cvs = []
            for group in groups:
                values = [v for s, c in group if (v := value(s, c, r, metric)) is not None]
                if len(values) >= min_trials and (cv := cv_pct(values)) is not None:
                    cvs.append(cv)
            cells.append(f"{statistics.median(cvs):.2f}%" if cvs else "-")
        lines.append(f"| {shape} | {len(groups)} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.reps_noise", description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--reps", default="3,5,8,10,15")
    parser.add_argument("--metric", choices=("ratio", "speed"), default="ratio")
    parser.add_argument("--min-trials", type=int, default=4)
    args = parser.parse_args(argv)
    if not args.store.is_file():
        print(f"error: {args.store}: no such store", file=sys.stderr)
        return 2
    try:
        reps = sorted({int(r) for r in args.reps.split(",")})
    except ValueError:
        print(f"error: --reps: not a comma-separated list of integers: {args.reps!r}", file=sys.stderr)
        return 2
    print("\n".join(table(args.store, reps, args.metric, args.min_trials)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

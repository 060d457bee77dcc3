"""What-if: the search's step count told by the grid's first trials, compared on the run's pooled noise.

    python -m studies.grid_prior [--ranges 200] [--seed 1]

Before the search has split a segment, the forecast expects the prior's steps (two a range): on the
demos (six or seven steps in 41 commits) a third of them at one minute. studies/estimate_accuracy.py's
--told what-if tried telling it which grid segments differ from the grid's first trials, and found
two failure modes: their medians see steps everywhere in noisy runs ("first medians"), and the pair's
own comparison (Welch on 2-3 trials a side: 2-4 degrees of freedom) leaves pairs UNKNOWN, so nothing
is told ("first trials decided"). Tried here: each segment on its own, against the trial noise
pooled over the five grid points' first trials (stats.compare's `noise`: 5 (n - 1) degrees of
freedom), a segment DIFFERENT in a shape counted as differing, SAME in every shape as not, and one
still UNKNOWN at the prior's chance (1 - (1 - 1/4)^2 for two steps over four segments).

Simulated: studies/search_accuracy.py's regimes, as estimate_accuracy's --told table. Recorded: the
H200 demo stores (their first trials per commit, on the metric each suite was decided on), the
search judged at one minute. Nothing of this is in the forecast: it would take the grid's
measurements into the progress events.
"""

from __future__ import annotations

import argparse
import io
import math
import sqlite3
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bisector.commands.progress import ProgressLine
from bisector.config import load
from bisector.estimate.forecast import ForecastSettings
from bisector.measure.probe import ProbeEvent
from bisector.model import Verdict
from bisector.search.stats import compare
from studies import estimate_accuracy as ea
from studies import progress_replay

ROOT = Path(__file__).resolve().parent.parent
ALPHA = 0.01
# the recorded runs of estimate-runs.csv whose stores are committed (H200 demo: fa on TFLOP/s, gemm on the ratio)
STORES = {
    "h200-demo a695462": "reports/2026-12-01-h200-demo/results.sqlite",
    "h200-demo 346b62c": "reports/2026-12-02b-h200-demo/results.sqlite",
    "h200-demo 6d7d402": "reports/2026-12-02c-h200-demo/results.sqlite",
}


# the H200 demos' first calls (the first minutes are theirs), their stores and the runs' final trial counts
LOGS = {
    "h200-demo a695462 (12-01)": (
        "reports/2026-12-01-h200-demo/progress-1-cold-start.log",
        STORES["h200-demo a695462"],
        365,
    ),
    "h200-demo (12-02)": (
        "reports/2026-12-02-h200-demo/progress-1-cold-start.log",
        "reports/2026-12-02-h200-demo/results.sqlite",
        421,
    ),
    "h200-demo 346b62c (12-02b)": (
        "reports/2026-12-02b-h200-demo/progress-1-cold-start.log",
        STORES["h200-demo 346b62c"],
        371,
    ),
    "h200-demo 6d7d402 (12-02c)": (
        "reports/2026-12-02c-h200-demo/progress-1-cold-start.log",
        STORES["h200-demo 6d7d402"],
        471,
    ),
}


def prior_chance(segments: int, steps: float) -> float:
    """The prior's chance that a segment holds a step: `steps` placed at random over `segments`."""
    return 1.0 - (1.0 - 1.0 / segments) ** steps


def told_pooled(
    first: Mapping[int, Mapping[str, tuple[float, ...]]], min_step: Callable[[str], float]
) -> Callable[[list[int]], dict[int, float]]:
    """Per grid segment, the chance it differs: its ends compared on the grid's pooled noise."""

    def told(grid: list[int]) -> dict[int, float]:
        shapes = {k for i in grid for k in first.get(i, {})}
        noise = {}
        for k in shapes:
            logs = [[math.log(x) for x in first.get(i, {}).get(k, ()) if x > 0] for i in grid]
            df = sum(len(g) - 1 for g in logs if len(g) > 1)
            ss = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in logs if len(g) > 1)
            noise[k] = (math.sqrt(ss / df), float(df)) if df else None
        chance = prior_chance(len(grid) - 1, ForecastSettings(len(grid)).steps_prior)
        out = {}
        for q, (a, b) in enumerate(zip(grid, grid[1:])):
            before, after = first.get(a, {}), first.get(b, {})
            verdicts = {
                compare(before[k], after[k], min_step(k), ALPHA, k, noise.get(k)).verdict
                for k in before
                if before[k] and after.get(k)
            }
            out[q] = 1.0 if Verdict.DIFFERENT in verdicts else 0.0 if verdicts == {Verdict.SAME} else chance
        return out

    return told


def store_first(store: Path, initial: int, metric: Mapping[str, str]) -> dict[int, dict[str, tuple[float, ...]]]:
    """Each commit's first `initial` trials (by slot) per shape, on the suite's metric."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        index = {sha: i for i, (sha,) in enumerate(db.execute("SELECT sha FROM commits ORDER BY rowid"))}
        rows = db.execute(
            "SELECT sha, shape, slot, ratio, subject_tflops FROM trials WHERE patch_hash IS NULL "
            "AND status = 'ok' AND slot < ? ORDER BY slot",
            (initial,),
        ).fetchall()
    finally:
        db.close()
    out: dict[int, dict[str, list[float]]] = {}
    for sha, shape, _slot, ratio, tflops in rows:
        value = tflops if metric.get(shape.split("/")[0], "ratio") == "speed" else ratio
        if value:
            out.setdefault(index[sha], {}).setdefault(shape, []).append(value)
    return {i: {k: tuple(v) for k, v in shapes.items()} for i, shapes in out.items()}


def log_whatif(log: Path, store: Path, final: int, told: Callable[[list[int]], object] | None) -> list[float]:
    """The whole-run estimate / final at 1, 2, 3 and 5 minutes of a progress log's first call, its
    events replayed (studies/progress_replay.py) into a progress line whose forecast is told, once
    the grid's five commits are known, what `told` says of its segments."""
    order = progress_replay.commits_of(store)
    lines = progress_replay.calls(progress_replay.parse(progress_replay.read(log))[0])[0]
    cfg = load(ROOT / "configs" / "h200-demo.toml")
    full = {sha[:7]: sha for sha in order}
    line = ProgressLine.for_config(cfg, order, ("fixes", "hunks"), console=Console(file=io.StringIO()), live=False)
    assert line.forecast is not None
    forecast = line.forecast = ea.Told(line.forecast.settings, order)
    shown, done = [0] * len(lines), False
    events = progress_replay.unthrottled(lines)
    for i, (e, j) in enumerate(events):
        line(ProbeEvent(full.get(e.sha, e.sha), e.action, e.detail, e.patch_hash, e.expect))
        if told is not None and not done and forecast.grid is not None:
            forecast.shown(told(forecast.grid))  # type: ignore[arg-type]
            done = True
        if i == 0 or events[i - 1][1] != j:
            shown[j] = line.expected_trials
    ts = progress_replay.times(lines)
    return [next((m / final for t, m in zip(ts, shown) if t >= 60 * minute), math.nan) for minute in (1, 2, 3, 5)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.grid_prior", description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    print(f"# python -m studies.grid_prior --ranges {args.ranges} --seed {args.seed}\n")
    print(
        f"| regime or run | told | after the grid (recorded: at 1 min): estimate / final, median / p10 / p90 "
        f"| from there on: worst over / under, median | from there on: ranges always within {ea.WITHIN}x |"
    )
    print("|---|---|---|---|---|")
    ways: dict[str, Callable[[ea.Run], Callable[[list[int]], object]] | None] = {
        "nothing": None,
        "first trials decided": ea.told_decided,
        "first trials, pooled noise, per segment": lambda run: told_pooled(run.first, lambda _k: run.min_step),
        "hindsight": ea.told_hindsight,
    }
    for regime in ("default", "quiet", "busy-cpu"):
        cases = [ea.simulated(regime, args.seed * 100_000 + r) for r in range(args.ranges)]
        for name, way in ways.items():
            first, early = [], []
            for run in cases:
                g = ea.grid_end(run)
                told = way(run) if way else None
                after = [
                    x / run.search
                    for _, trials, x, _ in ea.replay(run, told=told)  # type: ignore[arg-type]
                    if trials > g
                ]
                if after:
                    first.append(after[0])
                    early.append(ea.worst(after))
            print(
                f"| {regime} | {name} | {np.median(first):.2f} / {np.percentile(first, 10):.2f} / "
                f"{np.percentile(first, 90):.2f} | {np.median([h for h, _ in early]):.2f} / "
                f"{np.median([lo for _, lo in early]):.2f} "
                f"| {np.mean([h <= ea.WITHIN and lo >= 1 / ea.WITHIN for h, lo in early]):.0%} |"
            )
    cfg = load(ROOT / "configs" / "h200-demo.toml")
    metric = {suite: cfg.thresholds.decision_of(suite) for suite in ("fa", "gemm")}
    for run in ea.recorded(ea.RUNS):
        if run.name not in STORES:
            continue
        first = store_first(ROOT / STORES[run.name], run.initial, metric)
        for name, way in (
            ("nothing", None),
            ("first trials, pooled noise, per segment", told_pooled(first, cfg.thresholds.min_step)),
            ("hindsight", ea.told_hindsight(run)),
        ):
            points = [
                (t, x / run.search, w / sum(1 for e in run.events if e.k))
                for t, _, x, w in ea.replay(run, False, way)
                if t >= 60
            ]  # type: ignore[arg-type]
            late = [x for _, x, _ in points]
            holds = all(1 / ea.WITHIN <= x <= ea.WITHIN for x in late)
            print(
                f"| {run.name} | {name} | {late[0]:.2f} (whole run {points[0][2]:.2f}) "
                f"| {max(late):.2f} / {min(late):.2f} | {'yes' if holds else 'no'} |"
            )
    print(
        "\n## the same told the progress line replayed from the H200 demos' first-call logs "
        "(studies/progress_replay.py): whole-run estimate / final at 1 / 2 / 3 / 5 min\n"
    )
    print("| run | nothing | first trials, pooled noise, per segment | hindsight |")
    print("|---|---|---|---|")
    for name, (log, store, final) in LOGS.items():
        first = store_first(ROOT / store, cfg.protocol.trials, metric)
        searched = search_commits(ROOT / log, ROOT / store)
        cells = []
        for told in (
            None,
            told_pooled(first, cfg.thresholds.min_step),
            lambda grid, searched=searched: {
                q: 1.0 for q, (a, b) in enumerate(zip(grid, grid[1:])) if any(a < i < b for i in searched)
            },
        ):
            cells.append(" / ".join(f"{x:.2f}" for x in log_whatif(ROOT / log, ROOT / store, final, told)))
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


def search_commits(log: Path, store: Path) -> set[int]:
    """The commits the run's search measured (hindsight: the segments it went on to split)."""
    index = {sha[:7]: i for i, sha in enumerate(progress_replay.commits_of(store))}
    out = set()
    for call in progress_replay.calls(progress_replay.parse(progress_replay.read(log))[0]):
        for line in call:
            e = line.event
            if e is not None and e.action == "trial" and not e.patch_hash and e.sha in index:
                out.add(index[e.sha])
    return out


if __name__ == "__main__":
    sys.exit(main())

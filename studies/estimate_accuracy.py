"""How well the progress line's trial estimate holds: replayed on simulated searches and recorded runs.

    python studies/estimate_accuracy.py [--ranges 100] [--seed 1] [--runs studies/results/estimate-runs.csv]
    python studies/estimate_accuracy.py --extract NAME=STORE.sqlite ...  # add recorded runs to that file
    python studies/estimate_accuracy.py --told [--ranges 100]  # what-if: told which grid segments differ

The progress line sees each trial of the search as it starts ("trial k/n" of a commit), builds and
SKIPs; bisector/estimate/forecast.py turns that into the trials still to come. This replays those
events and compares the estimate (trials so far + forecast) with the final count:

- simulated: studies/search_accuracy.py's regimes (random ranges of 50..500 commits, 1..3 steps),
  the engine run against a SimulatedProbe whose calls are turned into the events the line would
  get (one per trial, a side-by-side batch in ABBA order); judged from 10% of the final trials on;
- recorded: the trials of real runs, in the order they started (the store's started_at and slot:
  a trial's k is its slot + 1; a commit whose every trial crashed is a SKIP after its last one),
  judged from the first minute on. A run's search ends before the batch holding its first
  patched trial (the reverts); its later stages are judged as a whole-run figure against the
  forecast of them (bisector/estimate/later_stages.py's model of the run's device kind, "cpu-demo ..." runs the CPU's).

Per regime or run: the worst ratio estimate / final above and below 1 after that point, the share
of ranges (or points) within 1.5x, and the estimate before this change for comparison
(2*ceil(log2 N)+6 commits at the protocol's trials, "past the ~N estimated" once exceeded).

The recorded runs (studies/results/estimate-runs.csv, one row per trial process):
- "cpu-demo 617fb2a": the run of reports/2026-12-01-cpu-demo (one call, 2 cores beside a CI run);
- "h200-demo a695462": reports/2026-12-01-h200-demo/results.sqlite (three calls on one H200, each
  resuming the last: the clock jumps between them);
- "h200-demo stopped at 213": an H200 demo of 2026-12-01 18:42 stopped by its time limit in the
  search after 213 trials (two calls); its search took more, so its ratios are against a floor;
- "h200-demo 346b62c", "h200-demo 6d7d402": reports/2026-12-02b-h200-demo and 2026-12-02c-h200-demo
  (two calls each; protocol.trials 2, max_trials 8).
The recorded trials carry no "n" or partners: the replay gives the forecast k alone, as from an
older log; the simulated ones give both, as the progress line has them.
"""

from __future__ import annotations

import argparse
import csv
import math
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bisector.commands.progress import PARTNERS, TRIAL, bisection_probes
from bisector.estimate.forecast import ForecastSettings, SearchForecast
from bisector.estimate.later_stages import model_for
from bisector.measure.probe import ProbeEvent
from bisector.model import Measurement, ProbeStatus, SampleCounts, Verdict
from bisector.search import SearchSettings, localize
from bisector.search.prober import ProbeBase
from bisector.search.simulate import SimulatedProbe
from bisector.search.stats import compare
from studies import search_accuracy as sa

RUNS = Path(__file__).resolve().parent / "results" / "estimate-runs.csv"
WITHIN = 1.5


@dataclass(frozen=True)
class Event:
    index: int  # the commit's place in GOOD..BAD
    k: int  # its k-th trial (0: a SKIP)
    n: int | None = None  # trials asked for in this batch (None: not recorded)
    partners: tuple[int, ...] | None = None  # the other commits of its batch (None: not recorded)
    t: float = 0.0  # seconds since the run started
    patched: bool = False


@dataclass(frozen=True)
class Run:
    name: str
    commits: int
    initial: int
    cap: int
    first_look: int
    events: tuple[Event, ...]
    search: int  # the search's trials (the events before it that are trials)
    stages: tuple[str, ...] = ()
    # what-if (`told_table`): each commit's first measurement, shape -> samples, and the minimum step
    first: Mapping[int, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    min_step: float = 0.0


class Told(SearchForecast):
    """What-if (`told_table`): a forecast told, once the grid's first trials are in, which grid
    segments differ (`shown`; 0: GOOD to the first interior point; or each one's chance). The
    search splits those, so the middle commits still to come are theirs rather than the prior's:
    per such segment ahead what the finished ones took (one step's depth before any is finished),
    and what the current one still lacks of it; a segment the search splits anyway counts too.
    Not in the forecast: the progress line's events carry no measurement, and the grid's first
    trials show too little (the figures in results/estimate-accuracy.txt, results/grid-prior.txt)."""

    differing: dict[int, float] | None = None  # segment -> chance it differs (1: it does)

    def shown(self, differing: set[int] | Mapping[int, float]) -> None:
        self.differing = dict(differing) if isinstance(differing, Mapping) else {q: 1.0 for q in differing}

    def _middles(self) -> tuple[float, float]:
        depth, rest = super()._middles()
        if self.differing is None or self.tail is not None or self.grid is None or self.index is None:
            return depth, rest
        st, g, seg = self.settings, self.grid, self.segment
        pos = [self.index[s] for s in self.middles()]
        split = {q for q in range(len(g) - 1) if any(g[q] < i < g[q + 1] for i in pos)}
        differ = {q: 1.0 if q in split else self.differing.get(q, 0.0) for q in range(len(g) - 1)}
        per = (sum(1 for i in pos if i < g[seg]) + st.depth) / (sum(w for q, w in differ.items() if q < seg) + 1)
        here = sum(1 for i in pos if g[seg] < i < g[seg + 1])
        current = differ[seg] * max(0.0, per - here - depth)
        unprobed = float(max(0, st.commits - max(len(self.seen), st.grid)))
        return depth, min(unprobed - depth, current + per * sum(w for q, w in differ.items() if q > seg))


class Announcing(ProbeBase):
    """A simulated probe that sends the events StoreProbe and its Batch send: a build for each new
    commit, then one "trial k/n (side by side with ...)" per trial process, the batch in ABBA order,
    then each commit's measurement ("measured"). Calls that measure some shapes only (`shaped`) and
    fresh lineages (`independent`) go through to the SimulatedProbe, as the pipeline's search makes
    them: k counts a commit's trial processes, whatever shapes each measured."""

    side_by_side = True
    shapes_alone = True

    def __init__(self, probe: SimulatedProbe, observer: Callable[[ProbeEvent], None]) -> None:
        self.probe, self.observer = probe, observer
        self.have: dict[str, int] = {}  # trial processes per commit
        self.counts = SampleCounts()
        self.first: dict[str, dict[str, tuple[float, ...]]] = {}  # each commit's first samples
        self.independent = probe.independent

    def __call__(self, sha: str, repeats: int) -> Measurement:
        return self.together({sha: repeats})[sha]

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        return self._announce(list(wants), lambda: {sha: self.probe(sha, n) for sha, n in wants.items()})

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        return self._announce(list(wants), lambda: self.probe.shaped(wants))

    def _announce(self, order: list[str], measure: Callable[[], dict[str, Measurement]]) -> dict[str, Measurement]:
        for sha in order:
            if sha not in self.have:
                self.observer(ProbeEvent(sha, "build"))
        got = measure()
        new = {sha: self.counts.add(sha, got[sha]) for sha in order}
        for r in range(max(new.values(), default=0)):
            for sha in order if r % 2 == 0 else order[::-1]:
                if r < new[sha]:
                    others = [o[:7] for o in order if o != sha and r < new[o]]
                    detail = f"trial {self.have.get(sha, 0) + r + 1}/{self.have.get(sha, 0) + new[sha]}"
                    self.observer(
                        ProbeEvent(
                            sha, "trial", detail + (f" (side by side with {', '.join(others)})" if others else "")
                        )
                    )
        for sha in order:
            if got[sha].status is ProbeStatus.SKIP and sha not in self.have:
                self.observer(ProbeEvent(sha, "skip", "simulated build failure"))
            self.have[sha] = self.have.get(sha, 0) + new[sha]
            self.first.setdefault(sha, {k: tuple(v) for k, v in got[sha].samples.items()})
            self.observer(ProbeEvent(sha, "measured", measurement=got[sha]))
        return got


def reference_trials(case: sa.Case, seed: int, settings: SearchSettings) -> int:
    """The trial processes a range's search takes, unwatched: what the watched one (through
    `Announcing`, the same calls) must come to."""
    return localize(case.commits, SimulatedProbe(case.commits, case.model, case.cv, seed=seed), settings).trials


def simulated(regime: str, seed: int, devices: int = 1) -> Run:
    """A search_accuracy range searched, its events read back as the progress line parses them."""
    sa.REGIME = sa.REGIMES[regime]
    case = sa.make_case(seed)
    index = {sha: i for i, sha in enumerate(case.commits)}
    prefix = {sha[:7]: i for sha, i in index.items()}
    events: list[Event] = []

    def record(e: ProbeEvent) -> None:
        if e.action == "skip":
            events.append(Event(index[e.sha], 0))
        elif e.action == "trial":
            k, n = map(int, TRIAL.findall(e.detail)[0])
            side = PARTNERS.search(e.detail)
            events.append(
                Event(index[e.sha], k, n, tuple(prefix[p] for p in side.group(1).split(", ")) if side else ())
            )

    r = sa.REGIME
    probe = Announcing(SimulatedProbe(case.commits, case.model, case.cv, seed=seed), record)
    result = localize(
        case.commits,
        probe,
        SearchSettings(min_step_pct=r.min_step, initial_repeats=r.trials, max_repeats=r.max_trials, width=devices),
    )
    assert sum(e.k > 0 for e in events) == result.trials
    return Run(
        f"{regime} #{seed}",
        case.n,
        r.trials,
        r.max_trials,
        1,
        tuple(events),
        result.trials,
        first={index[sha]: v for sha, v in probe.first.items()},
        min_step=r.min_step,
    )


def replay(
    run: Run, with_n: bool = True, told: Callable[[list[int]], set[int] | Mapping[int, float] | None] | None = None
) -> list[tuple[float, int, float, float]]:
    """(seconds, trials so far, search estimate, whole-run estimate) after each trial of the run;
    `told`: the forecast is told, at the grid's end, the grid segments it returns for the grid."""
    order = [str(i) for i in range(run.commits)]
    forecast = Told(ForecastSettings(run.commits, run.initial, run.cap, run.first_look), order)
    out, trials, g = [], 0, grid_end(run) if told else -1
    for e in run.events:
        if e.k == 0:
            forecast.skip(str(e.index))
            continue
        if trials == g and forecast.grid is not None and told is not None:
            differing = told(forecast.grid)
            if differing is not None:
                forecast.shown(differing)
        trials += 1
        if trials > run.search:
            break
        if with_n:
            forecast.trial(str(e.index), e.k, e.n, None if e.partners is None else [str(p) for p in e.partners])
        else:
            forecast.trial(str(e.index), e.k)
        search = trials + forecast.remaining()
        out.append(
            (
                e.t,
                trials,
                search,
                search + model_for(device_of(run)).trials(forecast.steps(), run.initial, run.cap, run.stages),
            )
        )
    return out


def device_of(run: Run) -> str | None:
    """The device kind a recorded run measured on (its name says: "cpu-demo ..."; else a GPU)."""
    return "cpu" if run.name.startswith("cpu") else None


def grid_end(run: Run) -> int:
    """Trials until the grid (GOOD, BAD, the interior points) has its first trials: what a run has
    shown at about a minute (the demos: 14-17 trials); the search's first decision comes next."""
    grid = min(run.commits, 2 + SearchSettings().interior_points)
    seen: list[int] = []
    skipped: set[int] = set()
    trials = 0
    for e in run.events:
        if e.k == 0:
            skipped.add(e.index)
            continue
        good = [i for i in seen if i not in skipped]
        if e.index not in seen:
            if len(good) >= grid:
                return trials
            seen.append(e.index)
        elif len(good) >= grid and e.k > run.initial:
            return trials
        trials += 1
    return trials


def before(run: Run, trials: int) -> float | None:
    """The estimate before this change: None once the run is past it (the line showed no ETA)."""
    expected = bisection_probes(run.commits) * run.initial
    return float(expected) if trials <= expected else None


# -- recorded runs -----------------------------------------------------------------------------
def extract(name: str, store: Path, initial: int, cap: int, stages: str) -> list[dict[str, object]]:
    """One row per trial process of a store (a copy: sqlite may write), in the order they started."""
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    order = [r[0] for r in db.execute("SELECT sha FROM commits ORDER BY rowid")]
    index = {sha: i for i, sha in enumerate(order)}
    rows = db.execute(
        "SELECT sha, COALESCE(patch_hash, ''), slot, MIN(started_at), GROUP_CONCAT(DISTINCT status) "
        "FROM trials GROUP BY sha, patch_hash, slot ORDER BY MIN(started_at), MIN(id)"
    ).fetchall()
    t0 = datetime.fromisoformat(rows[0][3])
    return [
        {
            "run": name,
            "commits": len(order),
            "initial": initial,
            "cap": cap,
            "stages": stages,
            "index": index[sha],
            "k": slot + 1,
            "t": round((datetime.fromisoformat(start) - t0).total_seconds(), 1),
            "patched": int(bool(patch)),
            "crashed": int(status == "crash"),
        }
        for sha, patch, slot, start, status in rows
    ]


def recorded(path: Path) -> list[Run]:
    by_run: dict[str, list[dict[str, str]]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            by_run.setdefault(row["run"], []).append(row)
    runs = []
    for name, rows in by_run.items():
        events, crashed, last = [], {}, {}
        for j, row in enumerate(rows):
            i = int(row["index"])
            crashed[i] = crashed.get(i, True) and row["crashed"] == "1" and row["patched"] == "0"
            last[i] = j
        for j, row in enumerate(rows):
            i = int(row["index"])
            events.append(Event(i, int(row["k"]), t=float(row["t"]), patched=row["patched"] == "1"))
            if crashed[i] and last[i] == j:
                events.append(Event(i, 0, t=float(row["t"])))
        trials = [e for e in events if e.k]
        first = next((j for j, e in enumerate(trials) if e.patched), len(trials))
        end = first  # the search ends before the batch that holds the first patched trial
        while end and first < len(trials) and trials[end - 1].k > 1 and trials[first - 1].t - trials[end - 1].t <= 10:
            end -= 1
        r = rows[0]
        runs.append(
            Run(
                name,
                int(r["commits"]),
                int(r["initial"]),
                int(r["cap"]),
                1,
                tuple(events),
                end,
                tuple(s for s in r["stages"].split("+") if s),
            )
        )
    return runs


# -- figures -----------------------------------------------------------------------------------
def worst(ratios: Sequence[float]) -> tuple[float, float]:
    return (max(ratios), min(ratios)) if ratios else (math.nan, math.nan)


def simulated_table(ranges: int, seed: int, devices: int) -> list[str]:
    lines = [
        "| regime | ranges | final trials (median) | worst over, median / p90 / max | worst under, median / p10 / min "
        f"| ranges always within {WITHIN}x | points within {WITHIN}x | before: estimate / final at 10%, median "
        "| before: ranges past it (no ETA) | after the grid: estimate / final, median / p10 / p90 "
        f"| from the grid on: worst over / under, median | from the grid on: ranges always within {WITHIN}x |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for regime in ("default", "quiet", "busy-cpu"):
        overs, unders, points, finals, past, old_first, first, early = [], [], [], [], 0, [], [], []
        for r in range(ranges):
            run = simulated(regime, seed * 100_000 + r, devices)
            final = run.search
            replayed = replay(run)
            g = grid_end(run)
            after = [search / final for _, trials, search, _ in replayed if trials > g]
            if after:
                first.append(after[0])
                early.append(worst(after))
            est = [(trials, search / final) for _, trials, search, _ in replayed if trials >= 0.1 * final]
            hi, lo = worst([x for _, x in est])
            overs.append(hi)
            unders.append(lo)
            points += [x for _, x in est]
            finals.append(final)
            old = [before(run, trials) for trials, _ in est]
            past += any(o is None for o in old)
            old_first.append(old[0] / final if old[0] is not None else math.nan)
        p = np.array(points)
        within = np.mean([(h <= WITHIN and lo >= 1 / WITHIN) for h, lo in zip(overs, unders)])
        lines.append(
            f"| {regime}{f' ({devices} devices)' if devices > 1 else ''} | {ranges} | {np.median(finals):.0f} "
            f"| {np.median(overs):.2f} / {np.percentile(overs, 90):.2f} / {max(overs):.2f} "
            f"| {np.median(unders):.2f} / {np.percentile(unders, 10):.2f} / {min(unders):.2f} "
            f"| {within:.0%} | {np.mean((p <= WITHIN) & (p >= 1 / WITHIN)):.0%} "
            f"| {np.nanmedian(old_first):.2f} | {past / ranges:.0%} "
            f"| {np.median(first):.2f} / {np.percentile(first, 10):.2f} / {np.percentile(first, 90):.2f} "
            f"| {np.median([h for h, _ in early]):.2f} / {np.median([lo for _, lo in early]):.2f} "
            f"| {np.mean([h <= WITHIN and lo >= 1 / WITHIN for h, lo in early]):.0%} |"
        )
    return lines


def recorded_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| run | commits | search trials (whole run) | estimate at 1 min | worst over / under after 1 min "
        f"| within {WITHIN}x from trial | at 25 / 50 / 75% of the search | whole run: worst over / under "
        "| whole run at 1 / 2 / 3 / 5 min | before: at 1 min, no ETA from trial |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        points = replay(run, with_n=False)
        final, total = run.search, sum(1 for e in run.events if e.k)
        late = [(t, trials, s / final, w / total) for t, trials, s, w in points if t >= 60]
        if not late:
            continue
        hi, lo = worst([x for _, _, x, _ in late])
        whi, wlo = worst([x for _, _, _, x in late])
        holds = next(
            (
                f"{trials} ({t / 60:.1f} min)"
                for j, (t, trials, _, _) in enumerate(late)
                if all(1 / WITHIN <= x <= WITHIN for _, _, x, _ in late[j:])
            ),
            None,
        )
        at = [
            next(x for _, trials, x, _ in late if trials >= q * final)
            if any(tr >= q * final for _, tr, _, _ in late)
            else math.nan
            for q in (0.25, 0.5, 0.75)
        ]
        old_at = before(run, late[0][1])
        old_past = next((trials for _, trials, _, _ in points if before(run, trials) is None), None)
        whole = f"{whi:.2f} / {wlo:.2f}" if run.stages else "-"
        minutes = (
            " / ".join(next((f"{w:.2f}" for t, _, _, w in late if t >= 60 * m), "-") for m in (1, 2, 3, 5))
            if run.stages
            else "-"
        )
        lines.append(
            f"| {run.name} | {run.commits} | {final} ({total}) | {late[0][2]:.2f} ({late[0][1]} trials) "
            f"| {hi:.2f} / {lo:.2f} | {holds if holds is not None else 'never'} | "
            + " / ".join(f"{x:.2f}" for x in at)
            + f" | {whole} | {minutes} "
            + f"| {'-' if old_at is None else f'{old_at / final:.2f}'}, {old_past or '-'} |"
        )
    return lines


# -- what-if: the forecast told which grid segments differ --------------------------------------
def told_medians(run: Run) -> Callable[[list[int]], set[int]]:
    """The segments whose ends' first trials (medians, per shape) differ by the minimum step or
    more: what the grid's own measurements show (simulated ranges: the study has their samples)."""
    step = math.log1p(run.min_step / 100.0)

    def told(grid: list[int]) -> set[int]:
        out = set()
        for q, (a, b) in enumerate(zip(grid, grid[1:])):
            before, after = run.first.get(a, {}), run.first.get(b, {})
            if any(
                abs(math.log(float(np.median(after[k])) / float(np.median(before[k])))) >= step
                for k in before
                if before[k] and after.get(k)
            ):
                out.add(q)
        return out

    return told


def told_decided(run: Run) -> Callable[[list[int]], set[int] | None]:
    """The segments the search's own comparison (stats.compare at alpha 1%) calls DIFFERENT on the
    grid's first trials, told only when it decides every pair (no shape UNKNOWN): a noisy grid
    shows nothing yet, and the forecast keeps its prior."""

    def told(grid: list[int]) -> set[int] | None:
        out = set()
        for q, (a, b) in enumerate(zip(grid, grid[1:])):
            before, after = run.first.get(a, {}), run.first.get(b, {})
            verdicts = {
                compare(before[k], after[k], run.min_step, 0.01, k).verdict
                for k in before
                if before[k] and after.get(k)
            }
            if Verdict.UNKNOWN in verdicts:
                return None
            if Verdict.DIFFERENT in verdicts:
                out.add(q)
        return out

    return told


def told_hindsight(run: Run) -> Callable[[list[int]], set[int]]:
    """The segments the search went on to split: an upper bound of what the grid can show."""
    trials = [e.index for e in run.events if e.k][: run.search]
    return lambda grid: {q for q, (a, b) in enumerate(zip(grid, grid[1:])) if any(a < i < b for i in trials)}


def told_table(ranges: int, seed: int, devices: int, runs: Sequence[Run]) -> list[str]:
    lines = [
        "| regime or run | told | after the grid (recorded: at 1 min): estimate / final, median / p10 / p90 "
        f"| from there on: worst over / under, median | from there on: ranges always within {WITHIN}x |",
        "|---|---|---|---|---|",
    ]
    ways: tuple[tuple[str, Callable[[Run], Callable[[list[int]], set[int] | None]] | None], ...] = (
        ("nothing", None),
        ("first medians", told_medians),
        ("first trials decided", told_decided),
        ("hindsight", told_hindsight),
    )
    for regime in ("default", "quiet", "busy-cpu"):
        cases = [simulated(regime, seed * 100_000 + r, devices) for r in range(ranges)]
        for name, way in ways:
            first, early = [], []
            for run in cases:
                g = grid_end(run)
                after = [
                    x / run.search for _, trials, x, _ in replay(run, told=way(run) if way else None) if trials > g
                ]
                if after:
                    first.append(after[0])
                    early.append(worst(after))
            lines.append(
                f"| {regime}{f' ({devices} devices)' if devices > 1 else ''} | {name} "
                f"| {np.median(first):.2f} / {np.percentile(first, 10):.2f} / {np.percentile(first, 90):.2f} "
                f"| {np.median([h for h, _ in early]):.2f} / {np.median([lo for _, lo in early]):.2f} "
                f"| {np.mean([h <= WITHIN and lo >= 1 / WITHIN for h, lo in early]):.0%} |"
            )
    for run in runs:
        for name, way in ways[:1] + ways[3:]:  # no samples recorded: hindsight only
            late = [x / run.search for t, _, x, _ in replay(run, False, way(run) if way else None) if t >= 60]
            if late:
                lines.append(
                    f"| {run.name} | {name} | {late[0]:.2f} | {max(late):.2f} / {min(late):.2f} "
                    f"| {'yes' if all(1 / WITHIN <= x <= WITHIN for x in late) else 'no'} |"
                )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument(
        "--told", action="store_true", help="what-if: the forecast told at the grid's end which grid segments differ"
    )
    ap.add_argument(
        "--extract",
        nargs="*",
        default=[],
        metavar="NAME=STORE[:TRIALS:MAX_TRIALS:STAGES]",
        help="append a store's trial sequence to --runs (STAGES: fixes+hunks)",
    )
    args = ap.parse_args()
    if args.extract:
        rows = []
        for spec in args.extract:
            name, _, rest = spec.partition("=")
            store, trials, cap, stages = ([*rest.split(":"), "3", "24", ""])[:4]
            rows += extract(name, Path(store), int(trials), int(cap), stages)
        new = not args.runs.exists()
        with args.runs.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                w.writeheader()
            w.writerows(rows)
        return
    print(
        f"# python studies/estimate_accuracy.py --ranges {args.ranges} --seed {args.seed} --devices {args.devices}"
        + (" --told" if args.told else "")
    )
    if args.told:
        print("\n## what-if: the forecast told, at the grid's end, which grid segments differ (Told, in this file)\n")
        print(
            "\n".join(
                told_table(args.ranges, args.seed, args.devices, recorded(args.runs) if args.runs.exists() else [])
            )
        )
        return
    print("\n## simulated searches (studies/search_accuracy.py's regimes), judged from 10% of the final trials on\n")
    print("\n".join(simulated_table(args.ranges, args.seed, args.devices)))
    if args.runs.exists():
        print(f"\n## recorded runs ({args.runs.name}), the search judged from the first minute on\n")
        print("\n".join(recorded_table(recorded(args.runs))))


if __name__ == "__main__":
    main()

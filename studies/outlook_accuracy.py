"""How well the search's outlook (bisector/estimate/outlook.py) holds, against the event forecast it
replaced in the progress line (bisector/estimate/forecast.py), on studies/search_accuracy.py's ranges.

    python -m studies.outlook_accuracy [--ranges 40] [--seed 1] [--regimes default,quiet,busy-cpu] [--devices 1]
        [--draws 8] [--jobs 2]

Each range is searched once (the engine against a SimulatedProbe, as the progress line sees it:
studies/estimate_accuracy.Announcing). At 5% and every 10% of the trials it took, both estimates of the
search's trials in all are taken: the progress line's (the outlook on the measurements the search
holds then, made at once as if its thread kept up; the event forecast before GOOD and BAD are
measured), and the event forecast's alone, as the line had it before. Judged as estimate /
final: per range the worst ratio over and under from 10% of its trials on (a "first minute" of a
search of a few hundred trials: the H200 demo's first minute is 14-17 trials of ~250), the share of
ranges always within 1.5x from there, and the ratios at 5, 10, 25 and 50%.

    python -m studies.outlook_accuracy --recorded cuda=reports/2026-12-04h-h200-demo/results.sqlite.gz ...

Recorded demo runs: the demo upstream written again (its commits must be the store's), the search
replayed offline on the stored trials (`bisector run --offline`: the same path, the same
measurements in the same order) with the outlook made at each measurement; the trials so far are
counted from the measurements (a commit's most-measured shape), and placed in time by the start
of the search's k-th trial in the store.
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

from bisector.commands.outlook_follow import OutlookFollow
from bisector.estimate.outlook import SearchBasis
from bisector.measure.probe import ProbeEvent
from bisector.search import SearchSettings, localize
from bisector.search.simulate import SimulatedProbe
from studies import estimate_accuracy as ea
from studies import search_accuracy as sa

WITHIN = 1.5
MARKS = (0.05, *(k / 10 for k in range(1, 10)))
SHOWN = (0.05, 0.1, 0.25, 0.5)


def one(args: tuple[str, int, int, int]) -> tuple[int, list[tuple[float, float, float]]]:
    """(final trials, [(share of the final, outlook / final, events / final)] at each mark)."""
    regime, seed, devices, draws = args
    sa.REGIME = sa.REGIMES[regime]
    r, case = sa.REGIME, sa.make_case(seed)
    settings = SearchSettings(
        min_step_pct=r.min_step, initial_repeats=r.trials, max_repeats=r.max_trials, width=devices
    )
    final = ea.reference_trials(case, seed, settings)
    marks = sorted({max(1, math.ceil(f * final)) for f in MARKS})
    follow = OutlookFollow(
        SearchBasis(tuple(case.commits), settings, together=True, shaped=True), threaded=False, draws=draws
    )
    trials, outlooks = 0, {}

    def watch(event: ProbeEvent) -> None:
        nonlocal trials
        if event.action == "trial":
            trials += 1
        elif event.action == "measured" and event.measurement is not None:
            follow.measure(event.measurement, trials)
            seen = follow.latest
            while marks and trials >= marks[0]:
                outlooks[marks.pop(0)] = math.nan if seen is None else seen.trials + seen.outlook.remaining

    took = localize(
        case.commits, ea.Announcing(SimulatedProbe(case.commits, case.model, case.cv, seed=seed), watch), settings
    ).trials
    assert took == final, (took, final)
    events = {t: est for _, t, est, _ in ea.replay(ea.simulated(regime, seed, devices))}
    return final, [
        (t / final, (events[t] if math.isnan(est) else est) / final, events[t] / final)
        for t, est in sorted(outlooks.items())
    ]


def within(x: np.ndarray) -> np.ndarray:
    return (x <= WITHIN) & (x >= 1 / WITHIN)


def table(rows: dict[str, list[tuple[int, list[tuple[float, float, float]]]]], devices: int) -> list[str]:
    out = [
        "| regime | ranges | final trials (median) | estimate | ranges always within 1.5x from 10% on "
        "| points within 1.5x from 10% on | worst over / under, median | "
        + " | ".join(f"at {f:.0%}: median (p10-p90)" for f in SHOWN)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(SHOWN),
    ]
    for regime, runs in rows.items():
        for name, col in (("events alone", 2), ("line (outlook)", 1)):
            late = [[p[col] for p in pts if p[0] >= 0.1] for _, pts in runs]
            points = np.array([x for xs in late for x in xs])
            at = []
            for f in SHOWN:
                xs = np.array([min(pts, key=lambda p: abs(p[0] - f))[col] for _, pts in runs])
                at.append(f"{np.nanmedian(xs):.2f} ({np.nanpercentile(xs, 10):.2f}-{np.nanpercentile(xs, 90):.2f})")
            label = f"{regime}{f' ({devices} devices)' if devices > 1 else ''}"
            out.append(
                f"| {label} | {len(runs)} | {np.median([f for f, _ in runs]):.0f} | {name} "
                f"| {np.mean([bool(np.all(within(np.array(xs)))) for xs in late]):.0%} "
                f"| {np.mean(within(points)):.0%} "
                f"| {np.median([max(xs) for xs in late]):.2f} / {np.median([min(xs) for xs in late]):.2f} | "
                + " | ".join(at)
                + " |"
            )
    return out


def recorded(device: str, store: Path) -> tuple[str, int, int, list[tuple[int, float, float, float]]]:
    """(name, the search's trials, the run's, [(trials so far, seconds into the run, the outlook of
    the search's total, the line's of the run's: the later stages expected per culprit it expects)])."""
    import gzip
    import shutil
    import sqlite3
    import tempfile
    from datetime import datetime

    from bisector import pipeline
    from bisector.demo import write_demo_repo
    from bisector.demo.demo_config import demo_config
    from bisector.estimate.later_stages import model_for

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "results.sqlite"
        with gzip.open(store) if store.suffix == ".gz" else store.open("rb") as src, db.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        manifest = write_demo_repo(root / "upstream")
        con = sqlite3.connect(db)
        stored = {r[0] for r in con.execute("SELECT sha FROM commits")}
        if not set(manifest.commits) <= stored:
            raise SystemExit(f"{store}: the demo upstream written now is not the one its run measured")
        starts = sorted(
            datetime.fromisoformat(r[0])
            for r in con.execute("SELECT MIN(started_at) FROM trials WHERE patch_hash IS NULL GROUP BY sha, slot")
        )
        whole = con.execute("SELECT COUNT(*) FROM (SELECT 1 FROM trials GROUP BY sha, patch_hash, slot)").fetchone()[0]
        con.close()
        cfg = demo_config(device, root / "upstream")
        later = model_for(device)
        follow: OutlookFollow | None = None
        points: list[tuple[int, float, float]] = []

        def watch(event: ProbeEvent) -> None:
            nonlocal follow
            if event.action == "stage":
                follow = OutlookFollow(event.basis, threaded=False) if event.basis is not None else None
            elif (
                event.action == "measured"
                and follow is not None
                and event.measurement is not None
                and not event.patch_hash
            ):
                follow.measure(event.measurement, 0)
                done = sum(max(map(len, m.samples.values()), default=0) for m in follow.measured.values())
                seen = follow.latest
                search = math.nan if seen is None else done + seen.outlook.remaining
                points.append(
                    (
                        done,
                        search,
                        search
                        + (
                            math.nan
                            if seen is None
                            else later.trials(
                                seen.outlook.steps, cfg.protocol.trials, cfg.protocol.max_trials, ("fixes", "hunks")
                            )
                        ),
                    )
                )

        pipeline.bisect(
            cfg,
            pipeline.RunOptions(
                good=manifest.good,
                bad=manifest.bad,
                store=str(db),
                work_dir=str(root / "work"),
                report_dir=str(root / "report"),
                offline=True,
                verify_fixes=False,
                find_hunks=False,
            ),
            observer=watch,
        )
    final = points[-1][0]
    at = [(starts[min(len(starts), t) - 1] - starts[0]).total_seconds() if t else 0.0 for t, _, _ in points]
    return str(store), final, whole, [(t, s, search, line) for (t, search, line), s in zip(points, at)]


def recorded_table(runs: list[tuple[str, int, int, list[tuple[int, float, float, float]]]]) -> list[str]:
    out = [
        "| run | trials: search (run) | estimate / final | at 0.5 / 1 / 2 / 3 min | every line within 1.5x from "
        "| worst over / under from 1 min |",
        "|---|---|---|---|---|---|",
    ]
    for name, final, whole, pts in runs:
        for what, col, of in (("search (outlook)", 2, final), ("run (the line)", 3, whole)):
            ratio = [(p[1], p[col] / of) for p in pts if not math.isnan(p[col])]
            at = [next((r for s, r in ratio if s >= m * 60), math.nan) for m in (0.5, 1, 2, 3)]
            bad = [s for s, r in ratio if not 1 / WITHIN <= r <= WITHIN]
            after = [r for s, r in ratio if s >= 60] or [math.nan]
            out.append(
                f"| {name} | {final} ({whole}) | {what} | {' / '.join(f'{x:.2f}' for x in at)} "
                f"| {(max(bad) / 60 if bad else 0):.1f} min | {max(after):.2f} / {min(after):.2f} |"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--regimes", default="default,quiet,busy-cpu")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--save", type=Path, help="write each range's ratios here (JSON), to table again with --load")
    ap.add_argument("--load", type=Path, help="table the ranges a --save wrote instead of searching them")
    ap.add_argument(
        "--recorded",
        nargs="*",
        default=[],
        metavar="DEVICE=STORE",
        help="replay recorded demo runs (device cuda or cpu) instead of the simulated ranges",
    )
    args = ap.parse_args()
    if args.recorded:
        print(
            "\n".join(
                recorded_table(
                    [recorded(*spec.split("=", 1)[:1], Path(spec.split("=", 1)[1])) for spec in args.recorded]
                )
            )
        )
        return
    if args.load:
        saved = json.loads(args.load.read_text())
        print("\n".join(table(saved["rows"], saved["devices"])))
        return
    rows = {}
    with mp.get_context("fork").Pool(args.jobs) as pool:
        for regime in args.regimes.split(","):
            work = [(regime, args.seed * 100_000 + k, args.devices, args.draws) for k in range(args.ranges)]
            rows[regime] = pool.map(one, work)
            print(f"{regime}: {len(rows[regime])} ranges", file=sys.stderr, flush=True)
    if args.save:
        args.save.write_text(json.dumps({"devices": args.devices, "rows": rows}))
    print("\n".join(table(rows, args.devices)))


if __name__ == "__main__":
    main()

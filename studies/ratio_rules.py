"""How a GPU trial's subject/control ratio is read from its repetitions, compared on stored trials.

    python -m studies.ratio_rules STORE [STORE ...]            (H200 demo stores, unzipped)
    python -m studies.ratio_rules STORE --rewrite OUT.sqlite   (a copy with the ratios of `device_ratio`)

Why: in the H200 demo stores of 2026-12-04, 12-13 gemm/m8192 trials a run read 3-60% off their
build's median (raw trial sd 6.5-8.3% against a median deviation of 0.15%), mostly a commit's first
trial: single calls slowed in alternate repetitions, now the subject's, now the control's, so the
peak-clock anchor (the control's 3rd fastest call) landed on a slow call. Every trial keeps its raw
repetitions, so each rule is recomputed from them: `peak clock` (benches.timing.peak_clock_ratio,
the rule before), `fastest` (each side's fastest call), and `device_ratio` (the peak-clock ratio
unless it is more than 10% from the fastest calls' ratio). Printed per store, GEMM shape and rule:
the trials more than 3% off their build's median (builds of 4 trials or more), the raw pooled log sd
(what the search sizes its trials by) and the median deviation. `--rewrite` writes a copy of one
store whose GEMM ratios follow `device_ratio`, for an offline replay (studies.shaped_replay) of
what the search would have asked for.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from benches.timing import device_ratio, peak_clock_ratio
from bisector.search.stats import log_sd

Rule = Callable[[Sequence[float], Sequence[float]], float]
RULES: dict[str, Rule] = {
    "peak clock": peak_clock_ratio,
    "fastest": lambda s, c: min(c) / min(s),
    "device_ratio": lambda s, c: device_ratio(s, c)[0],
}
OFF_PCT = 3.0


def gemm_trials(db: sqlite3.Connection) -> list[tuple[int, str, str | None, str, list[float], list[float]]]:
    rows = db.execute(
        "SELECT id, sha, patch_hash, shape, subject_ms, control_ms FROM trials "
        "WHERE status = 'ok' AND shape LIKE 'gemm/%' AND ratio IS NOT NULL"
    ).fetchall()
    out = []
    for id_, sha, patch, shape, s, c in rows:
        s, c = json.loads(s), json.loads(c)
        if s and c:
            out.append((id_, sha, patch, shape, s, c))
    return out


def figures(values: dict[tuple[str | None, str], list[float]]) -> str:
    builds = [v for v in values.values() if len(v) >= 4]
    devs = [abs(100.0 * (x / statistics.median(v) - 1.0)) for v in builds for x in v]
    sd, df = log_sd(builds)  # the search's raw pooled sd (samples.pooled_noise)
    if not devs or not df:
        return "-"
    return (
        f"{sum(d > OFF_PCT for d in devs)}/{len(devs)} off, sd {100 * sd:.2f}%, "
        f"median dev {statistics.median(devs):.2f}%"
    )


def report(store: Path) -> str:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        trials = gemm_trials(db)
    lines = [f"## {store}"]
    for shape in sorted({t[3] for t in trials}):
        cells = []
        for name, rule in RULES.items():
            per: dict[tuple[str | None, str], list[float]] = defaultdict(list)
            for _, sha, patch, sh, s, c in trials:
                if sh == shape:
                    per[(patch, sha)].append(rule(s, c))
            cells.append(f"{name}: {figures(per)}")
        lines.append(f"{shape}: " + " | ".join(cells))
    return "\n".join(lines)


def rewrite(store: Path, out: Path) -> str:
    shutil.copy(store, out)
    with sqlite3.connect(out) as db:
        trials = gemm_trials(db)
        for id_, _, _, _, s, c in trials:
            db.execute("UPDATE trials SET ratio = ? WHERE id = ?", (device_ratio(s, c)[0], id_))
    return f"{out}: {len(trials)} GEMM ratios from device_ratio"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.ratio_rules", description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", type=Path, nargs="+")
    parser.add_argument("--rewrite", type=Path, help="write a copy of the one STORE with device_ratio's ratios")
    args = parser.parse_args(argv)
    missing = [s for s in args.stores if not s.is_file()]
    if missing:
        print(f"ratio_rules: no such store: {missing[0]}", file=sys.stderr)
        return 2
    if args.rewrite:
        if len(args.stores) != 1:
            print("ratio_rules: --rewrite takes one STORE", file=sys.stderr)
            return 2
        print(rewrite(args.stores[0], args.rewrite))
        return 0
    for store in args.stores:
        try:
            print(report(store), flush=True)
        except sqlite3.DatabaseError as exc:
            print(f"ratio_rules: {store}: not a store ({exc})", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

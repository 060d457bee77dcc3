"""Whether a trial set up ahead and held reads as a fresh one does, read from a run's store.

    python -m studies.held_trials STORE [STORE ...] [--config configs/h200-demo.toml] [--min-trials 4]

Why: the warmer (bisector/measure/warmer.py) sets trials up before the run asks for them and holds
them: a commit's first trial as a standby, its second as the standby's companion, a later one as a
spare. That takes setups off the device's path, but a held trial has drawn its inputs and set up
long before its timed section. Per trial: its value on the metric its suite is decided on
(config `thresholds`), as a deviation from the median of every trial of its build (commit and
patch, with at least --min-trials), by how it came: "first" (slot 0, cold compile), "companion"
(slot 1, held), "spare" (a later slot, held), "fresh" (set up when asked). Printed per store and
shape: the trials of each kind, the median and the 90th percentile of the absolute deviation. No
new measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from bisector.config import load
from bisector.model import TrialRecord
from bisector.search.samples import trial_metric
from studies.stored_trials import over_stores, trial_processes

KINDS = ("first", "companion", "spare", "fresh")


def kind(r: TrialRecord) -> str:
    """How the trial came: its slot, and whether it was held (its timeline has an unhold)."""
    held = (r.protocol.get("timeline") or {}).get("unheld") is not None
    if not r.slot:
        return "first"
    return ("companion" if r.slot == 1 else "spare") if held else "fresh"


def rows(store: Path, config: Path, min_trials: int) -> list[str]:
    th = load(config).thresholds
    builds: dict[tuple[str, str | None, str], list[tuple[str, float]]] = defaultdict(list)
    for records in trial_processes(store).values():
        for r in records:
            value = trial_metric(r, th.decision_of(r.shape.split("/", 1)[0]))
            if value is not None and r.slot is not None:
                builds[(r.sha, r.patch_hash, r.shape)].append((kind(r), value))
    dev: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (_, _, shape), got in builds.items():
        if len(got) < min_trials:
            continue
        mid = statistics.median(v for _, v in got)
        for k, v in got:
            dev[(shape, k)].append(abs(100.0 * (v / mid - 1.0)))
    out = []
    for shape in sorted({s for s, _ in dev}):
        cells = []
        for k in KINDS:
            d = sorted(dev.get((shape, k), []))
            cells.append(f"{len(d)}: {statistics.median(d):.2f} / {d[int(0.9 * (len(d) - 1))]:.2f}%" if d else "-")
        out.append(f"| {store.name} | {shape} | " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--config",
            type=Path,
            default=Path("configs/h200-demo.toml"),
            help="the config whose thresholds say each suite's metric",
        )
        parser.add_argument("--min-trials", type=int, default=4)

    return over_stores(
        "held_trials",
        __doc__,
        argv,
        options,
        lambda args: [
            "| store | shape | " + " | ".join(f"{k}: trials: median / p90 of the deviation" for k in KINDS) + " |",
            "|---|---|" + "---:|" * len(KINDS),
        ],
        lambda store, args: "\n".join(rows(store, args.config, args.min_trials)),
    )


if __name__ == "__main__":
    sys.exit(main())

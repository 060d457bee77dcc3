"""Did a CPU run's commits take their trials on one core more than the other, and does a core read apart?

    python -m studies.core_bias STORE [STORE ...] [--shapes fa/s1024,gemm/tall]

Why: a neutral CPU demo build read ~21% slow in every trial of one CI run (studies/results/
cpu-slow-builds.txt). If a commit's trials had all run on one of the two cores, a slow core would pass
for a slow commit. Per store and shape: trials per core, the commits whose trials (4 or more) fell 80%
or more on one core, and per commit with 2 or more trials on each core, the median log ratio on core 1
minus that on core 0 (the median over commits, and their spread). Reads `protocol.timeline.device`.
No new measurement.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from studies.stored_trials import over_stores, trial_processes


def per_core(store: Path, shapes: set[str]) -> dict[str, dict[str, dict[int, list[float]]]]:
    """shape -> commit -> core -> log ratios of its unpatched OK trials."""
    out: dict[str, dict[str, dict[int, list[float]]]] = {}
    for (sha, patch, _), records in trial_processes(store).items():
        if patch:
            continue
        for r in records:
            core = (r.protocol.get("timeline") or {}).get("device")
            if r.ratio and r.ratio > 0 and core is not None and (not shapes or r.shape in shapes):
                out.setdefault(r.shape, {}).setdefault(sha, {}).setdefault(int(core), []).append(math.log(r.ratio))
    return out


def row(store: Path, args: argparse.Namespace) -> str:
    lines = []
    for shape, commits in sorted(per_core(store, set(filter(None, args.shapes.split(",")))).items()):
        counts = [(len(c.get(0, [])), len(c.get(1, []))) for c in commits.values()]
        lopsided = sum(1 for a, b in counts if a + b >= 4 and min(a, b) <= 0.2 * (a + b))
        diffs = [
            statistics.median(c[1]) - statistics.median(c[0])
            for c in commits.values()
            if len(c.get(0, [])) >= 2 and len(c.get(1, [])) >= 2
        ]
        gap = (
            f"{statistics.median(diffs):+.3f} (spread {statistics.pstdev(diffs):.3f}, {len(diffs)} commits)"
            if diffs
            else "-"
        )
        lines.append(
            f"| {store} | {shape} | {len(commits)} | {sum(a for a, _ in counts)} / {sum(b for _, b in counts)} "
            f"| {lopsided} | {gap} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--shapes", default="", help="shape keys, comma-separated (default: all)")

    return over_stores(
        "core_bias",
        __doc__,
        argv,
        options,
        lambda _: [
            "| store | shape | commits | trials core 0 / 1 | lopsided commits | core 1 - core 0, median log ratio |",
            "|---|---|---:|---:|---:|---|",
        ],
        row,
    )


if __name__ == "__main__":
    raise SystemExit(main())

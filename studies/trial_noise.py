"""Trial-to-trial noise per shape of stored runs, as the search pools it, by kernel-timing method.

    python -m studies.trial_noise STORE [STORE ...] [--metric fa=speed,gemm=ratio]

Why: the search sizes every new commit's trials to this pooled noise (bisector/search/samples.py),
so a timing method that adds noise costs trials everywhere. Each store is a `results.sqlite`; the
figures are per (store, shape, method): trials, commits with two or more trials, pooled log sd of
the decided-on metric (ratio to the control, or the subject's full-clock speed), in percent.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from bisector.search.stats import full_clock_time, log_sd


def noise(store: Path, metrics: dict[str, str]) -> list[tuple[str, str, int, int, float]]:
    """(shape, method, trials, commits, pooled log sd %) of the search's own trials (no patches)."""
    rows = (
        sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        .execute(
            "select sha, shape, kernel_method, ratio, subject_ms from trials where status = 'ok' "
            "and (patch_hash is null or patch_hash = '')"
        )
        .fetchall()
    )
    groups: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sha, shape, method, ratio, subject_ms in rows:
        speed = metrics.get(shape.split("/", 1)[0]) == "speed"
        value = 1.0 / full_clock_time(json.loads(subject_ms)) if speed else ratio
        if value:
            groups[(shape, method or "?")][sha].append(value)
    out = []
    for (shape, method), per in sorted(groups.items()):
        sd, _ = log_sd([v for v in per.values() if len(v) > 1])
        out.append((shape, method, sum(map(len, per.values())), sum(len(v) > 1 for v in per.values()), 100 * sd))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path, nargs="+")
    ap.add_argument("--metric", default="fa=speed,gemm=ratio", help="suite=metric pairs (the H200 demo's)")
    args = ap.parse_args()
    metrics = dict(kv.split("=", 1) for kv in args.metric.split(",") if kv)
    print("| store | shape | kernel method | trials | commits | trial noise (log sd %) |")
    print("|---|---|---|---|---|---|")
    for store in args.store:
        for shape, method, n, commits, sd in noise(store, metrics):
            print(f"| {store.parent.name}/{store.name} | {shape} | {method} | {n} | {commits} | {sd:.2f} |")


if __name__ == "__main__":
    main()

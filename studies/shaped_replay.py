"""What measuring only a pair's unclear shapes, and a split point's open ones, saves, replayed on an
H200 demo run's stored trials.

    python -m studies.shaped_replay STORE [STORE ...]     (an H200 demo's results.sqlite, unzipped)

Why: before `probe.shaped`, a pair unclear on one shape doubled every shape of both commits; on
the H200 demo attention is ~0.78 s of a trial's device work and the decode GEMM ~0.03 s, and the
pairs unclear on the decode GEMM alone doubled attention too. Each store's search is replayed
offline twice (`bisector run --offline`'s path: stored trials only, in the order they were
measured): once through a probe without `shaped` (every shape doubled, as before) and once with
it, and once more with split points measured only on the shapes not shown the same between their
part's ends (`SearchSettings.split_on_moved`; the first two replays split on every shape, as the runs did).
Printed per store and mode: the steps found with their shapes, the samples the search used per
shape, and their device time at the store's own median device seconds per shape and trial
(compile + warm-up + timed + latency calls). A replay with `shaped` reads fewer samples than the run
measured, always the first ones stored, so it can decide a close pair otherwise than a run would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import bisector.search as search
from bisector import pipeline
from bisector.demo.demo_config import demo_config
from bisector.demo.repo import write_demo_repo
from bisector.model import Measurement, SearchResult
from bisector.search.prober import ProbeBase
from studies.stored_trials import over_stores, trial_processes

SHAPES = ("fa/s16384", "gemm/m8192", "gemm/m54560", "gemm/decode")
WORK = ("compile", "control_compile", "warmup", "timed", "calls")  # a shape's phases on the device


class Unshaped(ProbeBase):
    """The probe as the search saw it before `shaped`: every doubling measures every shape."""

    side_by_side = True

    def __init__(self, probe: Any) -> None:
        self.probe = probe

    def __call__(self, sha: str, repeats: int) -> Measurement:
        return self.probe(sha, repeats)

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        return self.probe.together(wants)

    def independent(self) -> Any:
        return self.probe.independent()


def device_s(store: Path) -> dict[str, float]:
    """Median device seconds per shape and trial, from the trials' phases."""
    per: dict[str, list[float]] = defaultdict(list)
    for records in trial_processes(store).values():
        for r in records:
            spans = r.protocol.get("phases") or []
            per[r.shape].append(sum(b - a for name, shape, a, b in spans if shape == r.shape and name in WORK))
    return {k: statistics.median(v) for k, v in per.items() if v}


def replay(store: Path, shaped: bool, split_on_moved: bool = False) -> SearchResult:
    """The store's search replayed offline, with or without `shaped` (and `split_on_moved`)."""
    work = Path(tempfile.mkdtemp(prefix="shaped-replay-"))
    manifest = write_demo_repo(work / "demo" / "upstream")  # the campaign is named after its directory
    config = demo_config("cuda", work / "demo" / "upstream")
    got: list[SearchResult] = []
    kept = search.localize

    def localize(commits, probe, settings=search.SearchSettings()):  # type: ignore[no-untyped-def]
        got.append(
            kept(commits, probe if shaped else Unshaped(probe), replace(settings, split_on_moved=split_on_moved))
        )
        return got[-1]

    search.localize = localize
    try:
        pipeline.bisect(
            config,
            pipeline.RunOptions(
                good=manifest.good,
                bad=manifest.bad,
                store=str(store),
                work_dir=str(work / "work"),
                report_dir=str(work / "report"),
                offline=True,
                verify_fixes=False,
                find_hunks=False,
                shapes=SHAPES,
            ),
        )
    finally:
        search.localize = kept
    return got[-1]


def rows(store: Path) -> str:
    cost = device_s(store)
    lines = [
        f"## {store}: device s per shape and trial " + json.dumps({k: round(v, 3) for k, v in sorted(cost.items())})
    ]
    for shaped, moved in ((False, False), (True, False), (True, True)):
        result = replay(store, shaped, moved)
        used: Counter[str] = Counter()
        for m in result.measurements.values():
            for shape, values in m.samples.items():
                used[shape] += len(values)
        steps = ", ".join(f"{s.commit[:7]} {'+'.join(s.shapes)}" for s in result.steps)
        mode = "split on open shapes" if moved else "shaped" if shaped else "every shape"
        lines.append(
            f"{mode}: steps {steps}; dropped {len(result.dropped)}; samples "
            + json.dumps(dict(sorted(used.items())))
            + f"; device s {sum(cost.get(s, 0.0) * n for s, n in used.items()):.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        pass

    return over_stores("shaped_replay", __doc__, argv, options, lambda args: [], lambda store, args: rows(store))


if __name__ == "__main__":
    raise SystemExit(main())

"""How long the run's workers took to open the device, and how many opened it at once. Read from a run's store.

    python -m studies.context_opens STORE [STORE ...]

Why: an idle worker opens the one device before its trial is known (the executor's `Prelude`), and
the workers forked ahead for the verification's lineage open it in the cold start
(bisector/runner/executor.py `_fork_ahead_of_renewal`). On the H200 a context opened alone took
~0.3 s, and several opened at once took seconds each: the driver seems to serialize them, so a
worker that opens its context beside six others waits for theirs. Per store: the trial processes
whose worker opened the device (each trial records `worker.device_opened_s` and its worker's
`ready` time), those seconds (median, max), the share of them opened while another worker was
opening too, and the run's first device section, in seconds after its first trial was asked. No
new measurement.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from studies.stored_trials import over_stores, trial_processes


def opens(store: Path) -> tuple[list[tuple[float, float]], float | None]:
    """Each opening worker's (start, end) of its device opening, and the first device section's
    start after the first trial was asked (None without a timeline)."""
    spans, asked, first_go = [], [], []
    for records in trial_processes(store).values():
        protocol = records[0].protocol
        worker, timeline = protocol.get("worker") or {}, protocol.get("timeline") or {}
        if timeline.get("submitted"):
            asked.append(float(timeline["submitted"]))
        if timeline.get("go"):
            first_go.append(float(timeline["go"]))
        if worker.get("device_opened_s") and timeline.get("ready"):
            start = float(timeline["ready"])
            spans.append((start, start + float(worker["device_opened_s"])))
    go = min(first_go) - min(asked) if asked and first_go else None
    return sorted(set(spans)), go


def row(store: Path) -> str:
    spans, go = opens(store)
    seconds = [b - a for a, b in spans]
    together = sum(any(x < b and y > a for x, y in spans if (x, y) != (a, b)) for a, b in spans)
    median = f"{statistics.median(seconds):.2f} / {max(seconds):.2f} s" if seconds else "-"
    return (
        f"| {store} | {len(spans)} | {median} | {100 * together / max(1, len(spans)):.0f}% | "
        f"{f'{go:.1f} s' if go is not None else '-'} |"
    )


def main(argv: list[str] | None = None) -> int:
    return over_stores(
        "context_opens",
        __doc__,
        argv,
        lambda parser: None,
        lambda args: [
            "| store | workers that opened the device | seconds, median / max | opened beside another | "
            "first device section after the first trial asked |",
            "|---|---:|---:|---:|---:|",
        ],
        lambda store, args: row(store),
    )


if __name__ == "__main__":
    sys.exit(main())

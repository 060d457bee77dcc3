"""Where the device stood idle between trials, read from a run's store.

    python -m studies.idle_gaps STORE [STORE ...] [--min-gap 0.3] [--max-gap 30]

Why: a GPU run is as fast as its device is busy, and the device waits whenever the next trial is not
set up when the last one releases it. Every trial records its timeline (`protocol.timeline`: when it
was submitted, asked for the device, got it, released it, and, for one set up ahead and held, when it
was unheld). Per store: the trials, their device time, and the gaps between one trial's release and
the next one's `go` (longer than `--min-gap`, shorter than `--max-gap`: a longer one is a stop between
two calls), split by what came next: a commit's first trial (slot 0) or a later one; and how many
trials came from a standby (a first trial) or a spare (a later one); and the gaps by what the device
waited for (`waited_for`). No new measurement. `device_gaps` is the same per device, for runs on
several (studies/dask_demo.py). Until 2026-12-04 (late) a held trial unheld only after the last had
released counted as "held, not set up when asked", and a gap before a trial set up in time as one of
the set-up kinds; they are now "asked after the last ended" and "hand-off".
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bisector.measure.time_spent import from_records
from bisector.runner.executor import Timeline
from studies.stored_trials import over_stores, trial_processes


def waited_for(last: Timeline, nxt: Timeline) -> str:
    """What the device waited for in the gap before `nxt`: a trial the run asked for (submitted, or a
    held one unheld) only once `last` had released it, a decision; one asked for before but set up
    only after, held ahead (a standby or spare) or fresh; or nothing but the device's hand-off (set up
    and asking before `last` released)."""
    assert last.release is not None
    asked = nxt.unheld if nxt.unheld is not None else nxt.submitted
    if asked > last.release:
        return "asked after the last ended"
    if nxt.want is not None and nxt.want <= last.release:
        return "hand-off"
    return "held, not set up when asked" if nxt.unheld is not None else "fresh, set up late"


WAITS = ("asked after the last ended", "held, not set up when asked", "fresh, set up late", "hand-off")


def sections(store: Path) -> list[Timeline]:
    """The trial processes that held the device, by when they got it (time_spent.from_records: their
    stored timelines, brief loans included)."""
    timelines, _ = from_records([r for records in trial_processes(store).values() for r in records])
    return sorted((t for t in timelines if t.go and t.release), key=lambda t: t.go)


def idle(a: Timeline, b: Timeline, loans: list[tuple[float, float]]) -> float:
    """The device's idle time between two device sections: the gap less the setups' brief loans in it."""
    assert a.release is not None and b.go is not None
    held = sum(max(0.0, min(y, b.go) - max(x, a.release)) for x, y in loans)
    return b.go - a.release - held


def device_gaps(store: Path, min_gap: float = 0.05) -> str:
    """Per device: how busy it was over its span (first go to last release), and its idle gaps longer
    than `min_gap` by what it waited for (`waited_for`): one line for a run on several devices."""
    secs = sections(store)
    parts = []
    for device in sorted({s.device for s in secs}):
        mine = [s for s in secs if s.device == device]
        loans = sorted(loan for s in mine for loan in s.briefs)
        busy = sum(s.device_s for s in mine)
        span = max(s.release or 0.0 for s in mine) - min(s.go or 0.0 for s in mine)
        why = {w: [0, 0.0] for w in WAITS}
        for a, b in zip(mine, mine[1:]):
            if (gap := idle(a, b, loans)) > min_gap:
                tally = why[waited_for(a, b)]
                tally[0] += 1
                tally[1] += gap
        parts.append(
            f"device {device} busy {busy:.0f} s of {span:.0f} s ({busy / max(span, 1e-9):.0%}), gaps: "
            + ", ".join(f"{w} {n} ({s:.0f} s)" for w, (n, s) in why.items())
        )
    return "; ".join(parts)


def row(store: Path, min_gap: float, max_gap: float) -> str:
    secs = sections(store)
    loans = sorted(loan for s in secs for loan in s.briefs)
    gaps = [(gap, a, b) for a, b in zip(secs, secs[1:]) if min_gap < (gap := idle(a, b, loans)) < max_gap]
    first = [g for g, _, b in gaps if not b.slot]
    patched_first = [g for g, _, b in gaps if not b.slot and b.patch_hash]
    later = [g for g, _, b in gaps if b.slot]
    device = sum(s.device_s for s in secs)
    why = {w: [g for g, a, b in gaps if waited_for(a, b) == w] for w in WAITS}
    return (
        f"| {store} | {len(secs)} | {device:.0f} s ({device / max(1, len(secs)):.2f} s) | "
        f"{len(first)}, {sum(first):.0f} s ({len(patched_first)}, {sum(patched_first):.0f} s patched) | "
        f"{len(later)}, {sum(later):.0f} s"
        f"{f' (median {statistics.median(later):.2f} s)' if later else ''} | "
        f"{sum(s.unheld is not None and not s.slot for s in secs)} | "
        f"{sum(s.unheld is not None and bool(s.slot) for s in secs)} | "
        + " | ".join(f"{len(v)}, {sum(v):.0f} s" for v in why.values())
        + " |"
    )


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--min-gap", type=float, default=0.3)
        parser.add_argument("--max-gap", type=float, default=30.0, help="longer gaps are stops between calls")

    return over_stores(
        "idle_gaps",
        __doc__,
        argv,
        options,
        lambda args: [
            f"| store | trials | on the device (a trial) | gaps > {args.min_gap:g} s before a first trial "
            "(of them a patched build's) | "
            "before a later trial | first trials from standbys | later trials from spares | "
            + " | ".join(f"gaps: {w}" for w in WAITS)
            + " |",
            "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(WAITS),
        ],
        lambda store, args: row(store, args.min_gap, args.max_gap),
    )


if __name__ == "__main__":
    sys.exit(main())

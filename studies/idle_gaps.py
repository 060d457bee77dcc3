"""Where the device stood idle between trials, read from a run's store.

    python -m studies.idle_gaps STORE [STORE ...] [--min-gap 0.3] [--max-gap 30]

Why: a GPU run is as fast as its device is busy, and the device waits whenever the next trial is not
set up when the last one releases it. Every trial records its timeline (`protocol.timeline`: when it
was submitted, asked for the device, got it, released it, and, for one set up ahead and held, when it
was unheld). Per store: the trials, their device time, and the gaps between one trial's release and
the next one's `go` (longer than `--min-gap`, shorter than `--max-gap`: a longer one is a stop between
two calls), split by what came next: a commit's first trial (slot 0) or a later one; and how many
trials came from a standby (a first trial) or a spare (a later one); and the gaps by what the device
waited for (`waited_for`). No new measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from studies.stored_trials import over_stores, trial_processes


@dataclass(frozen=True)
class Section:
    """One trial process's hold of the device, and when it was asked for."""

    go: float
    release: float
    slot: int
    unheld: bool
    submitted: float = 0.0
    patched: bool = False  # a patched build's trial (a revert, a hunk subset)
    briefs: tuple[tuple[float, float], ...] = ()  # its setup's brief loans of the device (inputs drawn)


def waited_for(last: Section, nxt: Section) -> str:
    """What the device waited for in the gap before `nxt`: a held process (standby or spare) not yet
    set up when the run asked for it; a fresh one asked for before `last` ended but not yet set up;
    or one the run asked for only once `last` had ended (a decision), with nothing held for it."""
    if nxt.unheld:
        return "held, not set up when asked"
    return "fresh, set up late" if nxt.submitted < last.release else "asked after the last ended"


WAITS = ("held, not set up when asked", "fresh, set up late", "asked after the last ended")


def sections(store: Path) -> list[Section]:
    out = []
    for (_, patch, slot), records in trial_processes(store).items():
        line = records[0].protocol.get("timeline") or {}
        if line.get("go") and line.get("release"):
            out.append(Section(line["go"], line["release"], int(slot or 0), bool(line.get("unheld")),
                               float(line.get("submitted") or 0.0), bool(patch),
                               tuple((float(a), float(b)) for a, b in line.get("briefs") or ())))
    return sorted(out, key=lambda s: s.go)


def idle(a: Section, b: Section, loans: list[tuple[float, float]]) -> float:
    """The device's idle time between two device sections: the gap less the setups' brief loans in it."""
    held = sum(max(0.0, min(y, b.go) - max(x, a.release)) for x, y in loans)
    return b.go - a.release - held


def row(store: Path, min_gap: float, max_gap: float) -> str:
    secs = sections(store)
    loans = sorted(loan for s in secs for loan in s.briefs)
    gaps = [(gap, a, b) for a, b in zip(secs, secs[1:]) if min_gap < (gap := idle(a, b, loans)) < max_gap]
    first = [g for g, _, b in gaps if b.slot == 0]
    patched_first = [g for g, _, b in gaps if b.slot == 0 and b.patched]
    later = [g for g, _, b in gaps if b.slot > 0]
    device = sum(s.release - s.go + sum(y - x for x, y in s.briefs) for s in secs)
    why = {w: [g for g, a, b in gaps if waited_for(a, b) == w] for w in WAITS}
    return (f"| {store} | {len(secs)} | {device:.0f} s ({device / max(1, len(secs)):.2f} s) | "
            f"{len(first)}, {sum(first):.0f} s ({len(patched_first)}, {sum(patched_first):.0f} s patched) | "
            f"{len(later)}, {sum(later):.0f} s"
            f"{f' (median {statistics.median(later):.2f} s)' if later else ''} | "
            f"{sum(s.unheld and s.slot == 0 for s in secs)} | {sum(s.unheld and s.slot > 0 for s in secs)} | "
            + " | ".join(f"{len(v)}, {sum(v):.0f} s" for v in why.values()) + " |")


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--min-gap", type=float, default=0.3)
        parser.add_argument("--max-gap", type=float, default=30.0, help="longer gaps are stops between calls")

    return over_stores("idle_gaps", __doc__, argv, options, lambda args: [
        f"| store | trials | on the device (a trial) | gaps > {args.min_gap:g} s before a first trial (of them a patched build's) | "
        "before a later trial | first trials from standbys | later trials from spares | "
        + " | ".join(f"gaps: {w}" for w in WAITS) + " |",
        "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(WAITS)], lambda store, args: row(store, args.min_gap, args.max_gap))


if __name__ == "__main__":
    sys.exit(main())

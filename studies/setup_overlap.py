"""Do trial setups that overlap another trial's timed section disturb it? Read from a run's store.

    python -m studies.setup_overlap STORE [STORE ...] [--off 5] [--by-part]

Why: on a GPU host the executor sets up the next trials (process, device context, inputs staged on
the device, the first calls captured) while one trial holds the device, so that the device never
waits on a setup (bisector/runner/executor.py, warmer.py: standbys and spares). The capture itself
was measured not to disturb a timed section (studies/results/h200-precompile-overlap.txt), but
staging inputs runs kernels (random fills of up to ~1 GB) and a context is made, in another process,
on the same GPU. Per store and shape: the trials whose value (the ratio to the control) is more than
`--off` percent from their commit's median, and how many of them had another trial's `setup` phase
overlapping their `timed` phase, against the same for the rest. Every trial records its phases with
wall-clock times (`protocol.phases`), so this needs no new measurement.

`--by-part` splits the setup into its parts (`context`: the device context made; `precompile <shape>`:
that shape's first calls captured, each shape apart, and before 2026-12-03 its inputs drawn on the
device too; `staging`: since then, every shape's inputs drawn in a brief loan of the device, which
no timed section may overlap; `rest`: imports, the machine read, the backends loaded) and gives,
per part, how many off trials and how many others it overlapped: which part disturbs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bisector.model import TrialStatus
from studies.stored_trials import over_stores, trial_processes

# the phases a setup is made of (benches/trial.py `run`), by the part this study names them
# (a `precompile` phase by its shape: "precompile <shape>")
SETUP_PARTS = {
    "context": "context",
    "precompile": "precompile",
    "machine": "rest",
    "control_load": "rest",
    "subjects_load": "rest",
    "staging": "staging",
}


@dataclass
class Process:
    """One trial process: its setup span and, per shape, its timed span and value."""

    setup: list[tuple[float, float]] = field(default_factory=list)
    parts: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # setup part -> spans
    timed: dict[str, tuple[float, float]] = field(default_factory=dict)
    value: dict[str, float] = field(default_factory=dict)


def processes(store: Path) -> dict[tuple[str, str | None, int | None], Process]:
    """The trial processes with a ratio in at least one shape, from their OK records."""
    out: dict[tuple[str, str | None, int | None], Process] = {}
    for key, records in trial_processes(store).items():
        for r in records:
            if r.status is not TrialStatus.OK or r.ratio is None:
                continue
            proc = out.setdefault(key, Process())
            for name, of, start, end in r.protocol.get("phases") or []:
                if name == "setup" and (start, end) not in proc.setup:
                    proc.setup.append((start, end))
                elif name in SETUP_PARTS:
                    spans = proc.parts.setdefault(f"precompile {of}" if name == "precompile" else SETUP_PARTS[name], [])
                    if (start, end) not in spans:
                        spans.append((start, end))
                elif name == "timed" and of == r.shape:
                    proc.timed[r.shape] = (start, end)
            proc.value[r.shape] = r.ratio
    return out


def _overlaps(spans: list[tuple[float, float]], a: float, b: float) -> bool:
    return any(x < b and y > a for x, y in spans)


def table(store: Path, off_pct: float, by_part: bool = False) -> list[str]:
    procs = processes(store)
    values: dict[tuple[str, str | None, str], list[float]] = {}
    for (sha, patch, _), proc in procs.items():
        for shape, v in proc.value.items():
            values.setdefault((sha, patch, shape), []).append(v)
    medians = {k: statistics.median(v) for k, v in values.items()}
    lines = []
    for shape in sorted({s for p in procs.values() for s in p.timed}):
        counts = {True: [0, 0], False: [0, 0]}  # off? -> [trials, with a setup overlapping]
        by: dict[str, dict[bool, int]] = {}  # setup part -> off? -> trials it overlapped
        for key, proc in procs.items():
            if shape not in proc.timed:
                continue
            a, b = proc.timed[shape]
            others = [p for other, p in procs.items() if other != key]
            overlapped = any(_overlaps(p.setup, a, b) for p in others)
            off = abs(proc.value[shape] / medians[(key[0], key[1], shape)] - 1) * 100 > off_pct
            counts[off][0] += 1
            counts[off][1] += overlapped
            for part in {part for p in others for part, spans in p.parts.items() if _overlaps(spans, a, b)}:
                by.setdefault(part, {True: 0, False: 0})[off] += 1
        (n_off, o_off), (n_ok, o_ok) = counts[True], counts[False]
        lines.append(
            f"| {store} | {shape} | {n_off} | {o_off} ({100 * o_off / max(1, n_off):.0f}%) | {n_ok} | "
            f"{o_ok} ({100 * o_ok / max(1, n_ok):.0f}%) |"
            + (
                " "
                + ", ".join(f"{part} {n[True]}/{n_off} vs {n[False]}/{n_ok}" for part, n in sorted(by.items()))
                + " |"
                if by_part
                else ""
            )
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--off", type=float, default=5.0, help="percent from the commit's median that counts as off"
        )
        parser.add_argument(
            "--by-part", action="store_true", help="which part of the setups overlapped: off trials against the others"
        )

    return over_stores(
        "setup_overlap",
        __doc__,
        argv,
        options,
        lambda args: [
            f"| store | shape | trials > {args.off:g}% off their commit's median | of them with another trial's setup "
            f"overlapping their timed section | the other trials | of them overlapped |"
            + (" by setup part: off overlapped vs others overlapped |" if args.by_part else ""),
            "|---|---|---:|---:|---:|---:|" + ("---|" if args.by_part else ""),
        ],
        lambda store, args: "\n".join(table(store, args.off, args.by_part)),
    )


if __name__ == "__main__":
    sys.exit(main())

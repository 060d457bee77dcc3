"""A shorter device section per trial: a heater in the timing graph instead of its unread first replay.

    python -m studies.lean_timing [--trials 4] [--modes replay,heat50,heat150] [--out FILE]

Why: on the H200 demo (reports/2026-12-03-h200-demo) attention took 266 of the 395 s the device was
held: per trial 0.72 s timed (two replays of 6 subject/control repetitions, the first unread) and
0.18 s of warm-up (three synchronized rounds, for host samples that only say the call is all
kernel; a device-bound warm-up now stops after its configured round, in every mode here). Modes
(each trial `python -m benches.trial` in a fresh process, as the bot runs it):
- `replay`: attention's graph replayed twice, the second read (the protocol before);
- `heatN`: attention's graph starts with ~N ms of untimed subject/control calls and is replayed once
  (configs' `protocol.graph_heat_ms`).
GEMM keeps its two read replays in every mode. (The first run, 2026-12-03 08:42, named two modes
`now` and `warm1` that ran the same protocol, the early warm-up stop in both: their difference is
the study's resolution at 4 trials a mode.) Two commits of the demo history: the first, and #122's
(attention 2.5x slower after its fast-math flag is dropped). Modes and commits alternate, so a
drift of the machine falls on all; one discarded trial per commit compiles first. Printed and
written per commit, shape and mode: the median of the value the search decides on (attention: the
subject's full-clock speed; GEMM: the ratio to cuBLAS), its trial-to-trial CV, the difference to
the first mode, warm-up + timed seconds per trial; per mode the device section per trial; and attention's
repetitions in order (each over its trial's median): a clock still settling shows as a slope.
Needs one NVIDIA GPU with triton; exits 2 with a one-line reason elsewhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bisector.demo.history import COMMITS, states
from bisector.search.samples import cv_pct
from studies.graph_reads import SHAPES, gpu_header, run_trial, shape_figures, spans, trial_spec
from studies.kernel_time import write_demolib

ROOT = Path(__file__).resolve().parents[1]
FA = "fa/s16384"


def mode_spec(base: dict[str, Any], mode: str) -> dict[str, Any]:
    """The trial spec of one mode (see the module's docstring)."""
    spec = dict(base, graph_reads={k: (1 if k.startswith("fa/") else 2) for k in base["graph_reads"]})
    if mode == "replay":
        return spec
    if mode.startswith("heat") and mode[4:].isdigit():
        return dict(spec, graph_heat_ms={FA: float(mode[4:])})
    raise ValueError(f"unknown mode {mode!r} (replay, heat<ms>)")


def commit_sources(work: Path) -> dict[str, Path]:
    """The demo's first commit and #122's (the slow attention kernel)."""
    knobs = states()
    at = next(i for i, c in enumerate(COMMITS) if c.pr == 122)
    return {"first": write_demolib(knobs[0], work / "first"), "#122": write_demolib(knobs[at], work / "pr122")}


def rep_profile(trials: list[dict[str, Any]]) -> list[float]:
    """Attention's repetitions in order, each over its trial's median, median over the trials."""
    rows = [[t / statistics.median(ms) for t in ms] for ms in (r["subject_ms"] for r in trials)]
    return [statistics.median(col) for col in zip(*rows)] if rows else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.lean_timing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4, help="fresh trial processes per mode and commit")
    parser.add_argument("--modes", default="replay,heat50,heat150")
    parser.add_argument("--out", default=str(ROOT / "studies" / "results" / "h200-lean-timing.txt"))
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    try:
        for mode in modes:
            mode_spec({"graph_reads": {}}, mode)
    except ValueError as exc:
        print(f"studies.lean_timing: --modes: {exc}", file=sys.stderr)
        return 2
    found = gpu_header("lean_timing")
    if found is None:
        return 2
    cfg, header = found
    lines = [
        f"{header}: {args.trials} fresh trial processes per mode and commit, alternating; "
        f"reps {cfg.protocol.reps}, warm-up {cfg.protocol.warmup}; modes {', '.join(modes)}"
    ]
    print(lines[0], flush=True)
    values: dict[tuple[str, str, str], list[float]] = {}
    timed: dict[tuple[str, str, str], list[float]] = {}
    device: dict[str, list[float]] = {m: [] for m in modes}
    fa_trials: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="lean-timing-") as tmp:
        work = Path(tmp)
        sources = commit_sources(work)
        caches = {name: work / f"triton-{i}" for i, name in enumerate(sources)}
        seed = 0
        for name, source in sources.items():  # compile, clock up: discarded
            run_trial(trial_spec(source, cfg, cfg.protocol.reps, 1, 999), work, caches[name])
        for k in range(args.trials):
            order = modes[k % len(modes) :] + modes[: k % len(modes)]
            for name, source in sources.items():
                for mode in order:
                    seed += 1
                    output = run_trial(
                        mode_spec(trial_spec(source, cfg, cfg.protocol.reps, 1, seed), mode), work, caches[name]
                    )
                    device[mode].append(spans(output, "device"))
                    for result, value, seconds in shape_figures(output):
                        key = (name, result["shape"], mode)
                        values.setdefault(key, []).append(value)
                        timed.setdefault(key, []).append(seconds)
                        if result["shape"] == FA:
                            fa_trials[mode].append(result)
                    print(f"trial {seed}: {name} {mode}, device {device[mode][-1]:.2f} s", flush=True)
    lines += [
        "",
        "| commit | shape | mode | value (median) | trial CV % | vs the first mode | warm-up + timed s (median) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for name in sources:
        for shape in SHAPES:
            base = statistics.median(values.get((name, shape, modes[0]), [float("nan")]))
            for mode in modes:
                v = values.get((name, shape, mode))
                if not v:
                    continue
                lines.append(
                    f"| {name} | {shape} | {mode} | {statistics.median(v):.5g} | {cv_pct(v):.2f} | "
                    f"{(statistics.median(v) / base - 1) * 100:+.2f}% | "
                    f"{statistics.median(timed[(name, shape, mode)]):.3f} |"
                )
    lines += [
        "",
        "device section per trial (s, median): "
        + ", ".join(f"{m}: {statistics.median(d):.2f}" for m, d in device.items() if d),
    ]
    lines += [
        "",
        f"{FA} repetitions in order, each over its trial's median (median over trials; warm-up rounds, heater calls):",
    ]
    for mode, trials in fa_trials.items():
        profile = " ".join(f"{x:.4f}" for x in rep_profile(trials))
        rounds = sorted({len(r.get("subject_host_ms") or ()) for r in trials})
        heat = sorted({int(r.get("graph_heat_calls", 0)) for r in trials})
        lines.append(f"- {mode}: {profile}; warm-up rounds {rounds}, heater calls {heat}")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

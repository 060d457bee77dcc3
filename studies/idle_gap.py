"""A device-side pause before each timed call, against calls back to back: the trial noise of a power-bound kernel.

    python -m studies.idle_gap [--trials 6] [--modes 1:0,2:20,2:60] [--out studies/results/h200-idle-gap.txt]

Why: on the H200 the demo's attention without its L2 remap (the 389-commit range's slower side,
studies/long_range.py) reads its full-clock speed 1.5-2.9% apart from process to process, against
0.3-0.7% with the remap: some processes read every repetition ~7% slow, the control (SDPA) beside
it too. The kernel runs at the power cap, and each call at the clock its neighbours' heat left.
Ruling out a 3% step there takes 8 trials a side. A mode is `reads:idle_ms`: the timing graph read
once or twice (`protocol.graph_reads`) and a pause of `idle_ms` (one thread spinning on the clock:
`benches.kernel_time.idle_kernel`) before every call's flush.

Each trial is `python -m benches.trial` in a fresh process, at two points of the demo history (the
first commit, and the same with the L2 remap dropped), fa/s16384 only, the H200 demo config's reps and
warm-up, modes and states taking turns. Printed and written per state and mode: the median full-clock
speed (what the search decides on), its trial CV, the ratio to SDPA and its CV, the step between the
two states in both, and the warm-up + timed seconds per trial. Needs one NVIDIA GPU with triton;
exits 2 with a one-line reason elsewhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bisector import config as bisector_config
from bisector.demo.history import INITIAL, derived
from bisector.runner.spec import shape_spec
from bisector.search.samples import cv_pct
from bisector.search.stats import full_clock_time
from studies.graph_reads import CONFIG, ROOT, run_trial
from studies.kernel_time import no_nvidia_gpu, write_demolib

SHAPE = "fa/s16384"
STATES = {"remap": {}, "no remap": {"fa_remap": False}}


def trial_spec(source: Path, cfg: Any, reads: int, idle_ms: float, seed: int) -> dict[str, Any]:
    shape = next(s for s in cfg.shapes if s.key == SHAPE)
    sub = cfg.subjects["fa"]
    return {"sha": source.name, "suite": "fa", "shapes": [shape_spec(shape)],
            "subjects": {"fa": {"entry": sub.entry, "adapter": sub.adapter, "layout": sub.layout, "options": {}}},
            "control": cfg.control, "device": "cuda", "source_dirs": [str(source)], "reps": cfg.protocol.reps,
            "warmup": cfg.protocol.warmup, "graph_reads": {SHAPE: reads}, "idle_ms": {SHAPE: idle_ms},
            "flush_mb": 0, "seed": seed, "tolerances": {k: list(v) for k, v in cfg.thresholds.tolerances.items()}}


def parse_modes(text: str) -> list[tuple[int, float]]:
    out = []
    for item in text.split(","):
        reads, _, idle = item.partition(":")
        out.append((int(reads), float(idle or 0)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.idle_gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="fresh trial processes per state and mode")
    parser.add_argument("--modes", default="1:0,2:20,2:60", help="reads:idle_ms, comma-separated")
    parser.add_argument("--out", default=str(ROOT / "studies" / "results" / "h200-idle-gap.txt"))
    args = parser.parse_args(argv)
    why = no_nvidia_gpu("studies.idle_gap")
    if why:
        print(why, file=sys.stderr)
        return 2
    import torch
    import triton
    cfg = bisector_config.load(CONFIG)
    modes = parse_modes(args.modes)
    lines = [f"# studies.idle_gap on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton "
             f"{triton.__version__}, {time.strftime('%Y-%m-%d %H:%M')}: {args.trials} fresh trial processes per "
             f"state and mode, taking turns; {SHAPE}, reps {cfg.protocol.reps}, warm-up {cfg.protocol.warmup}"]
    print(lines[0], flush=True)
    speed: dict[tuple[str, tuple[int, float]], list[float]] = {}
    ratio: dict[tuple[str, tuple[int, float]], list[float]] = {}
    timed: dict[tuple[str, tuple[int, float]], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="idle-gap-") as tmp:
        work = Path(tmp)
        sources = {name: write_demolib(derived({**INITIAL, **knobs}), work / name.replace(" ", "-"))
                   for name, knobs in STATES.items()}
        caches = {name: work / f"triton-{name.replace(' ', '-')}" for name in STATES}
        for name, source in sources.items():  # compile, clock up: discarded
            run_trial(trial_spec(source, cfg, 1, 0.0, 999), work, caches[name])
        seed = 0
        for k in range(args.trials):
            for name, source in sources.items():
                for mode in (modes if k % 2 == 0 else modes[::-1]):
                    seed += 1
                    output = run_trial(trial_spec(source, cfg, mode[0], mode[1], seed), work, caches[name])
                    result = output["results"][0]
                    if result.get("status") != "ok":
                        raise RuntimeError(f"{name} {mode}: {result.get('status')}: {result.get('error', '')[:300]}")
                    key = (name, mode)
                    speed.setdefault(key, []).append(1e3 / full_clock_time(result["subject_ms"]))
                    ratio.setdefault(key, []).append(float(result["ratio"]))
                    timed.setdefault(key, []).append(sum(end - start for phase, _s, start, end in output["phases"]
                                                         if phase in ("warmup", "timed")))
                    print(f"trial {k} {name} reads {mode[0]} idle {mode[1]:g} ms: speed {speed[key][-1]:.3f}/s "
                          f"ratio {ratio[key][-1]:.4f} timed {timed[key][-1]:.2f} s", flush=True)
    lines += ["", "| state | reads:idle ms | speed 1/s (median) | speed CV % | ratio (median) | ratio CV % | "
              "warm-up + timed s |", "|---|---|---:|---:|---:|---:|---:|"]
    for name in STATES:
        for mode in modes:
            key = (name, mode)
            lines.append(f"| {name} | {mode[0]}:{mode[1]:g} | {statistics.median(speed[key]):.3f} | "
                         f"{cv_pct(speed[key]):.2f} | {statistics.median(ratio[key]):.4f} | {cv_pct(ratio[key]):.2f} | "
                         f"{statistics.median(timed[key]):.2f} |")
    lines += ["", "| reads:idle ms | step in speed | step in ratio |", "|---|---:|---:|"]
    for mode in modes:
        a, b = ("remap", mode), ("no remap", mode)
        lines.append(f"| {mode[0]}:{mode[1]:g} | {(statistics.median(speed[b]) / statistics.median(speed[a]) - 1) * 100:+.1f}% | "
                     f"{(statistics.median(ratio[b]) / statistics.median(ratio[a]) - 1) * 100:+.1f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

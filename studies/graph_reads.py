"""Reading both replays of the timing graph (half the repetitions each) against reading the second only.

    python -m studies.graph_reads [--trials 10] [--reps 6] [--out studies/results/h200-graph-reads.txt]

Why: a GPU trial's timed section captures its repetitions into a CUDA graph and replays it twice,
reading only the second replay (the first uploads the graph and steadies the clock). On the H200
demo's attention that is 12 of the 17 calls of subject and control a trial makes for 6 samples.
`protocol.graph_reads = 2` (per suite or shape) captures half the repetitions and reads both replays: the same samples
for half the device time, if the first replay reads like the second.

Each trial is `python -m benches.trial` in a fresh process, as the bot runs it, at the demo's first
commit (bisector/demo/templates), the H200 demo config's shapes, reps and warm-up, the two modes
alternating so that a drift of the machine falls on both. Printed and written per shape and mode:
the median of the value the search decides on (attention: the subject's full-clock speed; GEMM: the
ratio to cuBLAS), its trial-to-trial CV, the two modes' difference, and the device section and
timed phase per trial. One discarded trial first compiles and brings the clock up. Needs one NVIDIA
GPU with triton; exits 2 with a one-line reason elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bisector import config as bisector_config
from bisector.demo.history import states
from bisector.runner.spec import shape_spec
from bisector.search.samples import cv_pct
from bisector.search.stats import full_clock_time
from studies.kernel_time import no_nvidia_gpu, write_demolib

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "h200-demo.toml"
SHAPES = ("fa/s16384", "gemm/m8192", "gemm/m54560", "gemm/decode")


def trial_spec(source: Path, cfg: Any, reps: int, reads: int, seed: int) -> dict[str, Any]:
    shapes = [s for s in cfg.shapes if s.key in SHAPES]
    return {
        "sha": source.name,
        "suite": "fa,gemm",
        "shapes": [shape_spec(s) for s in shapes],
        "subjects": {
            name: {"entry": sub.entry, "adapter": sub.adapter, "layout": sub.layout, "options": {}}
            for name, sub in cfg.subjects.items()
        },
        "control": cfg.control,
        "device": "cuda",
        "source_dirs": [str(source)],
        "reps": reps,
        "warmup": cfg.protocol.warmup,
        "graph_reads": {s.key: reads for s in shapes},
        "flush_mb": 0,
        "seed": seed,
        "tolerances": {k: list(v) for k, v in cfg.thresholds.tolerances.items()},
    }


def run_trial(spec: dict[str, Any], work: Path, cache: Path) -> dict[str, Any]:
    path, out = work / f"spec-{spec['seed']}.json", work / f"out-{spec['seed']}.json"
    path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "TRITON_CACHE_DIR": str(cache),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "benches.trial", str(path), str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"trial failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(out.read_text())


def spans(output: dict[str, Any], name: str) -> float:
    return sum(end - start for phase, _shape, start, end in output["phases"] if phase == name)


def decided_value(result: dict[str, Any]) -> float:
    """What the H200 demo's search decides on: attention's full-clock speed, GEMM's ratio."""
    if result["shape"].startswith("fa/"):
        return 1.0 / full_clock_time(result["subject_ms"])
    return float(result["ratio"])


def shape_figures(output: dict[str, Any]) -> list[tuple[dict[str, Any], float, float]]:
    """Per shape of one trial: its result, the value decided on and its warm-up + timed seconds;
    a shape that did not measure is an error (a study compares like with like)."""
    out = []
    for result in output["results"]:
        if result.get("status") != "ok":
            raise RuntimeError(f"{result['shape']}: {result.get('status')}: {result.get('error', '')[:300]}")
        out.append(
            (
                result,
                decided_value(result),
                sum(
                    end - start
                    for phase, shape, start, end in output["phases"]
                    if phase in ("warmup", "timed") and shape == result["shape"]
                ),
            )
        )
    return out


def gpu_header(study: str) -> tuple[Any, str] | None:
    """The H200 demo config and the start of a results file's first line (the study, the GPU, torch,
    triton, the date), or None with the reason printed where there is no NVIDIA GPU."""
    why = no_nvidia_gpu(f"studies.{study}")
    if why:
        print(why, file=sys.stderr)
        return None
    import torch
    import triton

    return bisector_config.load(CONFIG), (
        f"# studies.{study} on {torch.cuda.get_device_name(0)}, torch "
        f"{torch.__version__}, triton {triton.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.graph_reads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="fresh trial processes per mode")
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--out", default=str(ROOT / "studies" / "results" / "h200-graph-reads.txt"))
    args = parser.parse_args(argv)
    found = gpu_header("graph_reads")
    if found is None:
        return 2
    cfg, header = found
    lines = [
        f"{header}: {args.trials} fresh trial processes per mode, alternating; reps {args.reps}, "
        f"warm-up {cfg.protocol.warmup}; shapes {', '.join(SHAPES)}"
    ]
    print(lines[0], flush=True)
    values: dict[tuple[int, str], list[float]] = {}
    device: dict[int, list[float]] = {1: [], 2: []}
    timed: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="graph-reads-") as tmp:
        work = Path(tmp)
        source = write_demolib(states()[0], work / "demolib-first")
        cache = work / "triton"
        run_trial(trial_spec(source, cfg, args.reps, 1, 999), work, cache)  # compile, clock up: discarded
        for k in range(args.trials * 2):
            reads = 1 + k % 2
            output = run_trial(trial_spec(source, cfg, args.reps, reads, k), work, cache)
            device[reads].append(spans(output, "device"))
            for result, value, seconds in shape_figures(output):
                key = (reads, result["shape"])
                values.setdefault(key, []).append(value)
                timed.setdefault(key, []).append(seconds)
            print(f"trial {k}: reads {reads}, device {device[reads][-1]:.2f} s", flush=True)
    lines += [
        "",
        "| shape | reads | value (median) | trial CV % | vs reads=1 | warm-up + timed s (median) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for shape in SHAPES:
        base = statistics.median(values[(1, shape)])
        for reads in (1, 2):
            v = values[(reads, shape)]
            lines.append(
                f"| {shape} | {reads} | {statistics.median(v):.5g} | {cv_pct(v):.2f} | "
                f"{(statistics.median(v) / base - 1) * 100:+.2f}% | {statistics.median(timed[(reads, shape)]):.3f} |"
            )
    lines += [
        "",
        "device section per trial (s, median): "
        + ", ".join(f"reads={r}: {statistics.median(d):.2f}" for r, d in device.items()),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

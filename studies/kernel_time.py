"""Kernel time of a short kernel behind a host-heavy dispatch, across fresh processes (issue 26).

    python -m studies.kernel_time [--before 10] [--after 4] [--reps 20] [--out studies/results/h200-kernel-time.txt]

The subject is the demo upstream's decode GEMM (64x7168x2048 bf16): demolib's Triton kernel behind
its small-M Python dispatch (argument checks and a tile search on every call), rendered from
bisector/demo/templates at the commit before and at the commit of the planted kernel step
(`decode_kernel`: a tile that fills the SMs). Every trial is `python -m benches.trial` in a fresh
process, cuBLAS (torch.matmul) the control, as the bot runs it. Printed and written:

- per trial: kernel time (how it was taken: CUDA graph or profiler), latency of back-to-back
  calls, host time per call, for subject and control;
- across the `--before` processes of one commit: the trial-to-trial CV of the subject's kernel time,
  of cuBLAS's, and of their ratio (target <= 2%);
- whether the kernel step is decided (bisector.search.stats.compare, 3% floor) with 1, 2 and 3 trials a
  side, on the kernel-time ratio and on the latency ratio (which should not see it: host-bound).

Trials alternate before / after so that a drift of the machine falls on both; one discarded trial
first brings the GPU clock up (an idle H200 reads 345 MHz). Needs one NVIDIA GPU with triton;
exits 2 with a one-line reason elsewhere. About 10 s a trial: ~2.5 min with the defaults.
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

from bisector.demo.history import COMMITS, states
from bisector.demo.templating import render
from bisector.search.stats import compare

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "bisector" / "demo" / "templates"
SHAPE = {
    "key": "gemm/decode",
    "suite": "gemm",
    "name": "decode",
    "params": {"M": 64, "N": 7168, "K": 2048, "dtype": "bf16"},
}
ROLE = "decode_kernel"
MIN_STEP_PCT = 3.0


def write_demolib(knobs: dict[str, Any], dest: Path) -> Path:
    """demolib's package at one point of the demo history, rendered from the templates."""
    for tmpl in (TEMPLATES / "demolib").glob("*.tmpl"):
        out = dest / "demolib" / tmpl.name.removesuffix(".tmpl")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render(tmpl.read_text(), knobs, tmpl.name))
    return dest


def trial_spec(source: Path, reps: int, seed: int) -> dict[str, Any]:
    return {
        "sha": source.name,
        "suite": "gemm",
        "shapes": [SHAPE],
        "subjects": {
            "gemm": {"entry": "demolib.triton_gemm:matmul", "adapter": "triton", "layout": "bhsd", "options": {}}
        },
        "control": "torch_cuda",
        "device": "cuda",
        "source_dirs": [str(source)],
        "reps": reps,
        "warmup": 3,
        "flush_mb": 0,
        "seed": seed,
        "tolerances": {"gemm": [0.05, 0.02]},
    }


def run_trial(source: Path, work: Path, reps: int, seed: int, cache: Path) -> dict[str, Any]:
    spec, out = work / f"spec-{seed}.json", work / f"out-{seed}.json"
    spec.write_text(json.dumps(trial_spec(source, reps, seed)))
    env = {
        **os.environ,
        "TRITON_CACHE_DIR": str(cache),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "benches.trial", str(spec), str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"trial failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    (result,) = json.loads(out.read_text())["results"]
    if result.get("status") != "ok":
        raise RuntimeError(f"trial {result.get('status')}: {result.get('error', '')[:500]}")
    result["wall_s"] = time.monotonic() - started
    return result


def us(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def cv_pct(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) * 100 if len(values) > 1 else float("nan")


def row(side: str, r: dict[str, Any]) -> str:
    return (
        f"| {side} | {r['kernel_method']} | {us(r['subject_ms']):.2f} | {us(r['subject_latency_ms']):.1f} | "
        f"{us(r['subject_host_ms']):.1f} | {us(r['control_ms']):.2f} | {us(r['control_latency_ms']):.1f} | "
        f"{r['ratio']:.4f} | {r.get('latency_ratio') or float('nan'):.4f} | {r['wall_s']:.1f} |"
    )


def decided(before: list[float], after: list[float]) -> list[str]:
    out = []
    for n in (1, 2, 3):
        if len(before) >= n and len(after) >= n:
            c = compare(before[:n], after[:n], MIN_STEP_PCT, 0.01)
            out.append(
                f"{n} a side: {c.verdict.value} ({c.change_pct:+.1f}%, 95% [{c.ci95[0]:+.1f}, {c.ci95[1]:+.1f}])"
            )
    return out


def no_nvidia_gpu(study: str) -> str:
    """Why `study` cannot run here (a one-line error), or "" where torch, triton and an NVIDIA GPU are."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        return f"error: {study} needs torch and triton: {exc}"
    if not torch.cuda.is_available() or torch.version.hip:
        return f"error: {study} needs an NVIDIA GPU (torch.cuda.is_available() is False or ROCm)"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.kernel_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=int, default=10, help="fresh trial processes at the commit before the step")
    parser.add_argument("--after", type=int, default=4, help="fresh trial processes at the step's commit")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "studies" / "results" / "h200-kernel-time.txt"))
    args = parser.parse_args(argv)
    why = no_nvidia_gpu("studies.kernel_time")
    if why:
        print(why, file=sys.stderr)
        return 2
    import torch
    import triton

    index = next(i for i, c in enumerate(COMMITS) if c.role == ROLE)
    knobs = states()
    lines = [
        f"# studies.kernel_time on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"triton {triton.__version__}, {time.strftime('%Y-%m-%d %H:%M')}",
        f"# subject: demolib decode GEMM {SHAPE['params']} behind its Python dispatch; control cuBLAS; "
        f"reps {args.reps}; before = PR #{COMMITS[index - 1].pr}, after = PR #{COMMITS[index].pr} ({ROLE})",
        "",
    ]

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    for text in lines:
        print(text)
    with tempfile.TemporaryDirectory(prefix="kernel-time-") as tmp:
        work = Path(tmp)
        sources = {
            "before": write_demolib(knobs[index - 1], work / "before"),
            "after": write_demolib(knobs[index], work / "after"),
        }
        caches = {side: work / f"triton-{side}" for side in sources}
        run_trial(sources["before"], work, 3, 999, caches["before"])  # clock up, compile cached: discarded
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        queue = {"before": args.before, "after": args.after}
        say(
            "| side | kernel method | kernel us | latency us | host us | cuBLAS kernel us | cuBLAS latency us | "
            "ratio (kernel) | ratio (latency) | trial s |"
        )
        say("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        seed = 0
        while any(queue.values()):
            for side in ("before", "after"):  # alternate while both sides still need trials
                if queue[side]:
                    queue[side] -= 1
                    seed += 1
                    r = run_trial(sources[side], work, args.reps, seed, caches[side])
                    runs[side].append(r)
                    say(row(side, r))
    before, after = runs["before"], runs["after"]
    say("")
    kernel = [us(r["subject_ms"]) for r in before]
    cublas = [us(r["control_ms"]) for r in before]
    say(
        f"before, {len(before)} fresh processes: subject kernel median {statistics.median(kernel):.2f} us, "
        f"CV {cv_pct(kernel):.2f}%; cuBLAS kernel median {statistics.median(cublas):.2f} us, CV {cv_pct(cublas):.2f}%; "
        f"kernel ratio CV {cv_pct([r['ratio'] for r in before]):.2f}% (target <= 2%)"
    )
    say(
        f"before: subject latency median {statistics.median(us(r['subject_latency_ms']) for r in before):.1f} us, "
        f"host {statistics.median(us(r['subject_host_ms']) for r in before):.1f} us a call; "
        f"host-bound in {sum(us(r['subject_host_ms']) > us(r['subject_ms']) for r in before)} of {len(before)} trials"
    )
    say(
        f"methods: {sorted({r['kernel_method'] for r in before + after})}; fallbacks: "
        f"{sorted({r.get('kernel_fallback', '') for r in before + after} - {''}) or 'none'}"
    )
    if after:
        say(
            f"after, {len(after)} processes: subject kernel median "
            f"{statistics.median(us(r['subject_ms']) for r in after):.2f} us "
            f"({statistics.median(kernel) / statistics.median(us(r['subject_ms']) for r in after):.2f}x faster)"
        )
        say(
            "step on the kernel ratio: " + "; ".join(decided([r["ratio"] for r in before], [r["ratio"] for r in after]))
        )
        lat_b = [r["latency_ratio"] for r in before if r.get("latency_ratio")]
        lat_a = [r["latency_ratio"] for r in after if r.get("latency_ratio")]
        say("step on the latency ratio (host-bound: expected small): " + "; ".join(decided(lat_b, lat_a)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How noisy is the harness? N fresh trial processes per suite, Triton subject, control in process.

    python studies/harness_noise.py --trials 12            # on the H200
    python studies/harness_noise.py --device cpu --trials 3  # tiny shapes, torch subject: logic check
    python studies/harness_noise.py --from-json studies/results/h200-harness-noise.json
                                   # the recorded raw samples again, through today's ratio estimator

Prints per suite: subject and control TFLOP/s, the trial-to-trial CV of the subject's TFLOP/s and
of the subject/control ratio, the cold compile time, and, from as many separate processes, the
process-to-process CV of `triton.testing.do_bench` (median) on the same kernel. Target: ratio CV
<= 0.5%. A benchmark, not a test; it imports nothing from `bisector`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {
    "cuda": {
        "fa": {"B": 2, "H": 32, "S": 16384, "D": 128, "causal": False, "dtype": "bf16"},
        "gemm": {"M": 8192, "N": 8192, "K": 8192, "dtype": "bf16", "layout": "nn"},
    },
    "cpu": {
        "fa": {"B": 1, "H": 2, "S": 256, "D": 64, "causal": False, "dtype": "fp32"},
        "gemm": {"M": 256, "N": 256, "K": 256, "dtype": "fp32", "layout": "nn"},
    },
}
SUBJECTS = {
    "cuda": {
        "fa": ("benches.kernels.triton_fa:attention", "triton"),
        "gemm": ("benches.kernels.triton_matmul:matmul", "triton"),
    },
    "cpu": {
        "fa": ("benches.kernels.torch_ref:attention", "torch"),
        "gemm": ("benches.kernels.torch_ref:matmul", "torch"),
    },
}

# Runs in a child process: do_bench (median) of the subject on the same inputs, in ms.
_DOBENCH = """
import json, sys, statistics, time
sys.path.insert(0, {root!r})
import torch
from benches import backends, suites
suite, params, entry, adapter, device, seed = {args!r}
inputs = suites.get(suite).make_inputs(params, "cpu" if device == "cpu" else "cuda", seed)
run = backends.subject({{"entry": entry, "adapter": adapter}}, device).prepare(suite, inputs).run
if device == "cpu":
    run()
    samples = []
    for _ in range(20):
        t0 = time.perf_counter(); run(); samples.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(samples)
else:
    import triton.testing
    ms = triton.testing.do_bench(run, return_mode="median")
print("DOBENCH_MS", json.dumps(ms))
"""


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) * 100 if len(values) > 1 else float("nan")


def fresh_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_trial(work: Path, i: int, suite: str, args: argparse.Namespace) -> dict[str, Any]:
    entry, adapter = SUBJECTS[args.device][suite]
    spec = {
        "sha": "harness",
        "suite": suite,
        "shapes": [{"key": f"{suite}/noise", "suite": suite, "name": "noise", "params": SHAPES[args.device][suite]}],
        "subject": {"entry": entry, "adapter": adapter, "layout": "bhsd", "options": {}},
        "control": "torch",
        "device": args.device,
        "source_dirs": [],
        "reps": args.reps,
        "warmup": args.warmup,
        "flush_mb": args.flush_mb,
        "seed": i,
        "tolerances": {},
    }
    tdir = work / f"{suite}-{i:02d}"
    tdir.mkdir(parents=True)
    (tdir / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-m", "benches.trial", "spec.json", "out.json"],
        cwd=tdir,
        env=fresh_env(tdir / "triton-cache"),
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    try:
        result = json.loads((tdir / "out.json").read_text())["results"][0]
    except (OSError, ValueError, IndexError, KeyError):
        result = {"status": "crash", "error": (proc.stderr or proc.stdout)[-2000:]}
    return result


def run_dobench(work: Path, i: int, suite: str, args: argparse.Namespace) -> float | None:
    entry, adapter = SUBJECTS[args.device][suite]
    code = _DOBENCH.format(root=str(ROOT), args=(suite, SHAPES[args.device][suite], entry, adapter, args.device, i))
    cache = work / f"dobench-{suite}-{i:02d}"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=fresh_env(cache), capture_output=True, text=True, timeout=args.timeout
    )
    for line in proc.stdout.splitlines():
        if line.startswith("DOBENCH_MS"):
            return float(json.loads(line.split(maxsplit=1)[1]))
    print(f"do_bench process failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
    return None


def summarize(suite: str, results: list[dict[str, Any]], dobench_ms: list[float], flops: float) -> dict[str, Any]:
    ok = [r for r in results if r.get("status") == "ok"]
    bad = [f"{r.get('status')}: {r.get('error', '')[:200]}" for r in results if r.get("status") != "ok"]
    subj = [r["subject_tflops"] for r in ok]
    ratios = [r["ratio"] for r in ok]
    within = [cv(r["ratios"]) for r in ok if len(r.get("ratios", [])) > 1]
    db = [flops / (ms * 1e-3) / 1e12 for ms in dobench_ms]
    return {
        "suite": suite,
        "trials_ok": len(ok),
        "failures": bad,
        "subject_tflops": statistics.median(subj) if subj else None,
        "control_tflops": statistics.median(r["control_tflops"] for r in ok) if ok else None,
        "ratio": statistics.median(ratios) if ratios else None,
        "cv_subject_pct": cv(subj),
        "cv_ratio_pct": cv(ratios),
        "cv_ratio_within_trial_pct": statistics.median(within) if within else None,
        "compile_s": statistics.median(r["compile_s"] for r in ok) if ok else None,
        "dobench_tflops": statistics.median(db) if db else None,
        "cv_dobench_pct": cv(db),
    }


def print_table(rows: list[dict[str, Any]], target: float) -> None:
    def f(v: Any, spec: str = ".1f") -> str:
        return "-" if v is None else format(v, spec)

    head = (
        "suite",
        "ok",
        "subject TF/s",
        "control TF/s",
        "ratio",
        "CV subj %",
        "CV ratio %",
        "CV ratio in-trial %",
        "compile s",
        "do_bench TF/s",
        "CV do_bench %",
        f"ratio CV<={target}%",
    )
    print(" | ".join(head))
    for r in rows:
        met = r["cv_ratio_pct"] == r["cv_ratio_pct"] and r["cv_ratio_pct"] <= target
        print(
            " | ".join(
                (
                    r["suite"],
                    str(r["trials_ok"]),
                    f(r["subject_tflops"], ".4g"),
                    f(r["control_tflops"], ".4g"),
                    f(r["ratio"], ".4f"),
                    f(r["cv_subject_pct"], ".2f"),
                    f(r["cv_ratio_pct"], ".2f"),
                    f(r["cv_ratio_within_trial_pct"], ".2f"),
                    f(r["compile_s"], ".2f"),
                    f(r["dobench_tflops"], ".4g"),
                    f(r["cv_dobench_pct"], ".2f"),
                    "yes" if met else "NO",
                )
            )
        )
        for failure in r["failures"]:
            print(f"  {r['suite']}: {failure}")


def reanalyze(path: Path, target: float) -> int:
    """Summarize recorded GPU trials with the trial's ratio estimator of today (peak_clock_ratio),
    so a change of estimator is judged on the same raw samples."""
    sys.path.insert(0, str(ROOT))
    from benches.timing import peak_clock_ratio

    raw = json.loads(path.read_text())["raw"]
    rows = []
    for suite, data in raw.items():
        trials = [
            {**t, "ratio": peak_clock_ratio(t["subject_ms"], t["control_ms"])} if t.get("status") == "ok" else t
            for t in data["trials"]
        ]
        flops = next((t["flops"] for t in trials if "flops" in t), 0.0)
        rows.append(summarize(suite, trials, data["dobench_ms"], flops))
    print_table(rows, target)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--suite", choices=("fa", "gemm", "both"), default="both")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--flush-mb", type=int, default=0, help="0 = sized from the device")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--target", type=float, default=0.5, help="ratio CV target in percent")
    ap.add_argument("--json", type=Path, help="also write every raw result here")
    ap.add_argument("--from-json", type=Path, help="summarize the raw results of an earlier --json run")
    args = ap.parse_args(argv)
    if args.from_json:
        return reanalyze(args.from_json, args.target)
    if args.device == "cpu" and args.flush_mb == 0:
        args.flush_mb = 8
    suites = ("fa", "gemm") if args.suite == "both" else (args.suite,)
    sys.path.insert(0, str(ROOT))
    from benches.suites import get as get_suite

    rows, raw = [], {}
    with tempfile.TemporaryDirectory(prefix="harness-noise-") as tmp:
        work = Path(tmp)
        for suite in suites:
            results, dobench = [], []
            for i in range(args.trials):
                results.append(run_trial(work, i, suite, args))
                ms = run_dobench(work, i, suite, args)
                if ms is not None:
                    dobench.append(ms)
                print(
                    f"{suite} trial {i + 1}/{args.trials}: {results[-1].get('status')} "
                    f"ratio={results[-1].get('ratio')}",
                    file=sys.stderr,
                    flush=True,
                )
            flops = get_suite(suite).flops(SHAPES[args.device][suite])
            rows.append(summarize(suite, results, dobench, flops))
            raw[suite] = {"trials": results, "dobench_ms": dobench}
    print_table(rows, args.target)
    if args.json:
        args.json.write_text(json.dumps({"summary": rows, "raw": raw}, indent=1))
    return 0 if all(r["trials_ok"] == args.trials for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

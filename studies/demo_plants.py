"""Measure the demo upstream's planted CPU steps: each planted commit against its parent.

    python -m studies.demo_plants [--trials 3] [--reps 10] [--roles ROLE ...] [--json OUT]

Writes the demo repository to a temporary directory, exports each commit with `git archive`,
and times demolib's CPU kernels there in fresh processes (one per trial, one thread, parent and
child alternating), each against the torch reference in the same process, on the shapes of
configs/cpu-demo.toml. Prints, per planted step and shape, the change in the subject/control
ratio next to the expected one, and the trial-to-trial CV of that ratio (the noise a search with
3 trials per commit has to beat).

A development tool, not part of the trial path: like every study, it imports
`bisector` (for the demo history and the config).
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

ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh process: argv[1] is a JSON spec. Prints one JSON line of per-shape results.
WORKER = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
sys.path[:0] = [spec["source"], spec["root"]]
import torch
from benches.suites import get
suite = get(spec["suite"])
if spec["suite"] == "fa":
    from demolib.cpu_fa import flash_attn
    sdpa = torch.nn.functional.scaled_dot_product_attention
    make = lambda x: ((lambda: flash_attn(x["q"], x["k"], x["v"], x["causal"], x["sm_scale"])),
                      (lambda: sdpa(x["q"], x["k"], x["v"], is_causal=x["causal"], scale=x["sm_scale"])))
else:
    from demolib.cpu_gemm import matmul
    make = lambda x: ((lambda: matmul(x["a"], x["b"])), (lambda: torch.matmul(x["a"], x["b"])))
out = {}
for key, params in spec["shapes"].items():
    x = suite.make_inputs(params, "cpu", spec["seed"])
    subject, control = make(x)
    err = (subject().float() - suite.reference(x)).abs().max().item()
    for _ in range(spec["warmup"]):
        subject(); control()
    ratios, sub_ms = [], []
    for _ in range(spec["reps"]):
        t0 = time.perf_counter(); subject(); t1 = time.perf_counter(); control(); t2 = time.perf_counter()
        ratios.append((t2 - t1) / (t1 - t0)); sub_ms.append((t1 - t0) * 1e3)
    ratios.sort(); sub_ms.sort()
    out[key] = {"ratio": ratios[len(ratios) // 2], "ms": sub_ms[len(sub_ms) // 2], "err": err}
print(json.dumps(out))
"""


def run_trial(
    source: Path, suite: str, shapes: dict[str, dict[str, Any]], reps: int, warmup: int, seed: int
) -> dict[str, Any]:
    spec = {
        "source": str(source),
        "root": str(ROOT),
        "suite": suite,
        "shapes": shapes,
        "reps": reps,
        "warmup": warmup,
        "seed": seed,
    }
    from bisector.runner.env import FIXED_MALLOC

    env = {**FIXED_MALLOC, **os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # as the runner
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(spec)], capture_output=True, text=True, env=env, timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"trial at {source.name} failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) * 100 if len(values) > 1 else 0.0


def measure(roles: list[str], trials: int, reps: int, warmup: int) -> list[dict[str, Any]]:
    from bisector.config import load
    from bisector.demo import write_demo_repo
    from bisector.demo.repo import export_commit

    config = load(ROOT / "configs" / "cpu-demo.toml")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        manifest = write_demo_repo(Path(tmp, "repo"))
        for role in roles:
            plant = manifest.plants[role]
            idx = manifest.commits.index(plant.sha)
            parent, child = manifest.commits[idx - 1], plant.sha
            suites = sorted({k.split("/")[0] for k in plant.shapes("cpu")})
            for suite in suites:
                shapes = {s.key: s.as_dict() for s in config.shapes if s.suite == suite}
                before: dict[str, list[float]] = {k: [] for k in shapes}
                after: dict[str, list[float]] = {k: [] for k in shapes}
                ms: dict[str, float] = {}
                for t in range(trials):
                    for sha, into in ((parent, before), (child, after)):
                        res = run_trial(
                            export_commit(Path(manifest.path), sha, Path(tmp)), suite, shapes, reps, warmup, seed=t
                        )
                        for key, r in res.items():
                            into[key].append(r["ratio"])
                            ms[key] = r["ms"]
                for key in shapes:
                    b, a = statistics.median(before[key]), statistics.median(after[key])
                    rows.append(
                        {
                            "role": role,
                            "pr": plant.pr,
                            "shape": key,
                            "expected": plant.moves.get("cpu", {}).get(key, 0.0),
                            "change_pct": (a / b - 1) * 100,
                            "cv_before": cv(before[key]),
                            "cv_after": cv(after[key]),
                            "ms": ms[key],
                        }
                    )
                    print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict[str, Any]) -> str:
    exp = "moves" if r["expected"] is None else f"{r['expected']:+.1f}%"
    return (
        f"| {r['role']} | #{r['pr']} | {r['shape']} | {exp} | {r['change_pct']:+.1f}% | "
        f"{r['cv_before']:.1f}% / {r['cv_after']:.1f}% | {r['ms']:.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument(
        "--roles",
        nargs="*",
        default=["improvement", "fa_remap_dropped", "fastmath_dropped", "gemm_group_m", "gemm_stages", "fa_window"],
    )
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    print("| step | PR | shape | expected | measured | trial CV before / after | subject ms |")
    print("|---|---|---|---|---|---|---|")
    rows = measure(args.roles, args.trials, args.reps, args.warmup)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

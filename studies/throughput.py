"""Trial throughput of the executor: trials per minute, where a trial's time goes, and whether the
numbers stay the same, for worker processes spawned one by one or forked from a zygote.

    python -m studies.throughput [--device cpu|cuda] [--trials 12] [--modes spawn,fork]
                                 [--commits 19,21] [--devices N] [--json OUT.json]

Writes the demo repository to a temporary directory, exports two commits of its history (default:
either side of #127) and, per mode, runs `--trials` trial processes of each through the executor
the bot uses (bisector/runner/launch.py `make_executor`), submitted at once in side-by-side rounds
(A B, B A, ...) as the search's verification submits them. Prints per mode: trials per minute,
the device-busy fraction, the median seconds of every phase of a trial process, and per shape the
median subject/control ratio of each commit with its trial-to-trial CV, and the ratio between the
two commits (the figure a step is made of: two modes that measure the same should agree on it).

A benchmark, not a test; it imports `bisector`. On the GPU it uses configs/h200-demo.toml.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any


def cv_pct(values: list[float]) -> float:
    logs = [math.log(v) for v in values if v > 0]
    return statistics.stdev(logs) * 100 if len(logs) > 1 else float("nan")


def run_mode(mode: str, config: Any, builds: dict[int, Any], trials: int, work: Path) -> dict[str, Any]:
    from bisector.measure.time_spent import Stage, summarize
    from bisector.runner import make_executor
    from bisector.runner.executor import TrialJob

    commits = list(builds)
    jobs = []
    for t in range(trials):
        for i in commits if t % 2 == 0 else commits[::-1]:
            jobs.append((i, TrialJob(builds[i], config.shapes, seed=1000 + t, slot=t, first=(t == 0))))
    started = time.time()
    with make_executor(config, work / mode, source=mode, lock_devices=False) as executor:
        firsts = {}
        futures = []
        for i, job in jobs:  # a commit's other trials wait for its cold first one, as in a run
            job = replace(job, after=None if job.first else firsts.get(i))
            future = executor.submit(job)
            firsts.setdefault(i, future)
            futures.append((i, future))
        outcomes = [(i, f.result()) for i, f in futures]
        timelines = list(executor.timelines)
    ended = time.time()
    summary = summarize(timelines, [Stage(mode, started, ended)], len(config.devices))
    ratios: dict[str, dict[int, list[float]]] = {}
    errors: list[str] = []
    checks = {"trials": len(outcomes), "cuda_touched_before_fork": 0, "own_triton_cache": 0}
    for i, outcome in outcomes:
        for r in outcome.records:
            if r.ratio:
                ratios.setdefault(r.shape, {}).setdefault(i, []).append(r.ratio)
            elif r.error:
                errors.append(f"{r.shape}: {r.error[:200]}")
        proto = outcome.records[0].protocol if outcome.records else {}
        checks["cuda_touched_before_fork"] += bool(proto.get("worker", {}).get("cuda_initialized_before_trial"))
        cache = proto.get("triton_cache_dir")
        checks["own_triton_cache"] += bool(cache and cache == proto.get("jit_env", {}).get("TRITON_CACHE_DIR"))
    return {"mode": mode, "throughput": summary.as_json(), "ratios": ratios, "checks": checks, "errors": errors[:20]}


def report(results: list[dict[str, Any]], commits: list[int]) -> str:
    lines = [
        "| mode | trials | wall s | trials / min | device busy | start+imports s | setup s | queue s | "
        "device s | compile s | timed s | teardown s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        t = res["throughput"]
        m = t["median_s"]
        lines.append(
            f"| {res['mode']} | {t['trials']} | {t['wall_s']:.1f} | {t['trials_per_minute']:.1f} | "
            f"{t['device_busy_fraction']:.0%} | {m.get('start_imports', 0):.2f} | {m.get('setup', 0):.2f} | "
            f"{m.get('queue', 0):.2f} | {m.get('device', 0):.2f} | {m.get('compile', 0):.2f} | "
            f"{m.get('timed', 0):.2f} | {m.get('teardown', 0):.2f} |"
        )
    lines += [
        "",
        "| mode | shape | "
        + " | ".join(f"commit {i}: ratio (CV)" for i in commits)
        + f" | commit {commits[1]} / {commits[0]} |",
        "|---|---|" + "---|" * (len(commits) + 1),
    ]
    for res in results:
        for shape, per in sorted(res["ratios"].items()):
            cells = [f"{statistics.median(per[i]):.4f} ({cv_pct(per[i]):.2f}%)" if per.get(i) else "—" for i in commits]
            step = (
                f"{statistics.median(per[commits[1]]) / statistics.median(per[commits[0]]):.4f}"
                if per.get(commits[0]) and per.get(commits[1])
                else "—"
            )
            lines.append(f"| {res['mode']} | {shape} | " + " | ".join(cells) + f" | {step} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--trials", type=int, default=12, help="trial processes of each commit, per mode")
    ap.add_argument("--modes", default="spawn,fork")
    ap.add_argument("--commits", default="19,21", help="two demo history indices (default: either side of #127)")
    ap.add_argument("--devices", type=int, default=0, help="use the first N devices of the config (0: all)")
    ap.add_argument("--json", default=None, help="write every figure here too")
    args = ap.parse_args(argv)
    from bisector.demo import write_demo_repo
    from bisector.demo.demo_config import demo_config
    from bisector.demo.repo import export_commit
    from bisector.model import BuildResult, BuildStatus

    commits = [int(c) for c in args.commits.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        manifest = write_demo_repo(Path(tmp, "upstream"))
        config = demo_config(args.device, Path(manifest.path))
        if args.devices:
            config = replace(config, devices=config.devices[: args.devices])
        builds = {
            i: BuildResult(
                manifest.commits[i],
                BuildStatus.OK,
                str(export_commit(Path(manifest.path), manifest.commits[i], Path(tmp))),
            )
            for i in commits
        }
        for mode in [m for m in args.modes.split(",") if m]:
            print(f"{mode}: {args.trials} trials of each of {len(commits)} commits ...", file=sys.stderr, flush=True)
            results.append(run_mode(mode, config, builds, args.trials, Path(tmp, "work")))
    text = report(results, commits)
    print(text)
    for res in results:
        print(f"{res['mode']}: checks {res['checks']}" + (f"; errors: {res['errors']}" if res["errors"] else ""))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": args.device, "commits": commits, "results": results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

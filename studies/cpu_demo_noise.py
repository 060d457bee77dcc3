"""Trial-to-trial noise of the CPU demo: glibc's malloc thresholds fixed (as the runner sets them for
CPU trials) against glibc's default, moving threshold; or a trial's CPU time against wall time as
its clock; optionally with other processes loading the machine.

    python -m studies.cpu_demo_noise [--trials 12] [--commits 19,21] [--compare malloc|clock]
        [--load 2 [--load-kind spin]]

Writes the demo repository to a temporary directory and, per mode, runs `--trials` trial processes
of each commit (index in the demo history) through the executor `bisector demo` uses, two at a
time on two cores, commits alternating between the cores. `--load N` keeps N single-threaded
processes multiplying 1024x1024 matrices meanwhile (a busy CI machine), or, with `--load-kind spin`,
N empty loops (the busy loops beside the fresh-clone CI runs of studies/results/cpu-slow-builds.txt).
Prints per shape and commit
the median subject/control ratio and the trial-to-trial CV of that ratio, and the relative change
between the two commits (the step a search would see) with its trial-to-trial spread.
A benchmark, not a test; it imports `bisector`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

LOAD = (
    "import torch\ntorch.set_num_threads(1)\na = torch.randn(1024, 1024)\n"
    "while True:\n    a = torch.mm(a, a).div_(1024.0)\n"
)
SPIN = "while True:\n    pass\n"


def run_mode(
    fixed: bool, builds: dict[int, Any], config: Any, trials: int, work: Path
) -> dict[int, dict[str, list[float]]]:
    """Ratios per commit and shape from `trials` trial processes of each commit."""
    import bisector.runner.env as runner_env
    from bisector.runner import make_executor
    from bisector.runner.executor import TrialJob

    saved = runner_env.FIXED_MALLOC
    runner_env.FIXED_MALLOC = saved if fixed else {}  # read when the executor makes its workers' env
    commits = list(builds)
    jobs = [
        (i, TrialJob(builds[i], config.shapes, seed=t, slot=t, lane=k))
        for k, (i, t) in enumerate((i, t) for t in range(trials) for i in (commits if t % 2 == 0 else commits[::-1]))
    ]
    out: dict[int, dict[str, list[float]]] = {i: {} for i in commits}
    try:
        with make_executor(config, work / ("fixed" if fixed else "default"), lock_devices=False) as executor:
            outcomes = executor.run([job for _, job in jobs])
    finally:
        runner_env.FIXED_MALLOC = saved
    for (i, _), outcome in zip(jobs, outcomes):
        for r in outcome.records:
            if r.ratio:
                out[i].setdefault(r.shape, []).append(r.ratio)
    return out


def cv(values: list[float]) -> float:
    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) * 100 if len(logs) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--commits", default="19,21", help="demo history indices (default: either side of #127)")
    ap.add_argument("--compare", choices=("malloc", "clock"), default="malloc")
    ap.add_argument("--load", type=int, default=0, help="busy processes running meanwhile")
    ap.add_argument("--load-kind", choices=("matmul", "spin"), default="matmul")
    args = ap.parse_args(argv)
    commits = [int(c) for c in args.commits.split(",")]
    print(
        f"| {args.compare} | shape | "
        + " | ".join(f"commit {i}: ratio (CV)" for i in commits)
        + " | change (CV of the trial pairs) |"
    )
    print("|---|---|" + "---|" * (len(commits) + 1))
    from bisector.demo import write_demo_repo
    from bisector.demo.demo_config import demo_config
    from bisector.demo.repo import export_commit
    from bisector.model import BuildResult, BuildStatus

    with tempfile.TemporaryDirectory(prefix="cpu-demo-noise-") as tmp:
        manifest = write_demo_repo(Path(tmp, "upstream"))
        config = demo_config("cpu", Path(manifest.path))
        builds = {
            i: BuildResult(
                manifest.commits[i],
                BuildStatus.OK,
                str(export_commit(Path(manifest.path), manifest.commits[i], Path(tmp))),
            )
            for i in commits
        }
        modes = (
            {"fixed": (True, config), "default": (False, config)}
            if args.compare == "malloc"
            else {
                clock: (
                    True,
                    dataclasses.replace(config, protocol=dataclasses.replace(config.protocol, cpu_clock=clock)),
                )
                for clock in ("cpu", "wall")
            }
        )
        load = [
            subprocess.Popen([sys.executable, "-c", SPIN if args.load_kind == "spin" else LOAD])
            for _ in range(args.load)
        ]
        try:
            for name, (fixed, cfg) in modes.items():
                result = run_mode(fixed, builds, cfg, args.trials, Path(tmp, "work", name))
                for shape in sorted(result[commits[0]]):
                    cells = [
                        f"{statistics.median(result[i][shape]):.3f} ({cv(result[i][shape]):.1f}%)" for i in commits
                    ]
                    first, last = result[commits[0]][shape], result[commits[-1]][shape]
                    pairs = [b / a for a, b in zip(first, last)]
                    cells.append(f"{100 * (statistics.median(pairs) - 1):+.1f}% ({cv(pairs):.1f}%)")
                    print(f"| {name} | {shape} | " + " | ".join(cells) + " |", flush=True)
        finally:
            for p in load:
                p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

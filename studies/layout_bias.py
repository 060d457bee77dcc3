"""Measurement bias from memory layout: does one layout factor move a CPU demo build's tall-GEMM ratio
for all the trials that share it (a per-build-per-run bias the statistics cannot see)?

    python -m studies.layout_bias [--commits 13,14] [--trials 3] [--factors repeat,env,spacer,path,offset,runner]
                                  [--settings 6] [--shapes gemm/tall] [--shuffle SEED] [--raw F]
    python -m studies.layout_bias --sweep ROUNDS [--commits 14]

Trials are made as the runner makes them (studies/cpu_slow_builds: the runner's trial spec and worker
environment, forked from a zygote that imported benches.trial, two at a time, one per core). Every
setting of a factor is one zygote, as one CI run is: `--trials` trials of each commit forked from it.
Factors, one varied per group, the others left as they are:
  repeat  nothing varied: the zygote-to-zygote spread that remains (ASLR, the machine)
  env     an environment variable of 0..4095 bytes in the zygote's environment (a CI run's paths)
  spacer  none, or a heap block of 128 KiB + 0..4095 bytes allocated in the trial process before its
          imports (the sizes of what a build and a run import before the inputs are made)
  path    the exported commit's directory name padded by 0..N characters (the checkout's path)
  offset  a heap block of 1 MiB + 0..4095 bytes allocated right before the inputs are made: the
          inputs' page offsets set directly (how much the offset itself moves the ratio)
  runner  nothing varied, but each setting one executor of bisector/runner (its zygote, sandbox and
          worker environment, as `bisector demo` runs trials)
With `--sweep ROUNDS`, instead: one process, A copied to every 64-byte offset of a page in turn (the
direct measurement of part 1 of studies/results/cpu-slow-builds.txt, at the present kernel sizes).
Per factor and commit: each setting's median ratio (control/subject), its range over its trials and
A's page offset; then the spread of the setting medians against the spread within settings, split
as a one-way random-effects model (the SD a setting shared by all its trials adds, beside the SD
within a setting) with its ANOVA p. Last, whether the trials of one setting shared their inputs'
page offsets (`input_page_offsets` of each result), and whether A's offset, where the same offset
came up in different settings, reads the same there. A study, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from studies.cpu_slow_builds import forked, trial_job

FACTORS = ("repeat", "env", "spacer", "path", "offset", "runner")
INPUT_SPACER = "LAYOUT_STUDY_INPUT_SPACER"


def zygote() -> int:
    """studies.cpu_slow_builds' zygote, with the trial's input staging preceded by a heap block of
    $LAYOUT_STUDY_INPUT_SPACER bytes when a job's environment names one (the `offset` factor)."""
    from benches import trial
    from studies import cpu_slow_builds

    stage, kept = trial.stage_shape, []

    def spaced_stage(*args: Any, **kwargs: Any) -> Any:
        size = int(os.environ.get(INPUT_SPACER, "0"))
        if size:
            kept.append(bytearray(size))
        return stage(*args, **kwargs)

    trial.stage_shape = spaced_stage
    return cpu_slow_builds.zygote()


def setting_values(factor: str, n: int) -> list[int]:
    """`n` values of the factor: bytes (env, spacer) spread over one page, characters (path), or indices."""
    if factor == "path":
        return [k * 13 for k in range(n)]
    if factor in ("repeat", "runner"):
        return list(range(n))
    if factor == "offset":  # 1 MiB (from the heap's top) plus offsets spread over one page
        return [(1 << 20) + k * 4096 // n for k in range(n)]
    if factor == "spacer":  # from the heap's top (a small block may fill a hole): over 128 KiB, page offsets apart
        return [0] + [(128 << 10) + k * 4096 // n + k * 16 for k in range(1, n)]
    return [k * 4096 // n + (k * 64 // n) for k in range(n)]  # not all multiples of 64: offsets mod 64 move too


def run_setting(
    factor: str,
    value: int,
    args: argparse.Namespace,
    config: Any,
    manifest: Any,
    tmp: Path,
    env: dict[str, str],
    commits: list[int],
) -> list[dict[str, Any]]:
    """One zygote (one 'run') with the factor at `value`: `--trials` trials per commit; their results."""
    base = Path(tmp, f"{factor}-{value}")
    exports = Path(base, "x" * value) if factor == "path" else base
    zenv = dict(env, LAYOUT_STUDY_PAD="p" * value) if factor == "env" else env
    jobs = []
    for t in range(args.trials):
        for i in commits if t % 2 == 0 else commits[::-1]:
            job = trial_job(
                config,
                manifest,
                exports,
                Path(base, "trials", f"{i:02d}-{t}"),
                i,
                t,
                len(jobs),
                spacer=value if factor == "spacer" else 0,
            )
            if factor == "offset":
                job["env"][INPUT_SPACER] = str(value)
            jobs.append(job)
    forked(jobs, zenv, "studies.layout_bias")
    rows = []
    for job in jobs:
        out = json.loads(Path(job["out"]).read_text()) if Path(job["out"]).exists() else {"results": []}
        for r in out["results"]:
            if r.get("status") == "ok" and r.get("ratio") is not None:
                rows.append(
                    {
                        "factor": factor,
                        "value": value,
                        "commit": job["commit"],
                        "trial": job["trial"],
                        "shape": r["shape"],
                        "ratio": r["ratio"],
                        "subject_ms": statistics.median(r["subject_ms"]),
                        "offsets": r.get("input_page_offsets", {}),
                    }
                )
    return rows


def run_executor(
    value: int, args: argparse.Namespace, config: Any, manifest: Any, tmp: Path, commits: list[int]
) -> list[dict[str, Any]]:
    """The `runner` factor: one executor of bisector/runner (its own zygote, sandbox and environment, as
    `bisector demo` makes them) per setting, nothing else varied: `--trials` trials per commit."""
    from bisector.demo.repo import export_commit
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner import make_executor
    from bisector.runner.executor import TrialJob

    builds = {
        i: BuildResult(
            manifest.commits[i], BuildStatus.OK, str(export_commit(Path(manifest.path), manifest.commits[i], tmp))
        )
        for i in commits
    }
    order = [(i, t) for t in range(args.trials) for i in (commits if t % 2 == 0 else commits[::-1])]
    jobs = [TrialJob(builds[i], config.shapes, seed=t, slot=t, lane=k) for k, (i, t) in enumerate(order)]
    with make_executor(config, Path(tmp, f"runner-{value}"), lock_devices=False) as executor:
        outcomes = executor.run(jobs)
    return [
        {
            "factor": "runner",
            "value": value,
            "commit": i,
            "trial": t,
            "shape": r.shape,
            "ratio": r.ratio,
            "subject_ms": statistics.median(r.subject_ms),
            "offsets": r.protocol.get("input_page_offsets", {}),
        }
        for (i, t), outcome in zip(order, outcomes)
        for r in outcome.records
        if r.ratio
    ]


def sweep(config: Any, manifest: Any, tmp: Path, commit: int, rounds: int, step: int) -> str:
    """In one process pinned to one core (one thread, the trial's clock and cache flush): the tall
    GEMM's input A placed at every `step` bytes of a page, offsets shuffled anew each round, subject
    and control timed `reps` interleaved calls each; the ratio per offset, as part 1 of
    studies/results/cpu-slow-builds.txt measured it at the kernel sizes of that time."""
    import importlib

    import torch

    from benches import suites
    from benches.timing import Clock
    from bisector.demo.repo import export_commit

    shape = next(s for s in config.shapes if s.key == "gemm/tall")
    sys.path.insert(0, str(export_commit(Path(manifest.path), manifest.commits[commit], tmp)))
    kernel = importlib.import_module("demolib.cpu_gemm")
    os.sched_setaffinity(0, {0})
    torch.set_num_threads(1)
    inputs = suites.get("gemm").make_inputs(dict(shape.params), "cpu", 0)
    a, b = inputs["a"], inputs["b"]
    buffer = torch.empty(a.numel() + 8192 // a.element_size(), dtype=a.dtype)
    base = (-buffer.data_ptr()) % 4096 // a.element_size()  # the buffer's first page-aligned element
    clock = Clock("cpu", config.protocol.flush_mb << 20)
    ratios: dict[int, list[float]] = {}
    for r in range(rounds):
        offsets = list(range(0, 4096, step))
        random.Random(r).shuffle(offsets)
        for off in offsets:
            start = base + off // a.element_size()
            placed = buffer[start : start + a.numel()].view_as(a).copy_(a)
            times = clock.kernel(
                [lambda: kernel.matmul(placed, b), lambda: torch.matmul(placed, b)],  # noqa: B023 - run now
                config.protocol.reps,
                1,
            ).times
            ratios.setdefault(placed.data_ptr() % 4096, []).append(
                statistics.median(times[1]) / statistics.median(times[0])
            )
    meds = {off: statistics.median(v) for off, v in sorted(ratios.items())}
    sd_within, sd_offset, p = components(list(ratios.values()))
    worst, best = min(meds, key=meds.get), max(meds, key=meds.get)
    lines = [
        f"# In one process, commit {commit}, gemm/tall, A at {len(meds)} offsets of a page x {rounds} rounds "
        f"({config.protocol.reps} interleaved calls each): median ratio per offset",
        "#   " + " ".join(f"{off}:{m:.3f}" for off, m in meds.items()),
        f"#   lowest {meds[worst]:.3f} at {worst}, highest {meds[best]:.3f} at {best} "
        f"(span {(meds[best] - meds[worst]) / statistics.median(meds.values()):.1%}); SD within an offset "
        f"{sd_within:.1%}, SD of the offset's own part {sd_offset:.1%}; ANOVA p = {p:.2g}",
    ]
    return "\n".join(lines) + "\n"


def components(groups: list[list[float]]) -> tuple[float, float, float]:
    """One-way random-effects split of log ratios: (SD within a setting, SD of the settings' own
    systematic part, ANOVA p). The second is what a setting shared by all its trials adds."""
    from scipy.stats import f_oneway

    usable = [[math.log(x) for x in g] for g in groups if len(g) > 1]
    if len(usable) < 2:
        return float("nan"), float("nan"), float("nan")
    n = statistics.mean(len(g) for g in usable)
    msw = statistics.mean(statistics.variance(g) for g in usable)
    msb = n * statistics.variance([statistics.mean(g) for g in usable])
    return math.sqrt(msw), math.sqrt(max(0.0, (msb - msw) / n)), float(f_oneway(*usable).pvalue)


def summarize(rows: list[dict[str, Any]], factor: str, commit: int, shape: str) -> str:
    """One line per setting, then the between/within comparison, as text."""
    mine = [r for r in rows if r["factor"] == factor and r["commit"] == commit and r["shape"] == shape]
    groups: dict[int, list[float]] = {}
    for r in mine:
        groups.setdefault(r["value"], []).append(r["ratio"])
    if not groups:
        return f"#   {factor}, commit {commit}, {shape}: no results\n"
    lines = [f"#   {factor}, commit {commit}, {shape}: setting: median ratio [min-max] (n); input A's address mod 4096"]
    medians = []
    for value, ratios in sorted(groups.items()):
        medians.append(statistics.median(ratios))
        offsets = sorted({r["offsets"].get("a", -1) for r in mine if r["value"] == value})
        lines.append(
            f"#     {value:>7}: {medians[-1]:.3f} [{min(ratios):.3f}-{max(ratios):.3f}] ({len(ratios)}); "
            f"A at {','.join(map(str, offsets))}"
        )
    within = statistics.median((max(v) - min(v)) / statistics.median(v) for v in groups.values())
    sd_within, sd_setting, p = components(list(groups.values()))
    lines.append(
        f"#     setting medians span {(max(medians) - min(medians)) / statistics.median(medians):.1%}; "
        f"range within a setting {within:.1%} (median); SD within {sd_within:.1%}, SD of the setting's "
        f"own part {sd_setting:.1%}; ANOVA p = {p:.2g}"
    )
    return "\n".join(lines) + "\n"


def shared_layout(rows: list[dict[str, Any]]) -> str:
    """Whether every trial of a setting (one zygote, every commit) got the same input offsets, and
    whether A's offset, where it recurs in different settings, moves the ratio (commit effect removed)."""
    placed: dict[tuple[str, int], set[tuple[tuple[str, int], ...]]] = {}
    for r in rows:
        placed.setdefault((r["factor"], r["value"]), set()).add(tuple(sorted(r["offsets"].items())))
    one = sum(1 for v in placed.values() if len(v) == 1)
    distinct = len({v for vs in placed.values() for v in vs})
    lines = [
        f"# Input page offsets: one placement for every trial and commit of a setting in {one} of "
        f"{len(placed)} settings; {distinct} distinct placements over all settings"
    ]
    level = {}
    for c in {(r["commit"], r["shape"]) for r in rows}:
        level[c] = statistics.mean(math.log(r["ratio"]) for r in rows if (r["commit"], r["shape"]) == c)
    by_offset: dict[int, list[float]] = {}
    zygotes: dict[int, set[tuple[str, int]]] = {}
    for r in rows:
        a = r["offsets"].get("a", -1)
        by_offset.setdefault(a, []).append(math.exp(math.log(r["ratio"]) - level[r["commit"], r["shape"]]))
        zygotes.setdefault(a, set()).add((r["factor"], r["value"]))
    recurring = {a: v for a, v in by_offset.items() if len(zygotes[a]) > 1}
    if len(recurring) > 1:
        sd_within, sd_offset, p = components(list(recurring.values()))
        lines.append(
            f"# Pooled by A's page offset ({len(recurring)} offsets seen in 2+ settings; ratio / the "
            f"commit's mean): "
            + ", ".join(f"{a}: {statistics.mean(v):.3f} ({len(v)})" for a, v in sorted(recurring.items()))
        )
        lines.append(
            f"#   SD within an offset {sd_within:.1%}, SD of the offset's own part {sd_offset:.1%}; ANOVA p = {p:.2g}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", default="13,14", help="demo history indices (13: #124, 14: #125)")
    ap.add_argument("--trials", type=int, default=3, help="trials per commit and setting")
    ap.add_argument("--factors", default=",".join(FACTORS))
    ap.add_argument("--settings", type=int, default=6, help="settings per factor")
    ap.add_argument("--shapes", default="gemm/tall")
    ap.add_argument("--shuffle", type=int, help="run each factor's settings in an order shuffled with this seed")
    ap.add_argument("--raw", help="write every trial's ratio to this JSON file")
    ap.add_argument(
        "--sweep",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: A at every 64 bytes of a page in one process, ROUNDS rounds (first commit)",
    )
    ap.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.zygote:
        return zygote()
    factors = [f for f in args.factors.split(",") if f]
    if any(f not in FACTORS for f in factors):
        print(f"error: --factors: unknown factor in {args.factors!r} (known: {', '.join(FACTORS)})", file=sys.stderr)
        return 2

    from bisector.demo import write_demo_repo
    from bisector.demo.demo_config import demo_config
    from bisector.runner.launch import worker_env

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="layout-bias-") as tmp:
        manifest = write_demo_repo(Path(tmp, "upstream"))
        config = demo_config("cpu", Path(manifest.path))
        keep = args.shapes.split(",")
        config = dataclasses.replace(config, shapes=tuple(s for s in config.shapes if s.key in keep))
        commits = [int(c) for c in args.commits.split(",")]
        env = worker_env(config, os.environ, Path(tmp, "work"))
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        if args.sweep:
            print(sweep(config, manifest, Path(tmp), commits[0], args.sweep, 64), end="")
            return 0
        rows: list[dict[str, Any]] = []
        for factor in factors:
            values = setting_values(factor, args.settings)
            if args.shuffle is not None:  # so that a setting's reading is not the machine's load at its time
                random.Random(args.shuffle).shuffle(values)
            for value in values:
                if factor == "runner":
                    rows += run_executor(value, args, config, manifest, Path(tmp), commits)
                else:
                    rows += run_setting(factor, value, args, config, manifest, Path(tmp), env, commits)
    if args.raw:
        Path(args.raw).write_text(json.dumps(rows, indent=1))
    print(
        f"# {len(rows)} trial results in {time.monotonic() - started:.0f} s, load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    for factor in factors:
        for commit in commits:
            for shape in keep:
                print(summarize(rows, factor, commit, shape), end="")
    print(shared_layout(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why some CPU demo builds read the tall GEMM ~4x slower over all their trials: trials as the runner
makes them (forked from a zygote that imported torch, or spawned), each with its page faults.

    python -m studies.cpu_slow_builds [--source fork|spawn] [--trials 2] [--commits all|0,16,...]
                                      [--shapes fa/s1024,gemm/tall] [--load N] [--env K=V,...]

Writes the demo repository to a temporary directory, exports the commits, and runs `--trials` trial
processes per commit through `benches.trial.run` with the trial spec and worker environment the
runner builds (bisector/runner: malloc thresholds, one thread), two at a time, one per core. Each
process's resource usage comes back from wait4: minor page faults, CPU time, context switches.
Prints per commit and shape the median subject time and the faults per trial, and flags commits
whose median subject time is over 1.8x that of the commits with the same kernel (same plants).
A study, not a test; it imports `bisector`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOAD = (
    "import torch\ntorch.set_num_threads(1)\na = torch.randn(1024, 1024)\n"
    "while True:\n    a = torch.mm(a, a).div_(1024.0)\n"
)


def zygote() -> int:
    """Import what a worker imports, then fork one child per job line on stdin (cpu, spec, out, env);
    answer each with its wait4 rusage. Jobs run as they come; the parent limits how many at once."""
    import benches.trial  # noqa: F401 - the preload of bisector/runner/launch.default_preload

    running: dict[int, dict[str, Any]] = {}
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.environ.update(job["env"])
            os.sched_setaffinity(0, {job["cpu"]})
            from benches import trial

            spacer = bytearray(job.get("spacer", 0))  # noqa: F841 - kept: moves the heap the trial starts on
            trial.run(json.loads(Path(job["spec"]).read_text()), Path(job["out"]))
            os._exit(0)
        running[pid] = job
        if len(running) >= 2:
            _answer(running)
    while running:
        _answer(running)
    return 0


def _answer(running: dict[int, dict[str, Any]]) -> None:
    pid, status, ru = os.wait4(-1, 0)
    job = running.pop(pid)
    print(json.dumps({"id": job["id"], "code": os.waitstatus_to_exitcode(status), **usage(ru)}), flush=True)


def usage(ru: resource.struct_rusage) -> dict[str, float]:
    return {
        "minflt": ru.ru_minflt,
        "majflt": ru.ru_majflt,
        "utime": ru.ru_utime,
        "stime": ru.ru_stime,
        "nvcsw": ru.ru_nvcsw,
        "nivcsw": ru.ru_nivcsw,
    }


def trial_job(
    config: Any, manifest: Any, exports: Path, tdir: Path, commit: int, trial: int, job_id: int, **extra: Any
) -> dict[str, Any]:
    """One trial of demo commit `commit` (exported under `exports`), its spec written in `tdir`, as the
    runner builds it (seed = trial index); `extra` rides along in the job (e.g. a zygote's `spacer`)."""
    from bisector.demo.repo import export_commit
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner.spec import build_spec

    sha = manifest.commits[commit]
    build = BuildResult(sha, BuildStatus.OK, str(export_commit(Path(manifest.path), sha, exports)))
    tdir.mkdir(parents=True)
    (tdir / "spec.json").write_text(json.dumps(build_spec(config, build, None, seed=trial, shapes=config.shapes)))
    return {
        "id": job_id,
        "commit": commit,
        "trial": trial,
        "cpu": job_id % 2,
        "spec": str(tdir / "spec.json"),
        "out": str(tdir / "out.json"),
        "env": {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""},
        **extra,
    }


def forked(
    jobs: list[dict[str, Any]], env: dict[str, str], module: str = "studies.cpu_slow_builds"
) -> list[dict[str, Any]]:
    """The jobs' trials forked from one zygote (`module --zygote`) started with `env`, two at a time;
    their wait4 answers."""
    z = subprocess.run(
        [sys.executable, "-m", module, "--zygote"],
        env=env,
        text=True,
        input="".join(json.dumps(j) + "\n" for j in jobs),
        capture_output=True,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    if z.returncode:
        raise RuntimeError(z.stderr[-3000:])
    return [json.loads(line) for line in z.stdout.splitlines() if line.startswith("{")]


def spawned(jobs: list[dict[str, Any]], env: dict[str, str]) -> list[dict[str, Any]]:
    """Each job a fresh `python -m benches.trial` (pinned with taskset), two at a time."""
    out, running = [], {}
    for job in jobs:
        proc = subprocess.Popen(
            ["taskset", "-c", str(job["cpu"]), sys.executable, "-m", "benches.trial", job["spec"], job["out"]],
            env={**env, **job["env"]},
        )
        running[proc.pid] = job
        if len(running) >= 2:
            pid, status, ru = os.wait4(-1, 0)
            out.append({"id": running.pop(pid)["id"], "code": os.waitstatus_to_exitcode(status), **usage(ru)})
    for pid in list(running):
        _, status, ru = os.wait4(pid, 0)
        out.append({"id": running.pop(pid)["id"], "code": os.waitstatus_to_exitcode(status), **usage(ru)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--source", choices=("fork", "spawn"), default="fork")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--commits", default="all", help="demo history indices, or all")
    ap.add_argument("--shapes", default="fa/s1024,gemm/tall", help="the e2e test's shapes by default")
    ap.add_argument("--load", type=int, default=0, help="busy processes running meanwhile")
    ap.add_argument("--env", default="", help="extra worker environment, K=V,K=V (e.g. a malloc setting)")
    ap.add_argument("--unset", default="", help="worker environment variables to drop, comma-separated")
    ap.add_argument("--raw", help="write every trial's figures to this JSON file")
    args = ap.parse_args(argv)
    if args.zygote:
        return zygote()

    import dataclasses

    from bisector.demo import write_demo_repo
    from bisector.demo.demo_config import demo_config
    from bisector.runner.launch import worker_env

    with tempfile.TemporaryDirectory(prefix="cpu-slow-builds-") as tmp:
        manifest = write_demo_repo(Path(tmp, "upstream"))
        config = demo_config("cpu", Path(manifest.path))
        keep = args.shapes.split(",")
        config = dataclasses.replace(config, shapes=tuple(s for s in config.shapes if s.key in keep))
        commits = (
            list(range(len(manifest.commits))) if args.commits == "all" else [int(c) for c in args.commits.split(",")]
        )
        env = worker_env(config, os.environ, Path(tmp, "work"))
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
        env.update(dict(kv.split("=", 1) for kv in args.env.split(",") if kv))
        for name in (n for n in args.unset.split(",") if n):
            env.pop(name, None)
        jobs = []
        for t in range(args.trials):
            for i in commits if t % 2 == 0 else commits[::-1]:
                jobs.append(
                    trial_job(config, manifest, Path(tmp), Path(tmp, "trials", f"{i:02d}-{t}"), i, t, len(jobs))
                )
        load = [subprocess.Popen([sys.executable, "-c", LOAD]) for _ in range(args.load)]
        started = time.monotonic()
        try:
            if args.source == "fork":
                try:
                    answers = forked(jobs, env)
                except RuntimeError as exc:
                    print(exc, file=sys.stderr)
                    return 1
            else:
                answers = spawned(jobs, env)
        finally:
            for p in load:
                p.kill()
        wall = time.monotonic() - started
        rows = report(jobs, answers, manifest, commits)
        if args.raw:
            Path(args.raw).write_text(json.dumps(rows, indent=1))
    print(f"# {len(jobs)} trials ({args.source}) in {wall:.0f} s, load average {os.getloadavg()[0]:.1f} at the end")
    return 0


def report(
    jobs: list[dict[str, Any]], answers: list[dict[str, Any]], manifest: Any, commits: list[int]
) -> list[dict[str, Any]]:
    """Per trial: each shape's median subject and control ms, the process's faults and CPU time; then
    per commit the medians, flagged where the subject is far slower than its same-kernel siblings."""
    by_id = {a["id"]: a for a in answers}
    rows = []
    for job in jobs:
        out = json.loads(Path(job["out"]).read_text()) if Path(job["out"]).exists() else {"results": []}
        for r in out["results"]:
            if r.get("status") != "ok":
                continue
            rows.append(
                {
                    "commit": job["commit"],
                    "trial": job["trial"],
                    "cpu": job["cpu"],
                    "shape": r["shape"],
                    "subject_ms": statistics.median(r["subject_ms"]),
                    "control_ms": statistics.median(r["control_ms"]),
                    "ratio": r["ratio"],
                    "call_faults": (r.get("timed_faults") or [None])[0],
                    **by_id.get(job["id"], {}),
                }
            )
    plants = [manifest.commits.index(p.sha) for p in manifest.steps("cpu")]

    def kernel_of(i: int, shape: str) -> int:  # commits between two plants moving `shape` run the same kernel
        moved = [k for k, p in zip(plants, manifest.steps("cpu")) if shape in p.moves["cpu"]]
        return sum(1 for k in moved if k <= i)

    shapes = sorted({r["shape"] for r in rows})
    print(
        "| commit | "
        + " | ".join(f"{s}: subject ms (ratio; faults per timed call)" for s in shapes)
        + " | minor faults / trial | CPU s / trial |"
    )
    print("|---|" + "---|" * (len(shapes) + 2))
    med: dict[tuple[int, str], float] = {}
    for i in commits:
        mine = [r for r in rows if r["commit"] == i]
        for s in shapes:
            v = [r["subject_ms"] for r in mine if r["shape"] == s]
            if v:
                med[i, s] = statistics.median(v)
    for i in commits:
        mine = [r for r in rows if r["commit"] == i]
        cells, flag = [], ""
        for s in shapes:
            if (i, s) not in med:
                cells.append("-")
                continue
            siblings = [med[j, s] for j in commits if (j, s) in med and kernel_of(j, s) == kernel_of(i, s)]
            slow = med[i, s] > 1.8 * statistics.median(siblings)
            flag += f" SLOW {s}" if slow else ""
            faults = [r["call_faults"] for r in mine if r["shape"] == s and r["call_faults"] is not None]
            cells.append(
                f"{med[i, s]:.1f} ({statistics.median(r['ratio'] for r in mine if r['shape'] == s):.3f}; "
                f"{statistics.median(faults) if faults else float('nan'):.0f} faults/call)"
            )
        per_trial = {r["trial"]: r for r in mine}.values()
        faults = statistics.median(r.get("minflt", 0) for r in per_trial) if per_trial else 0
        cpu_s = statistics.median(r.get("utime", 0) + r.get("stime", 0) for r in per_trial) if per_trial else 0
        print(f"| {i}{flag} | " + " | ".join(cells) + f" | {faults:.0f} | {cpu_s:.1f} |")
    return rows


if __name__ == "__main__":
    sys.exit(main())

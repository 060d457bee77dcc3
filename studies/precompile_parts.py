"""Where a later trial's precompile goes, on the demo's tip: real trial processes, profiled.

    python -m studies.precompile_parts [--trials 4] [--top 25] [--parallel 6]
    python -m studies.precompile_parts --executor [--trials 4] [--top 25]
    python -m studies.precompile_parts --sdpa

A later trial of the H200 demo spent 1.1-1.25 s in the precompile of fa/s16384 with its commit's
JIT cache warm (reports/2026-12-04g-h200-demo), and a trial set up late keeps the device idle for
it. A forked child timed the same two first calls at 0.18 + 0.10 s uncaptured
(studies/results/h200-first-calls.txt). Here each trial is `python -m benches.trial` on the demo's
tip with its four H200 shapes, after the workers' zygote's preload (benches.worker.preload),
and `benches.trial.precompile` wrapped in cProfile: per shape the seconds, and for the later trials
the functions that took most of them (cumulative). With `--parallel K`, then K more trials at once
(a GPU host's trials set up side by side), their precompile per shape. With `--executor`, the trials
run as the bot runs them instead (the demo config's executor: forked from its zygote, in its
sandbox, one after another), the profile printed by a preload hook into each trial's log. With
`--sdpa`, SDPA's first and second call at fa/s16384 in fresh interpreters, per backend (torch's
default, flash, cuDNN, efficient), with the driver's PTX cache on and off, and after a tiny call.
Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# benches.trial's precompile wrapped in cProfile; each call's seconds and profile go to `kept(seconds, text)`
PROFILED = """
import cProfile, io, pstats, time
import benches.trial as trial
plain = trial.precompile
def profiled(staged, pool=None):
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    try:
        return plain(staged, pool)
    finally:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats({top})
        kept(time.perf_counter() - start, text.getvalue())
trial.precompile = profiled
"""

# a trial in a fresh interpreter after the zygote's preload: argv spec, out, profiles' JSON
CHILD = (
    """
import json, sys
from benches.worker import preload
preload(["torch", "triton"])
report = {{}}
def kept(seconds, text):
    report[str(len(report))] = {{"s": seconds, "profile": text}}
"""
    + PROFILED
    + """
trial.main([sys.argv[1], sys.argv[2]])
open(sys.argv[3], "w").write(json.dumps(report))
"""
)

# the zygote's preload hook (`--executor`): the profiles go to the trial's log
HOOK = (
    """
import sys
def kept(seconds, text):
    print(f"precompile_parts: {{seconds:.3f}} s\\n{{text}}", file=sys.stderr, flush=True)
"""
    + PROFILED
)


def through_executor(
    config,
    build,
    shapes,
    tmp: Path,
    trials: int,
    top: int,  # noqa: ANN001
    env: dict[str, str] | None = None,
) -> int:
    """`trials` trials of the demo's tip, one at a time, as the bot runs them."""
    import dataclasses

    from bisector.runner import make_executor
    from bisector.runner.executor import TrialJob
    from bisector.runner.launch import default_preload

    hook = tmp / "hook"
    hook.mkdir()
    (hook / "precompile_parts_hook.py").write_text(HOOK.format(top=top))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    scratch = str(tmp / "work" / "scratch")
    protocol = dataclasses.replace(
        config.protocol,
        preload=(*default_preload(config), "precompile_parts_hook"),
        env={**config.protocol.env, **{k: v.format(scratch=scratch) for k, v in (env or {}).items()}},
    )
    config = dataclasses.replace(config, protocol=protocol)
    with make_executor(config, tmp / "work", lock_devices=False) as executor:
        for k in range(trials):
            (outcome,) = executor.run([TrialJob(build, shapes, k, slot=k, first=k == 0)])
            rec = outcome.records[0]
            spans = {
                shape: round(end - start, 3)
                for name, shape, start, end in rec.protocol["phases"]
                if name == "precompile"
            }
            print(
                f"## trial {k} ({'JIT cache cold' if k == 0 else 'warm'}; {rec.protocol.get('isolation')}): "
                f"precompile per shape {spans}",
                flush=True,
            )
            if k == trials - 1:
                log = (tmp / "work" / rec.protocol["log_path"]).read_text()
                print("### its log's profiles\n" + log[log.find("precompile_parts:") :], flush=True)
    print(f"# CUDA cache dir after: {sorted(p.name for p in (tmp / 'work' / 'scratch').iterdir())}", flush=True)
    return 0


SDPA_CHILD = """
import sys, time, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.empty(1, device="cuda")
q, k, v = (torch.randn((2, 32, 16384, 128), device="cuda", dtype=torch.bfloat16) for _ in range(3))
torch.cuda.synchronize()
if sys.argv[2] == "tiny":
    t = time.perf_counter()
    s = torch.randn((1, 1, 128, 64), device="cuda", dtype=torch.bfloat16)
    torch.nn.functional.scaled_dot_product_attention(s, s, s)
    torch.cuda.synchronize()
    print(f"tiny call first {time.perf_counter() - t:.3f} s; ", end="")
backends = {"default": None, "flash": [SDPBackend.FLASH_ATTENTION], "cudnn": [SDPBackend.CUDNN_ATTENTION],
            "efficient": [SDPBackend.EFFICIENT_ATTENTION]}[sys.argv[1]]
def call():
    if backends is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    with sdpa_kernel(backends):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
for name in ("first", "second"):
    t = time.perf_counter()
    call()
    torch.cuda.synchronize()
    print(f"{name} {time.perf_counter() - t:.3f} s", end="; " if name == "first" else "\\n")
"""


def sdpa_first_calls() -> int:
    """SDPA's first call per backend in fresh interpreters (see the module docstring)."""
    for label, extra, first in (
        ("PTX cache on", {}, ""),
        ("CUDA_CACHE_DISABLE=1", {"CUDA_CACHE_DISABLE": "1"}, ""),
        ("after a tiny call", {}, "tiny"),
    ):
        for backend in ("default", "flash", "cudnn", "efficient"):
            out = subprocess.run(
                [sys.executable, "-c", SDPA_CHILD, backend, first],
                env=dict(os.environ, **extra),
                capture_output=True,
                text=True,
            )
            print(f"{label} | {backend}: {out.stdout.strip() or out.stderr.strip()[-300:]}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--parallel", type=int, default=0)
    ap.add_argument("--executor", action="store_true")
    ap.add_argument("--sdpa", action="store_true")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        help="NAME=VALUE set in the trials' environment "
        "(--executor; {scratch} is the run's scratch dir, which a sandboxed trial may write)",
    )
    args = ap.parse_args(argv)
    if args.sdpa:
        return sdpa_first_calls()
    from bisector.demo import demo_config, write_demo_repo
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner.spec import build_spec

    tmp = Path(tempfile.mkdtemp(prefix="precompile-parts-"))
    manifest = write_demo_repo(tmp / "upstream")
    config = demo_config("cuda", tmp / "upstream")
    keys = ("fa/s16384", "gemm/m8192", "gemm/m54560", "gemm/decode")
    shapes = tuple(s for s in config.shapes if s.key in keys)
    build = BuildResult(sha=manifest.bad, status=BuildStatus.OK, source_dir=str(tmp / "upstream"))
    if args.executor:
        extra = dict(kv.split("=", 1) for kv in args.env)
        return through_executor(config, build, shapes, tmp, args.trials, args.top, extra)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / "triton"))

    def start(k: int) -> tuple[subprocess.Popen, Path, Path]:
        spec = build_spec(config, build, None, seed=k, shapes=shapes)
        spec_path, out_path, prof_path = tmp / f"spec-{k}.json", tmp / f"out-{k}.json", tmp / f"prof-{k}.json"
        spec_path.write_text(json.dumps(spec))
        return (
            subprocess.Popen(
                [sys.executable, "-c", CHILD.format(top=args.top), str(spec_path), str(out_path), str(prof_path)],
                env=env,
                stdout=subprocess.DEVNULL,
            ),
            out_path,
            prof_path,
        )

    def spans(out_path: Path) -> dict[str, float]:
        out = json.loads(out_path.read_text())
        return {shape: round(end - start, 3) for name, shape, start, end in out["phases"] if name == "precompile"}

    for k in range(args.trials):
        proc, out_path, prof_path = start(k)
        if proc.wait():
            return proc.returncode
        prof = json.loads(prof_path.read_text())
        print(
            f"## trial {k} ({'JIT cache cold' if k == 0 else 'warm'}): precompile per shape {spans(out_path)}",
            flush=True,
        )
        if k == args.trials - 1:
            for q, one in sorted(prof.items()):
                print(f"### the last trial's precompile {q} ({one['s']:.3f} s)\n{one['profile']}", flush=True)
    together = [start(args.trials + k) for k in range(args.parallel)]
    for k, (proc, out_path, _) in enumerate(together):
        if proc.wait():
            return proc.returncode
        print(
            f"## trial {args.trials + k} ({args.parallel} at once): precompile per shape {spans(out_path)}", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long a short kernel reads slow after a heavy one: the H200 demo's decode GEMM read 32 us timed
after the trial's attention and large GEMMs and 25 us in a trial that timed it alone (the same
commit), so trials of different shape sets disagreed by 28% on it against a 6% minimum step.

    python -m studies.clock_settle [--heavy-s 1.0] [--after-s 1.5] [--rounds 3]
    python -m studies.clock_settle --demo-trials 6 [--no-settle]

On one GPU: the demo's Triton GEMM (demolib at the demo's tip, written to a temporary directory) and
torch.matmul (cuBLAS) at the decode shape (64 x 7168 x 2048 bf16), each call captured in a CUDA graph
and its replay timed alone by device events after an L2 flush, as the trials time it: first on an idle
GPU (2 s without work), then in the `--after-s` seconds after `--heavy-s` of the demo's largest GEMM
(54560 x 8192 x 8192 bf16, power-bound). Prints the median kernel time per time bin since the heavy
work ended, with random inputs, both kernels interleaved call by call, and the SM clock when torch can
read it.

`--demo-trials N`: N trial processes of the demo's tip with configs/h200-demo.toml's spec (its four
shapes, its `settle_ms`; `--no-settle` without), run back to back as `python -m benches.trial`, the
first cold: per trial the order it timed the shapes in, the decode GEMM's kernel time and ratio, and
how long it settled. Run with a settle and without, it shows what the settle changes in real trials.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

BINS_MS = (0, 10, 25, 50, 100, 200, 400, 800, 1600, 3200)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.clock_settle", description=__doc__.splitlines()[0])
    ap.add_argument("--heavy-s", type=float, default=1.0)
    ap.add_argument("--after-s", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--demo-trials", type=int, default=0)
    ap.add_argument("--no-settle", action="store_true")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: clock_settle: needs a CUDA or ROCm GPU", file=sys.stderr)
        return 2
    if args.demo_trials:
        return demo_trials(args.demo_trials, not args.no_settle)
    from bisector.demo import write_demo_repo

    tmp = tempfile.mkdtemp(prefix="clock-settle-")
    write_demo_repo(Path(tmp, "upstream"))
    sys.path.insert(0, str(Path(tmp, "upstream")))
    from demolib.triton_gemm import matmul  # the demo's tip

    torch.manual_seed(0)
    dev = torch.device("cuda")
    a = torch.randn(64, 2048, device=dev, dtype=torch.bfloat16)
    b = torch.randn(2048, 7168, device=dev, dtype=torch.bfloat16)
    big_a = torch.randn(54560, 8192, device=dev, dtype=torch.bfloat16)
    big_b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    calls = {"triton": lambda: matmul(a, b), "cublas": lambda: torch.matmul(a, b)}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in calls.values():  # compiled and autotuned before the capture
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    kernels = {}
    for name, fn in calls.items():  # a CUDA graph, as the trials time a host-bound call: the kernel alone
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        kernels[name] = graph.replay
    torch.cuda.synchronize()

    def clock_mhz() -> float | None:
        try:
            return float(torch.cuda.clock_rate())
        except Exception:  # noqa: BLE001 - pynvml absent: no clock column
            return None

    def timed_after(start: float, seconds: float) -> list[tuple[float, str, float, float | None]]:
        out = []
        while time.perf_counter() - start < seconds:
            for name, fn in kernels.items():
                flush.zero_()
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                fn()
                end.record()
                end.synchronize()
                out.append((1000 * (time.perf_counter() - start), name, 1000 * begin.elapsed_time(end), clock_mhz()))
        return out

    rows: dict[str, list[tuple[float, str, float, float | None]]] = {"idle": [], "after heavy": []}
    for _ in range(args.rounds):
        time.sleep(2.0)
        rows["idle"] += timed_after(time.perf_counter(), 0.2)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.heavy_s:
            torch.matmul(big_a, big_b)
            torch.cuda.synchronize()
        rows["after heavy"] += timed_after(time.perf_counter(), args.after_s)
    print(
        f"# {torch.cuda.get_device_name()}: decode GEMM kernel time (us, median) by ms since the heavy GEMM ended;"
        f" {args.rounds} rounds of {args.heavy_s} s heavy, {args.after_s} s after"
    )
    print("| when | ms since | triton us | cublas us | calls | SM MHz |")
    print("|---|---|---:|---:|---:|---:|")
    for when, got in rows.items():
        for lo, hi in zip(BINS_MS, BINS_MS[1:]):
            part = [r for r in got if lo <= r[0] < hi]
            if not part:
                continue
            med = {
                k: statistics.median(r[2] for r in part if r[1] == k) for k in kernels if any(r[1] == k for r in part)
            }
            clocks = [r[3] for r in part if r[3] is not None]
            mhz = f"{statistics.median(clocks):.0f}" if clocks else "-"
            print(
                f"| {when} | {lo}-{hi} | {med.get('triton', float('nan')):.1f} | {med.get('cublas', float('nan')):.1f} "
                f"| {len(part)} | {mhz} |"
            )
    return 0


def demo_trials(n: int, settle: bool) -> int:
    """N real trial processes of the demo's tip, its four H200 shapes (see the module docstring)."""
    import json
    import os
    import subprocess

    from bisector.demo import demo_config, write_demo_repo
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner.spec import build_spec

    tmp = Path(tempfile.mkdtemp(prefix="clock-settle-"))
    manifest = write_demo_repo(tmp / "upstream")
    config = demo_config("cuda", tmp / "upstream")
    shapes = tuple(s for s in config.shapes if s.key in ("fa/s16384", "gemm/m8192", "gemm/m54560", "gemm/decode"))
    build = BuildResult(sha=manifest.bad, status=BuildStatus.OK, source_dir=str(tmp / "upstream"))
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / "triton"))
    print(f"# {n} trials of the demo's tip ({manifest.bad[:7]}), settle {'on' if settle else 'off'}")
    print("| trial | order timed | decode us (subject, median) | decode ratio | settled ms |")
    print("|---|---|---:|---:|---:|")
    for k in range(n):
        spec = build_spec(config, build, None, seed=k, shapes=shapes)
        if not settle:
            spec["settle_ms"] = {}
        spec_path, out_path = tmp / f"spec-{k}.json", tmp / f"out-{k}.json"
        spec_path.write_text(json.dumps(spec))
        subprocess.run(
            [sys.executable, "-m", "benches.trial", str(spec_path), str(out_path)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        out = json.loads(out_path.read_text())
        order = [shape for name, shape, _, _ in out["phases"] if name == "timed"]
        decode = next(r for r in out["results"] if r["shape"] == "gemm/decode")
        settled = sum(end - start for name, _, start, end in out["phases"] if name == "settle")
        print(
            f"| {k} | {', '.join(order)} | {1000 * statistics.median(decode['subject_ms']):.1f} "
            f"| {decode.get('ratio', float('nan')):.3f} | {1000 * settled:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

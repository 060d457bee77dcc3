"""Does a trial's precompile (inputs drawn, first calls captured, off the device lock) disturb
another trial's timed section on the same GPU? (issue 23: "may overlap another trial's timed
section only if measured not to disturb it")

    python -m studies.precompile_overlap [--seconds 60] [--out FILE]

Process A times kernels as a trial does (benches.kernel_time: cold cache, CUDA graph, 6 reps of
subject and control interleaved) in rounds, back to back: a decode GEMM (64x7168x2048 bf16, ~20 us,
the shortest and so the most exposed), a square GEMM (8192^3) and attention (SDPA, 2x32x4096x128).
Process B alternates 4 s windows of nothing and of precompiling as benches/trial.py does it:
random inputs of the demo's sizes drawn on the GPU, then a freshly written Triton kernel (a new
source each time, so a real compile) and SDPA captured into a CUDA graph that is never replayed.
The rounds of A that fall wholly in B's busy windows are compared with those in its idle windows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

WINDOW_S = 4.0
KERNEL_SRC = '''
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * {factor}, mask=mask)
'''


def timer(seconds: float, queue: mp.Queue) -> None:
    import torch
    import torch.nn.functional as F

    from benches.kernel_time import gpu_kernel_times

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    flush_buf = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    r = lambda *s: torch.randn(*s, generator=gen, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    a, b = r(64, 2048), r(2048, 7168)
    x, y = r(8192, 8192), r(8192, 8192)
    q, k, v = r(2, 32, 4096, 128), r(2, 32, 4096, 128), r(2, 32, 4096, 128)
    cases = {"gemm 64x7168x2048": [lambda: a @ b, lambda: torch.mm(a, b)],
             "gemm 8192^3": [lambda: x @ y, lambda: torch.mm(x, y)],
             "sdpa 2x32x4096x128": [lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)] * 2}
    for fns in cases.values():  # warm
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    queue.put(("ready", time.time()))
    end = time.time() + seconds
    while time.time() < end:
        for name, fns in cases.items():
            t0 = time.time()
            times = gpu_kernel_times(fns, 6, flush_buf.zero_).times
            queue.put(("round", name, t0, time.time(), statistics.median(times[0])))
    queue.put(("done", time.time()))


def precompiler(seconds: float, start: float, queue: mp.Queue) -> None:
    import torch
    import torch.nn.functional as F

    tmp = Path(tempfile.mkdtemp(prefix="precompile-overlap-"))
    n = 0
    end = start + seconds
    while time.time() < end:
        window = int((time.time() - start) // WINDOW_S)
        busy = window % 2 == 1
        w_end = start + (window + 1) * WINDOW_S
        if busy:
            queue.put(("busy", start + window * WINDOW_S, w_end))
        while time.time() < min(w_end, end):
            if not busy:
                time.sleep(0.02)
                continue
            n += 1
            gen = torch.Generator(device="cuda")
            gen.manual_seed(n)
            q, k, v = (torch.randn(2, 32, 16384, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            path = tmp / f"k{n}.py"
            path.write_text(KERNEL_SRC.format(factor=1.0 + n * 1e-3))
            spec = importlib.util.spec_from_file_location(f"k{n}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)  # type: ignore[union-attr]
            xs = torch.randn(1 << 20, generator=gen, device="cuda")
            ys = torch.empty_like(xs)
            for fn in (lambda: mod.scale[(1024,)](xs, ys, xs.numel(), BLOCK=1024),
                       lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=torch.cuda.Stream(), capture_error_mode="relaxed"):
                    fn()
                del graph
            del q, k, v, xs, ys
    queue.put(("compiled", n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    a = ctx.Process(target=timer, args=(args.seconds, queue))
    a.start()
    msg = queue.get(timeout=300)
    assert msg[0] == "ready", msg
    b = ctx.Process(target=precompiler, args=(args.seconds, time.time(), queue))
    b.start()
    rounds, busy, compiled = [], [], 0
    while a.is_alive() or b.is_alive() or not queue.empty():
        try:
            m = queue.get(timeout=5)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        if m[0] == "round":
            rounds.append(m[1:])
        elif m[0] == "busy":
            busy.append(m[1:])
        elif m[0] == "compiled":
            compiled = m[1]
    a.join()
    b.join()

    def state(t0: float, t1: float) -> str | None:
        if any(s <= t0 and t1 <= e for s, e in busy):
            return "busy"
        if not any(s < t1 and t0 < e for s, e in busy):
            return "idle"
        return None

    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')}: {len(rounds)} timed rounds, {compiled} precompiles "
             f"in {len(busy)} busy windows of {WINDOW_S:g} s",
             f"# {'case':22s} {'idle us':>9s} {'busy us':>9s} {'delta':>7s} {'idle CV':>8s} {'busy CV':>8s} rounds"]
    summary = {}
    for name in dict.fromkeys(r[0] for r in rounds):
        by = {"idle": [], "busy": []}
        for n, t0, t1, ms in rounds:
            s = state(t0, t1)
            if n == name and s:
                by[s].append(ms * 1e3)
        if not by["idle"] or not by["busy"]:
            continue
        mi, mb = statistics.median(by["idle"]), statistics.median(by["busy"])
        cv = {k: statistics.pstdev(v) / statistics.mean(v) * 100 for k, v in by.items()}
        summary[name] = {"idle_us": mi, "busy_us": mb, "delta_pct": (mb / mi - 1) * 100, **{f"{k}_cv_pct": c for k, c in cv.items()}}
        lines.append(f"{name:24s} {mi:9.2f} {mb:9.2f} {(mb / mi - 1) * 100:+6.2f}% {cv['idle']:7.2f}% "
                     f"{cv['busy']:7.2f}% {len(by['idle'])}/{len(by['busy'])}")
    text = "\n".join(lines)
    print(text)
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

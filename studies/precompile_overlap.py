"""Does a trial's setup, done off the device lock, disturb another trial's timed section on the same
GPU? (issue 23: "may overlap another trial's timed section only if measured not to disturb it")

    python -m studies.precompile_overlap [--modes precompile,fill,alloc,context] [--seconds 40] [--out FILE]

Process A times kernels as a trial does (benches.kernel_time: cold cache, CUDA graph, 6 reps of
subject and control interleaved) in rounds, back to back: a decode GEMM (64x7168x2048 bf16, ~20 us,
the shortest and so the most exposed), a square GEMM (8192^3) and attention (SDPA, 2x32x4096x128
causal, and the demo's 2x32x16384x128).
Process B alternates 4 s windows of nothing and of one part of a trial's setup, per `--mode`:
- `precompile`: what benches/trial.py does before the gate: random inputs of the demo's sizes drawn
  on the GPU (into memory its allocator already holds, after the first time), then a freshly written
  Triton kernel (a new source each time, so a real compile) and SDPA captured into a CUDA graph that is
  never replayed;
- `fill`: the input draws alone, into freshly mapped memory each time (the allocator's cache emptied:
  a fresh trial process has nothing cached), ~1.2 GB of random fills;
- `alloc`: the same allocations and frees with no kernel at all;
- `context`: a fresh process forked from one that imported torch (as the runner's zygote does) makes
  its CUDA context, allocates 1.2 GB and exits: context creation and teardown, as every trial does.
The rounds of A that fall wholly in B's busy windows are compared with those in its idle windows:
median, CV, and the share of rounds more than 5% off the idle median (what makes a trial an outlier).
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
from collections.abc import Callable, Iterator
from pathlib import Path

WINDOW_S = 4.0
MODES = ("precompile", "fill", "alloc", "context")
KERNEL_SRC = """
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * {factor}, mask=mask)
"""


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
    ql, kl, vl = r(*FILL_SHAPE), r(*FILL_SHAPE), r(*FILL_SHAPE)
    cases = {
        "gemm 64x7168x2048": [lambda: a @ b, lambda: torch.mm(a, b)],
        "gemm 8192^3": [lambda: x @ y, lambda: torch.mm(x, y)],
        "sdpa 2x32x4096x128": [lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)] * 2,
        # the demo's attention size: ~15 ms a call, long enough for one disturbance to land in a call
        "sdpa 2x32x16384x128": [lambda: F.scaled_dot_product_attention(ql, kl, vl)] * 2,
    }
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


FILL_SHAPE = (2, 32, 16384, 128)  # bf16 q, k, v: 3 x 256 MiB, plus the GEMM's 8192^2 operands
ALLOC_BYTES = 3 * (2 * 32 * 16384 * 128 * 2) + 2 * 8192 * 8192 * 2


def _fill(torch, gen) -> list:
    """The demo's biggest inputs, drawn on the GPU: attention q, k, v and a square GEMM's operands."""
    out = [torch.randn(*FILL_SHAPE, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    out += [torch.randn(8192, 8192, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    return out


def _precompile_once(torch, tmp: Path, n: int) -> None:
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda")
    gen.manual_seed(n)
    q, k, v = (torch.randn(*FILL_SHAPE, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    path = tmp / f"k{n}.py"
    path.write_text(KERNEL_SRC.format(factor=1.0 + n * 1e-3))
    spec = importlib.util.spec_from_file_location(f"k{n}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    xs = torch.randn(1 << 20, generator=gen, device="cuda")
    ys = torch.empty_like(xs)
    for fn in (
        lambda: mod.scale[(1024,)](xs, ys, xs.numel(), BLOCK=1024),
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(), capture_error_mode="relaxed"):
            fn()
        del graph


def _fill_once(torch, n: int) -> None:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(n)
    xs = _fill(torch, gen)
    torch.cuda.synchronize()
    del xs
    torch.cuda.empty_cache()  # the next draw maps fresh memory, as a fresh trial process does


def _alloc_once(torch) -> None:
    x = torch.empty(ALLOC_BYTES, dtype=torch.int8, device="cuda")
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()


def _context_child() -> None:
    import os

    import torch

    x = torch.empty(ALLOC_BYTES, dtype=torch.int8, device="cuda")  # makes the context
    torch.cuda.synchronize()
    del x
    os._exit(0)


def precompiler(seconds: float, start: float, queue: mp.Queue, mode: str) -> None:
    import torch

    tmp = Path(tempfile.mkdtemp(prefix="precompile-overlap-"))
    forks = mp.get_context("fork")  # this process never touches CUDA in `context` mode, like a zygote
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
            if mode == "precompile":
                _precompile_once(torch, tmp, n)
            elif mode == "fill":
                _fill_once(torch, n)
            elif mode == "alloc":
                _alloc_once(torch)
            else:
                child = forks.Process(target=_context_child)
                child.start()
                child.join()
    queue.put(("compiled", n))


def messages(queue: mp.Queue, alive: Callable[[], bool]) -> Iterator[tuple]:
    """What the study's processes put on `queue`, while any of them is `alive` or some is left."""
    while alive() or not queue.empty():
        try:
            yield queue.get(timeout=5)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue


def one_mode(mode: str, seconds: float) -> tuple[list[str], dict]:
    """Process A's rounds split by B's windows for one mode: table lines and a summary."""
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    a = ctx.Process(target=timer, args=(seconds, queue))
    a.start()
    msg = queue.get(timeout=300)
    assert msg[0] == "ready", msg
    b = ctx.Process(target=precompiler, args=(seconds, time.time(), queue, mode))
    b.start()
    rounds, busy, done = [], [], 0
    for m in messages(queue, lambda: a.is_alive() or b.is_alive()):
        if m[0] == "round":
            rounds.append(m[1:])
        elif m[0] == "busy":
            busy.append(m[1:])
        elif m[0] == "compiled":
            done = m[1]
    a.join()
    b.join()

    def state(t0: float, t1: float) -> str | None:
        if any(s <= t0 and t1 <= e for s, e in busy):
            return "busy"
        if not any(s < t1 and t0 < e for s, e in busy):
            return "idle"
        return None

    lines = [f"## {mode}: {len(rounds)} timed rounds, {done} setups in {len(busy)} busy windows of {WINDOW_S:g} s"]
    summary = {}
    for name in dict.fromkeys(r[0] for r in rounds):
        by: dict[str, list[float]] = {"idle": [], "busy": []}
        for n, t0, t1, ms in rounds:
            s = state(t0, t1)
            if n == name and s:
                by[s].append(ms * 1e3)
        if not by["idle"] or not by["busy"]:
            continue
        mi, mb = statistics.median(by["idle"]), statistics.median(by["busy"])
        cv = {k: statistics.pstdev(v) / statistics.mean(v) * 100 for k, v in by.items()}
        off = {k: sum(abs(x / mi - 1) > 0.05 for x in v) / len(v) * 100 for k, v in by.items()}
        summary[name] = {
            "idle_us": mi,
            "busy_us": mb,
            "delta_pct": (mb / mi - 1) * 100,
            **{f"{k}_cv_pct": c for k, c in cv.items()},
            **{f"{k}_off5_pct": o for k, o in off.items()},
        }
        lines.append(
            f"{name:24s} {mi:9.2f} {mb:9.2f} {(mb / mi - 1) * 100:+6.2f}% {cv['idle']:7.2f}% "
            f"{cv['busy']:7.2f}% {off['idle']:6.1f}% {off['busy']:6.1f}% {len(by['idle'])}/{len(by['busy'])}"
        )
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="precompile,fill,alloc,context")
    parser.add_argument("--seconds", type=float, default=40.0, help="per mode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        print(f"precompile_overlap: unknown mode {unknown[0]!r} (known: {', '.join(MODES)})", file=sys.stderr)
        return 2
    lines = [
        f"# {time.strftime('%Y-%m-%d %H:%M')}: process A times rounds back to back; B alternates "
        f"{WINDOW_S:g} s idle / busy windows of one setup part ({args.seconds:g} s a mode)",
        f"# {'case':22s} {'idle us':>9s} {'busy us':>9s} {'delta':>7s} {'idle CV':>8s} {'busy CV':>8s} "
        f"{'idle>5%':>7s} {'busy>5%':>7s} rounds",
    ]
    summary = {}
    for mode in modes:
        more, summary[mode] = one_mode(mode, args.seconds)
        lines += more
        print("\n".join(more), flush=True)
    text = "\n".join(lines)
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

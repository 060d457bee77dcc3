"""What a setup's brief loan of the device spends: allocating the inputs or filling them.

A trial draws its inputs on the device in a brief loan (benches/staging.py `briefly`): random fills
beside another trial's timed section slowed it, allocations alone barely did. On the real ranges the
loan took 0.04-0.08 s a trial against 0.04 s of timed work (studies/results/real-device-sections-h100-3.txt).
If most of it is the caching allocator's first cudaMalloc of each tensor, memory reserved before the
loan (an empty block allocated and freed: kept by the allocator, no kernel) leaves only the fills in it.

    python -m benches.input_draws --rows 16384 --cols 4096 --reps 10
    CUDA_MODULE_LOADING=EAGER python -m benches.input_draws --first

Prints, per way of drawing, the median and spread of the seconds from the first draw to the sync;
with --first, a fresh process's device open, a host draw and its copy, then first and second draws
on the device.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def _draw(rows: int, cols: int, seed: int) -> list[torch.Tensor]:
    """Two bf16 inputs drawn as the real suites draw them (fp32 normal, cast): x and dy."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn((rows, cols), generator=g, device="cuda").to(torch.bfloat16) for _ in range(2)]


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds from the call to its work done on the device, and what it returned (kept alive)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    made = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, made


def measure(rows: int, cols: int, reps: int) -> dict[str, list[float]]:
    """Seconds per draw: `cold` (the allocator's cache emptied first: cudaMalloc in the draw),
    `reserved` (a block of the draw's peak allocated and freed before: the draw reuses it), and
    `reserve` (that allocation itself, the part moved out of the loan)."""
    peak = 2 * rows * cols * (4 + 2)  # per input an fp32 draw and its bf16 cast, both alive at the cast
    out: dict[str, list[float]] = {"cold": [], "reserve": [], "reserved": []}
    _draw(rows, cols, 0)  # the context, the generator's kernels, cuRAND's state: not what is measured
    for rep in range(reps):
        seed = rep + 1
        torch.cuda.empty_cache()
        seconds, made = _timed(lambda: _draw(rows, cols, seed))  # noqa: B023 - called at once
        out["cold"].append(seconds)
        del made
        torch.cuda.empty_cache()
        seconds, _ = _timed(lambda: torch.empty(peak, dtype=torch.uint8, device="cuda").data_ptr())
        out["reserve"].append(seconds)
        seconds, made = _timed(lambda: _draw(rows, cols, seed))  # noqa: B023 - called at once
        out["reserved"].append(seconds)
        del made
    return out


def _host_draw(rows: int, cols: int, seed: int) -> list[torch.Tensor]:
    """The same two inputs drawn on the host (pinned, for a copy without a staging pass)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((rows, cols), generator=g).to(torch.bfloat16).pin_memory() for _ in range(2)]


def first_draws(rows: int, cols: int) -> dict[str, float]:
    """In this (fresh) process: seconds to open the device; to draw the inputs on the host (off the
    device) and copy them over (`host_copy_s`: a copy launches no kernel, so no module is loaded in
    it: what a loan would hold if the setup drew there); to draw them on the device the first time
    (each kernel's module loaded at its first launch, with CUDA's lazy loading) and the second; and
    the device memory the process holds after opening (what an eager module loading would add to)."""
    start = time.perf_counter()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    opened = time.perf_counter() - start
    free, total = torch.cuda.mem_get_info()
    start = time.perf_counter()
    host = _host_draw(rows, cols, 1)
    host_draw = time.perf_counter() - start
    copy, copied = _timed(lambda: [t.to("cuda", non_blocking=True) for t in host])
    del copied
    first, made = _timed(lambda: _draw(rows, cols, 1))
    del made
    second, _ = _timed(lambda: _draw(rows, cols, 2))
    return {
        "open_s": opened,
        "host_draw_s": host_draw,
        "host_copy_s": copy,
        "first_draw_s": first,
        "second_draw_s": second,
        "used_gib": (total - free) / 2**30,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.input_draws")
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--first", action="store_true", help="time this fresh process's first draws instead")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: benches.input_draws needs a CUDA device")
        return 2
    if args.first:
        got = first_draws(args.rows, args.cols)
        print(" ".join(f"{k}={v:.4f}" for k, v in got.items()))
        return 0
    for name, xs in measure(args.rows, args.cols, args.reps).items():
        ms = sorted(1e3 * x for x in xs)
        print(f"{name:<9} median {statistics.median(ms):8.2f} ms   min {ms[0]:8.2f}   max {ms[-1]:8.2f}   n={len(ms)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

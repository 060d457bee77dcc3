"""Which step of a trial's setup, done off the device lock, disturbs another trial's timed section?

    python -m studies.setup_steps [--modes free,keep] [--seconds 30] [--out FILE]

Why: in the H200 demo stores of 2026-12-04 a trial far (> 3%) off its build's median had another
trial's `precompile` overlapping its timed section 62-83% of the time, against 29-43% for the
others (attention, m8192, m54560; the inputs are drawn under a brief loan of the device since
12-03). A precompile captures the first calls of subject and control into a CUDA graph that is
never replayed: no kernel runs, but `torch.cuda.graph` empties the allocator's cache on entry
(cudaFree), the capture maps new memory for its outputs (cudaMalloc), the first call loads modules,
and a library may make its handles. studies/results/h200-setup-parts.txt measured allocations
and context creation disturbing timed work (68% and 76% of SDPA rounds > 5% off).

Process A times rounds back to back (studies.precompile_overlap's timer: attention at the demo's
sizes, square and decode GEMMs, cold cache, CUDA graphs). Process B forks, one after another,
children of a process that imported torch and triton without touching CUDA (as the runner's
zygote does); each child makes its context, allocates the demo's inputs (no kernels: the real
trial draws them under the lock), then captures the demo's subject and control first calls shape
by shape, 0.25 s apart, and exits. Modes:
- `free`: each capture as benches/trial.py's `precompile` did (torch.cuda.graph: the cache emptied
  on entry, the graph dropped after);
- `keep`: captures into one shared pool (capture_begin/capture_end, no emptying, graphs kept until
  the child exits).
Each child's steps are timed; every round of A is attributed to the steps it overlaps. Printed per
mode and step: its median duration, and per timed case the rounds overlapping it, the share more
than 5% off the median of rounds that overlap no child at all, and that share for the quiet rounds.
Needs one NVIDIA GPU with triton; exits 2 with a one-line reason elsewhere.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benches.trial import captured
from bisector.demo.history import states
from studies.kernel_time import write_demolib
from studies.precompile_overlap import messages, timer

MODES = ("free", "keep")
GAP_S = 0.25  # between a child's steps: a round overlapping two steps is told apart from one that overlaps one
FA = (2, 32, 16384, 128)
GEMMS = {"m8192": (8192, 8192, 8192), "m54560": (54560, 8192, 8192), "decode": (64, 7168, 2048)}


def child_steps(mode: str, source: str, queue: mp.Queue) -> None:
    """One trial's setup, step by step, each span put on the queue; then the child exits."""
    import os

    import torch
    import torch.nn.functional as F

    def span(name: str, fn: Any) -> Any:
        t0 = time.time()
        out = fn()
        queue.put(("step", name, t0, time.time()))
        time.sleep(GAP_S)
        return out

    span("context", lambda: (torch.empty(1, device="cuda"), torch.cuda.synchronize()))
    e = lambda *s: torch.empty(*s, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    inputs = span(
        "alloc_inputs",
        lambda: {"fa": (e(*FA), e(*FA), e(*FA)), **{k: (e(m, kk), e(kk, n)) for k, (m, kk, n) in GEMMS.items()}},
    )
    sys.path.insert(0, source)
    fa = importlib.import_module("demolib.triton_fa")
    gemm = importlib.import_module("demolib.triton_gemm")
    stream = torch.cuda.Stream()
    pool = torch.cuda.graph_pool_handle()
    kept = []

    def capture(fn: Any) -> None:
        if mode == "free":  # benches/trial.py's precompile before
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="relaxed"):
                fn()
            del graph
            return
        kept.append(captured(fn, stream, pool))  # benches/trial.py's precompile now

    q, k, v = inputs["fa"]
    span("fa_subject", lambda: capture(lambda: fa.flash_attn(q, k, v)))
    span("fa_control", lambda: capture(lambda: F.scaled_dot_product_attention(q, k, v)))
    for name in GEMMS:
        a, b = inputs[name]
        span(f"{name}_subject", lambda: capture(lambda: gemm.matmul(a, b)))  # noqa: B023 - span runs it now
        span(f"{name}_control", lambda: capture(lambda: torch.mm(a, b)))  # noqa: B023
    queue.put(("step", "exit", time.time(), 0.0))  # the parent closes it when the child is gone
    os._exit(0)


def setups(mode: str, seconds: float, source: str, cache: str, queue: mp.Queue) -> None:
    """B: children forked one after another for `seconds`, from a process that never touches CUDA."""
    import os

    os.environ["TRITON_CACHE_DIR"] = cache
    import torch  # noqa: F401 - imported before the fork, as the zygote does
    import triton  # noqa: F401

    forks = mp.get_context("fork")
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        child = forks.Process(target=child_steps, args=(mode, source, queue))
        child.start()
        child.join()
        queue.put(("exited", time.time()))
        n += 1
        time.sleep(1.0)  # quiet rounds between setups
    queue.put(("setups", n))


def one_mode(mode: str, seconds: float, source: Path, cache: Path) -> tuple[list[str], dict[str, Any]]:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    a = ctx.Process(target=timer, args=(seconds + 20.0, queue))
    a.start()
    msg = queue.get(timeout=300)
    assert msg[0] == "ready", msg
    b = ctx.Process(target=setups, args=(mode, seconds, str(source), str(cache), queue))
    b.start()
    rounds, steps, n = [], [], 0
    open_exit: list[float] = []
    for m in messages(queue, b.is_alive):
        if m[0] == "round":
            rounds.append(m[1:])
        elif m[0] == "step" and m[1] == "exit":
            open_exit.append(m[2])
        elif m[0] == "step":
            steps.append(m[1:])
        elif m[0] == "exited" and open_exit:
            steps.append(("exit", open_exit.pop(), m[1]))
        elif m[0] == "setups":
            n = m[1]
    a.terminate()
    a.join()
    busy = [(s, e) for _, s, e in steps]
    first_t = min((s for s, _ in busy), default=0.0)
    cases = list(dict.fromkeys(r[0] for r in rounds))
    quiet = {
        c: [
            ms
            for name, t0, t1, ms in rounds
            if name == c and t0 > first_t and not any(s < t1 and t0 < e for s, e in busy)
        ]
        for c in cases
    }
    lines = [
        f"## {mode}: {len(rounds)} timed rounds, {n} setups; per step: median s, then per case: "
        "rounds overlapping it, share > 5% off the quiet median"
    ]
    summary: dict[str, Any] = {}
    ref = {c: statistics.median(v) for c, v in quiet.items() if v}
    off = lambda c, v: sum(abs(x / ref[c] - 1) > 0.05 for x in v) / len(v) * 100 if v else float("nan")  # noqa: E731
    lines.append("quiet: " + "; ".join(f"{c} {len(v)} {off(c, v):.0f}%" for c, v in quiet.items() if c in ref))
    for name in dict.fromkeys(s[0] for s in steps):
        spans = [(s, e) for nm, s, e in steps if nm == name]
        dur = statistics.median(e - s for s, e in spans)
        cells, per = [], {}
        for c in cases:
            if c not in ref:
                continue
            hit = [ms for nm, t0, t1, ms in rounds if nm == c and any(s < t1 and t0 < e for s, e in spans)]
            cells.append(f"{c} {len(hit)} {off(c, hit):.0f}%")
            per[c] = {"rounds": len(hit), "off5_pct": off(c, hit)}
        summary[name] = {"median_s": dur, **per}
        lines.append(f"{name:16s} {dur:6.3f} s  " + "; ".join(cells))
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seconds", type=float, default=30.0, help="per mode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes):
        print(f"setup_steps: unknown mode in {args.modes!r} (known: {', '.join(MODES)})", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("setup_steps: needs an NVIDIA GPU (torch sees none)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="setup-steps-"))
    source = write_demolib(states()[0], work / "first")
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')}: studies.setup_steps, {args.seconds:g} s a mode"]
    summary = {}
    for mode in modes:
        more, summary[mode] = one_mode(mode, args.seconds, source, work / "triton-cache")
        lines += more
        print("\n".join(more), flush=True)
    print(json.dumps(summary))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a later trial's setup goes on a GPU: each part of it timed in fresh processes.

    python -m studies.trial_setup [--processes 4] [--shape fa/s16384] [--out FILE]

Why: a trial sets up (device context, inputs, the first calls captured into a graph) before it asks
for the device, and the device waits whenever the next trial is not set up when the last one ends.
On one H200 a later trial's setup took ~2.3 s (its precompile ~1.4 s) against ~0.6 s on the device
(studies/results/h200-long-range.txt), so a pair that doubled left the device idle ~2 s. The trial's
own phases say how long the precompile took, not which call took it: here each part is timed alone,
in the order a trial runs them, in `--processes` fresh processes sharing one Triton cache (the first
compiles cold, the rest load it, as a commit's later trials do), with the demo's tip commit:
imports, context, inputs, the subject's first call (Triton: cache lookup, module load, launcher),
the control's first call (torch SDPA), each captured into a CUDA graph as the trial's precompile
does, and their second calls (what remains once everything is loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
t = [("start", time.perf_counter())]
def mark(name):
    t.append((name, time.perf_counter()))
import torch, triton
mark("import torch, triton")
sys.path.insert(0, sys.argv[1])
from demolib.triton_fa import flash_attn
mark("import demolib")
torch.empty(1, device="cuda")
mark("context")
B, H, S, D = (int(x) for x in sys.argv[2].split(","))
gen = torch.Generator(device="cuda"); gen.manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
torch.cuda.synchronize()
mark("inputs")
stream = torch.cuda.Stream()
for name, fn in (("subject", lambda: flash_attn(q, k, v)),
                 ("control", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="relaxed"):
        fn()
    del graph
    torch.cuda.synchronize()
    mark(f"{name} first call, captured")
    fn(); torch.cuda.synchronize()
    mark(f"{name} second call")
print(json.dumps([(b[0], round(b[1] - a[1], 4)) for a, b in zip(t, t[1:])]))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--shape", default="2,32,16384,128", help="B,H,S,D of the attention inputs (bf16)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from bisector.demo import write_demo_repo

    root = Path(tempfile.mkdtemp(prefix="trial-setup-"))
    write_demo_repo(root / "repo")
    env = {**os.environ, "TRITON_CACHE_DIR": str(root / "triton-cache")}
    rows = []
    for i in range(args.processes):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(root / "repo"), args.shape],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        parts = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(("cold" if i == 0 else f"warm {i}", parts, time.perf_counter() - start))
    names = [n for n, _ in rows[0][1]]
    lines = [
        f"# studies.trial_setup, {time.strftime('%Y-%m-%d %H:%M')}, shape B,H,S,D = {args.shape} bf16; "
        "seconds per part, one fresh process per column (the first compiles cold)",
        "",
        "| part | " + " | ".join(r[0] for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for k, name in enumerate(names):
        lines.append(f"| {name} | " + " | ".join(f"{r[1][k][1]:.3f}" for r in rows) + " |")
    lines.append("| process wall (with interpreter start and exit) | " + " | ".join(f"{r[2]:.3f}" for r in rows) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

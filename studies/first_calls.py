"""Where a later trial's setup goes on a GPU host, part by part, in processes forked as the trial
workers are (bisector/runner/workers.py: a zygote that imported torch and triton forks one per trial).

    python -m studies.first_calls [--rounds 8] [--variants plain,libs,key]

A later trial's setup took ~3 s on one H200 in the 389-commit range (context 0.95 s, precompile
1.25 s with the JIT cache warm, machine fingerprint 0.2 s: studies/results/h200-long-range.txt), and
a doubling that finds no process set up waits on it. Each round forks a child from this process,
which times in order: the machine fingerprint's parts (package versions, platform), the device
runtime's init, the device properties, a context (a first tensor), the demo's attention kernel's
first call (its JIT cache warm from round 0 on), its second, SDPA's first call (the control, flash
or cuDNN as the trials allow), its second. Variants change what the parent did before forking:
- plain: imported torch and triton (as the zygote does);
- libs: also mapped the CUDA libraries torch loads lazily (cuDNN, cuBLAS, cuBLASLt, NVRTC), so a
  child does not link them again;
- key: also computed Triton's own cache key (benches.worker.triton_key, as the zygote now does).
Prints, per variant, each part's median and max over the rounds after the first (round 0 fills the
JIT cache and is shown apart). Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SHAPE = (2, 32, 16384, 128)  # the demo's fa/s16384
SYNCED = ("context", "subject_first", "subject_second", "control_first", "control_second")
LIB_PATTERNS = ("libcudnn*.so*", "libcublas*.so*", "libnvrtc*.so*")


def map_cuda_libraries() -> list[str]:
    """dlopen the CUDA libraries torch would load at first use, from torch's and the nvidia wheels' dirs."""
    import torch

    dirs = [Path(torch.__file__).parent / "lib"] + [
        Path(p) for p in glob.glob(str(Path(torch.__file__).parent.parent / "nvidia" / "*" / "lib"))
    ]
    loaded = []
    for d in dirs:
        for pattern in LIB_PATTERNS:
            for lib in sorted(glob.glob(str(d / pattern))):
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    loaded.append(Path(lib).name)
                except OSError:
                    pass
    return loaded


def child(upstream: Path, out: int) -> None:
    """Time the parts of a setup in this fresh child; write them to `out` as JSON."""
    import torch

    parts: dict[str, float] = {}

    def timed(name: str, fn):  # noqa: ANN001, ANN202
        start = time.perf_counter()
        value = fn()
        torch.cuda.synchronize() if name in SYNCED else None
        parts[name] = time.perf_counter() - start
        return value

    import importlib.metadata
    import platform

    timed("versions", lambda: [importlib.metadata.version(p) for p in ("torch", "triton", "numpy")])
    timed("platform", platform.platform)
    timed("cuda_init", torch.cuda.init)
    timed("device_props", lambda: torch.cuda.get_device_properties(0))
    timed("context", lambda: torch.empty(1, device="cuda"))
    sys.path.insert(0, str(upstream))
    from demolib.triton_fa import flash_attn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    torch.cuda.synchronize()
    timed("subject_first", lambda: flash_attn(q, k, v))
    timed("subject_second", lambda: flash_attn(q, k, v))

    def control():  # noqa: ANN202
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    timed("control_first", control)
    timed("control_second", control)
    os.write(out, json.dumps(parts).encode())


def fork_round(upstream: Path) -> dict[str, float]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            child(upstream, w)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data) if data else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--variants", default="plain,libs,key")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    import torch  # noqa: F401 - what the zygote imports
    import triton  # noqa: F401

    from studies.long_range import write_repo

    print(f"# parent imports {time.perf_counter() - start:.2f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        upstream = Path(tmp, "upstream")
        write_repo(upstream, 1, 1)
        os.environ["TRITON_CACHE_DIR"] = str(Path(tmp, "triton-cache"))
        first = fork_round(upstream)
        if not first:
            print("first_calls: the forked child timed nothing (no CUDA device?)", file=sys.stderr)
            return 1
        print("# round 0 (JIT cache cold): " + ", ".join(f"{k} {v:.3f}" for k, v in first.items()), flush=True)
        print("| variant | " + " | ".join(first) + " |")
        print("|---|" + "---:|" * len(first))
        for variant in args.variants.split(","):
            if variant == "libs":
                mapped = map_cuda_libraries()
                print(f"# mapped {len(mapped)} libraries: {', '.join(mapped[:8])}...", flush=True)
            if variant == "key":
                from benches.worker import triton_key

                triton_key()
            rounds = [fork_round(upstream) for _ in range(args.rounds)]
            cells = [
                f"{statistics.median(r[k] for r in rounds):.3f} (max {max(r[k] for r in rounds):.3f})" for k in first
            ]
            print(f"| {variant} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerate tests/fixtures/kernels/: the demo's Triton kernels compiled for sm_90 without a GPU.

    python -m studies.kernel_fixtures [--out tests/fixtures/kernels] [--keep-llir]

For the parent and the culprit of four planted steps of the demo upstream (#145 num_stages 3 -> 2,
#131 GROUP_M 8 -> 1, #115 the dropped L2 remap, #122 the dropped fast math), each commit's
`demolib/triton_fa.py` and `demolib/triton_gemm.py` (the demo repository written by
bisector/demo/repo.py, so the SHAs are the demo's own) are imported and their kernels compiled
ahead of time for an H100/H200 (`GPUTarget("cuda", 90, 32)`), specialized as Triton's JIT would
specialize them for the H200 demo's shapes (configs/h200-demo.toml: Triton's own binder on
stand-in tensors, so the divisibility hints and `== 1` constants are the JIT's). Each commit
compiles into its own `TRITON_CACHE_DIR`, laid out as a trial's JIT dir, and is then kept with
bisector.why.kernel_diff.artifacts.keep, exactly as the pipeline keeps a run's artifacts next to its report
(text stages gzipped, cuobjdump and ptxas -v output from the tools in Triton's wheel).

These are NOT artifacts captured on the H200: Triton here may be newer than the H200's (the
formats are the same), and nothing ran. `--keep-llir` keeps the LLVM IR too (the tests do not need
it: 35 KB gzipped per kernel).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bisector.demo.history import COMMITS
from bisector.demo.repo import export_commit, write_demo_repo
from bisector.why.kernel_diff.artifacts import keep

STEPS = {145: "gemm_stages", 131: "gemm_group_m", 115: "fa_remap_dropped", 122: "fastmath_dropped"}
TARGET = ("cuda", 90, 32)
FA = {"B": 2, "H": 32, "S": 4096, "D": 128}  # every H200 FA shape specializes alike (S % 128 == 0)
GEMM = {"M": 8192, "N": 8192, "K": 8192}  # and every GEMM shape (M, N, K % 16 == 0)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _compile(kernel, args: tuple, kwargs: dict) -> None:
    """What `kernel[grid](*args, **kwargs)` compiles on an sm_90 GPU, compiled without one."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = {"debug": False, **kwargs}
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def compile_commit(src: Path, cache: Path, label: str) -> None:
    """Both demo kernels of one exported commit, into `cache` (that commit's TRITON_CACHE_DIR)."""
    import torch
    from triton.runtime.jit import MockTensor

    os.environ["TRITON_CACHE_DIR"] = str(cache)
    cache.mkdir(parents=True, exist_ok=True)
    bf16 = MockTensor(torch.bfloat16)
    fa = _load(src / "demolib" / "triton_fa.py", f"fa_{label}")
    b, h, s, d = FA["B"], FA["H"], FA["S"], FA["D"]
    fast = "FAST_EXP=True" in (src / "demolib" / "triton_fa.py").read_text()
    _compile(
        fa._fwd_kernel,
        (bf16, bf16, bf16, bf16, d**-0.5, h * s * d, s * d, d, b, h, s, s // fa.BLOCK_M),
        dict(
            BLOCK_M=fa.BLOCK_M,
            BLOCK_N=fa.BLOCK_N,
            HEAD_DIM=d,
            FAST_EXP=fast,
            num_warps=fa.NUM_WARPS,
            num_stages=fa.NUM_STAGES,
        ),
    )
    gemm = _load(src / "demolib" / "triton_gemm.py", f"gemm_{label}")
    m, n, k = GEMM["M"], GEMM["N"], GEMM["K"]
    _compile(
        gemm._matmul_kernel,
        (bf16, bf16, bf16, m, n, k, k, 1, n, 1, n, 1),
        dict(
            BLOCK_M=gemm.BLOCK_M,
            BLOCK_N=gemm.BLOCK_N,
            BLOCK_K=gemm.BLOCK_K,
            GROUP_M=gemm.GROUP_M,
            num_warps=gemm.NUM_WARPS,
            num_stages=gemm.NUM_STAGES,
        ),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/kernels"))
    parser.add_argument("--keep-llir", action="store_true")
    args = parser.parse_args(argv)
    index = {}
    # A fixed place, so that the paths in the IR's locations (left out of every comparison) and
    # hence the fixtures' bytes are the same from one regeneration to the next.
    tmp = Path(tempfile.gettempdir()) / "bisector-kernel-fixtures"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        manifest = write_demo_repo(Path(tmp) / "demo")
        shutil.rmtree(args.out, ignore_errors=True)
        args.out.mkdir(parents=True)
        for pr, role in STEPS.items():
            culprit = manifest.sha(role)
            parent = manifest.commits[manifest.commits.index(culprit) - 1]
            index[str(pr)] = {
                "role": role,
                "subject": COMMITS[manifest.prs.index(pr)].subject,
                "parent": parent,
                "culprit": culprit,
            }
            for sha in (parent, culprit):
                dest = args.out / sha[:12]
                if dest.exists():
                    continue
                src = export_commit(manifest.path, sha, Path(tmp) / "src")
                jit = Path(tmp) / "jit" / sha / "triton_cache_dir"  # bisector.runner.env.jit_dir's layout
                print(f"#{pr} {role}: compiling {sha[:12]}", file=sys.stderr)
                compile_commit(src, jit, sha[:12])
                keep(jit.parent, dest)
                if not args.keep_llir:
                    for f in dest.rglob("*.llir.gz"):
                        f.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (args.out / "index.json").write_text(
        json.dumps(
            {
                "compiled": "ahead of time for sm_90 (GPUTarget('cuda', 90, 32)) on a CPU machine, by "
                "studies/kernel_fixtures.py; not captured on an H200",
                "triton": _triton_version(),
                "steps": index,
            },
            indent=2,
        )
        + "\n"
    )
    total = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {total / 1024:.0f} KiB", file=sys.stderr)
    return 0


def _triton_version() -> str:
    import triton

    return triton.__version__


if __name__ == "__main__":
    raise SystemExit(main())

"""GEMM C = A @ B: (M, N, K, dtype, layout, tile) -> inputs, FLOPs, fp32 reference.

`a` is always a logical [M, K] tensor and `b` a logical [K, N] tensor; the layout ("nn", "nt",
"tn", "tt") says which of them is stored transposed (then passed as a transposed view).
Correctness is judged relative to the output's RMS (see benches/correctness.py), so no input
scaling is needed for one tolerance to fit every K.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from benches.suites.dtypes import torch_dtype

NAME = "gemm"
PARAMS = ("M", "N", "K", "dtype", "layout", "tile")


def flops(p: Mapping[str, Any]) -> float:
    return 2.0 * p["M"] * p["N"] * p["K"]


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp8 GEMMs write bf16; the others write their input dtype."""
    return torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype


def make_inputs(p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    dtype = torch_dtype(p.get("dtype", "bf16"))
    layout = p.get("layout", "nn")
    if layout not in ("nn", "nt", "tn", "tt"):
        raise ValueError(f"unknown GEMM layout {layout!r}")
    m, n, k = p["M"], p["N"], p["K"]
    draw = torch.float32 if dtype == torch.float8_e4m3fn else dtype

    def make(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        dims = (cols, rows) if transposed else (rows, cols)
        t = torch.randn(dims, generator=gen, device=device, dtype=draw).to(dtype)
        return t.t() if transposed else t

    a = make(m, k, layout[0] == "t")
    b = make(k, n, layout[1] == "t")
    tile = p.get("tile")
    return {"a": a, "b": b, "tile": tuple(tile) if tile else None, "out_dtype": out_dtype(dtype)}


def reference(inputs: Mapping[str, Any]) -> torch.Tensor:
    return inputs["a"].float() @ inputs["b"].float()


def describe(p: Mapping[str, Any]) -> str:
    tile = f" tile={'x'.join(map(str, p['tile']))}" if p.get("tile") else ""
    return f"M={p['M']} N={p['N']} K={p['K']} {p.get('dtype', 'bf16')} {p.get('layout', 'nn')}{tile}"

"""Flash-attention forward: (B, H, S, D, causal, dtype) -> inputs, FLOPs, fp32 reference.

Tensors are made in the canonical [B, H, S, D] layout; backends convert to their own layout.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from benches.suites.dtypes import torch_dtype

NAME = "fa"
PARAMS = ("B", "H", "S", "D", "causal", "dtype")


def flops(p: Mapping[str, Any]) -> float:
    """4*B*H*S^2*D for the two matmuls of the forward pass; half of it when causal."""
    total = 4.0 * p["B"] * p["H"] * p["S"] * p["S"] * p["D"]
    return total / 2 if p.get("causal", False) else total


def make_inputs(p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
    """Random q, k, v (never zeros) drawn from a per-trial seed, plus the softmax scale."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    dtype = torch_dtype(p.get("dtype", "bf16"))
    draw = torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype
    shape = (p["B"], p["H"], p["S"], p["D"])
    q, k, v = (torch.randn(shape, generator=gen, device=device, dtype=draw) for _ in range(3))
    if draw != dtype:
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    return {"q": q, "k": k, "v": v, "causal": bool(p.get("causal", False)),
            "sm_scale": 1.0 / math.sqrt(p["D"])}


def reference(inputs: Mapping[str, Any]) -> torch.Tensor:
    """fp32 attention, used for the correctness check when the trial has no control."""
    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=inputs["causal"], scale=inputs["sm_scale"])


def describe(p: Mapping[str, Any]) -> str:
    causal = " causal" if p.get("causal") else ""
    return f"B={p['B']} H={p['H']} S={p['S']} D={p['D']} {p.get('dtype', 'bf16')}{causal}"

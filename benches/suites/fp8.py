"""fp8 operands with scales: quantize an fp32 matrix per tensor, per row or per block, and back.

A scale is the dequantization factor (x ~= q * scale), fp32, in the shapes the libraries take:

    A [.., M, K]:  tensor []        row [.., M, 1]   block (1x128)   [.., M, K/128]
    B [.., K, N]:  tensor []        row [.., 1, N]   block (128x128) [.., K/128, N/128]

(torch._scaled_mm's row-wise convention; Primus-Turbo, aiter and DeepSeek hold B as [N, K] with its
block scales [N/128, K/128]: the transposes of the above, `b_scale_nk` in a subject's mapping.)
The checks compare against the exact fp32 product of the dequantized operands.
"""

from __future__ import annotations

import torch

from benches.shapes import BLOCK


def fp8_max(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


def _amax(x: torch.Tensor, scaling: str, operand: str) -> torch.Tensor:
    """Per-scale maxima of |x|; x is [.., rows, cols] of the operand as the scale sees it."""
    a = x.abs()
    if scaling == "tensor":
        return a.amax(dim=(-2, -1))
    if scaling == "row":
        return a.amax(dim=-1, keepdim=True) if operand == "a" else a.amax(dim=-2, keepdim=True)
    if scaling == "block":
        *lead, rows, cols = a.shape
        if operand == "a":  # 1 x 128 along K (the last dim)
            return a.reshape(*lead, rows, cols // BLOCK, BLOCK).amax(dim=-1)
        return a.reshape(*lead, rows // BLOCK, BLOCK, cols // BLOCK, BLOCK).amax(dim=(-3, -1))
    raise ValueError(f"unknown fp8 scaling {scaling!r}")


def expand(scale: torch.Tensor, shape: torch.Size, scaling: str, operand: str) -> torch.Tensor:
    """A scale broadcast to the full operand shape [.., rows, cols]."""
    if scaling == "tensor":
        return scale[..., None, None].expand(shape)
    if scaling == "row":
        return scale.expand(shape)
    if operand == "a":
        return scale.repeat_interleave(BLOCK, dim=-1)[..., : shape[-1]].expand(shape)
    full = scale.repeat_interleave(BLOCK, dim=-2).repeat_interleave(BLOCK, dim=-1)
    return full[..., : shape[-2], : shape[-1]].expand(shape)


def quantize(x: torch.Tensor, dtype: torch.dtype, scaling: str, operand: str) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 x [.., rows, cols] -> (fp8 values, fp32 scale) with each group's max at the format's max."""
    scale = (_amax(x.float(), scaling, operand) / fp8_max(dtype)).clamp_min(1e-12)
    q = (x.float() / expand(scale, x.shape, scaling, operand)).clamp(-fp8_max(dtype), fp8_max(dtype)).to(dtype)
    return q, scale.float()


def dequantize(q: torch.Tensor, scale: torch.Tensor, scaling: str, operand: str) -> torch.Tensor:
    return q.float() * expand(scale, q.shape, scaling, operand)


def transpose_scale(scale: torch.Tensor, scaling: str) -> torch.Tensor:
    """B's scale for B held as [N, K] (`b_scale_nk`): row [1, N] -> [N, 1], block -> [N/128, K/128]."""
    return scale if scaling == "tensor" else scale.transpose(-2, -1).contiguous()


ATTENTION_DESCALES = ("q_descale", "k_descale", "v_descale")


def unit_descales(device: torch.device | str) -> dict[str, torch.Tensor]:
    """Per-tensor q/k/v descales for fp8 attention: shape-[1] fp32 ones, since the suite's fp8
    attention inputs are already the values. Subject and control take these same descales."""
    return {name: torch.ones(1, device=device, dtype=torch.float32) for name in ATTENTION_DESCALES}

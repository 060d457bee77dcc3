"""Torch subjects with the subject calling convention: for CPU runs of the harness and tests."""

from __future__ import annotations

import torch


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)


def matmul(a: torch.Tensor, b: torch.Tensor, tile: tuple[int, int, int] | None = None) -> torch.Tensor:
    return a @ b

"""flash-attention's Triton ops (flash_attn/ops/triton) called in the suites' convention
(benches/real/ops.py). `flash_attn/__init__.py` imports the compiled CUDA extension, which a
checkout without a build lacks and these kernels never use: it is skipped (`skip_package_init`)."""

from __future__ import annotations

from typing import Any

import torch

from benches.real.ops import NormFwdBwd, Rotary, skip_package_init


class LayerNorm(NormFwdBwd):
    pass


class RMSNorm(NormFwdBwd):
    pass


class RotaryEmb(Rotary):
    pass


def _leaf(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().requires_grad_(True)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
    return skip_package_init("flash_attn", "ops.triton.rotary").apply_rotary(x, cos, sin, interleaved=interleaved)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Any, dy: torch.Tensor, eps: float) -> torch.Tensor:
    ln = skip_package_init("flash_attn", "ops.triton.layer_norm")
    xs, w, b = _leaf(x), _leaf(weight), _leaf(bias)
    y = ln.layer_norm_fn(xs, w, b, eps=eps)
    return torch.autograd.grad(y, (xs, w, b), dy)[0]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, bias: Any, dy: torch.Tensor, eps: float) -> torch.Tensor:
    ln = skip_package_init("flash_attn", "ops.triton.layer_norm")
    xs, w = _leaf(x), _leaf(weight)
    y = ln.rms_norm_fn(xs, w, None, eps=eps)
    return torch.autograd.grad(y, (xs, w), dy)[0]

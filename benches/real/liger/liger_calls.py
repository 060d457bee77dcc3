"""Liger-Kernel's ops called in the suites' convention (benches/real/ops.py); the suites as this
config names them. The library is imported from the commit's checkout (`src/`)."""

from __future__ import annotations

from typing import Any

import torch

from benches.real.ops import CrossEntropy, NormFwdBwd


class LayerNorm(NormFwdBwd):
    pass


class RMSNorm(NormFwdBwd):
    pass


class CE(CrossEntropy):
    pass


def _leaf(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().requires_grad_(True)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: Any, dy: torch.Tensor, eps: float) -> torch.Tensor:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    xs, w, b = _leaf(x), _leaf(weight), _leaf(bias)
    y = LigerLayerNormFunction.apply(xs, w, b, eps)
    return torch.autograd.grad(y, (xs, w, b), dy)[0]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, bias: Any, dy: torch.Tensor, eps: float) -> torch.Tensor:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    xs, w = _leaf(x), _leaf(weight)
    # offset 0, llama casting, not in place (dy stays the input it was)
    y = LigerRMSNormFunction.apply(xs, w, eps, 0.0, "llama", False)
    return torch.autograd.grad(y, (xs, w), dy)[0]


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    out = LigerCrossEntropyFunction.apply(logits, target, None)
    return out[0] if isinstance(out, tuple) else out

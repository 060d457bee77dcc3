"""flash-linear-attention's norm modules called in the suites' convention (benches/real/ops.py).
`fla/__init__.py` imports the models and their dependencies (transformers), which the kernels never
use: it is skipped (`skip_package_init`)."""

from __future__ import annotations

import torch

from benches.real.ops import L2NormFwdBwd, NormFwdBwd, skip_package_init


class L2Norm(L2NormFwdBwd):
    pass


class RMSNorm(NormFwdBwd):
    pass


def l2norm(x: torch.Tensor, dy: torch.Tensor, eps: float) -> torch.Tensor:
    mod = skip_package_init("fla", "modules.l2norm")
    xs = x.detach().requires_grad_(True)
    y = mod.l2norm(xs, eps)
    return torch.autograd.grad(y, (xs,), dy)[0]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, bias: object, dy: torch.Tensor, eps: float) -> torch.Tensor:
    mod = skip_package_init("fla", "modules.layernorm")
    xs, w = x.detach().requires_grad_(True), weight.detach().requires_grad_(True)
    y = mod.rms_norm(xs, w, None, eps=eps)
    return torch.autograd.grad(y, (xs, w), dy)[0]

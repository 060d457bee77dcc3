"""Suites for the kernels the real ranges measure, beside attention and GEMM: row norms (forward and
backward), cross-entropy over a vocabulary, rotary embedding and L2 norm. They keep the suite
contract (benches/suites/__init__.py) and bring a torch control, so a trial compares the library
with torch in the same process; the metric that matters is time (they are bound by memory: `bytes`
counts each tensor read or written once), and `flops` is a nominal count so that TFLOP/s stays a
monotone speed.

`skip_package_init` is the adapters' one trick: it imports a library's submodule without running
the package's `__init__`, which in these libraries imports a compiled extension (flash-attention)
or model code and its dependencies (flash-linear-attention) that the kernel under test never needs.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def skip_package_init(package: str, module: str) -> Any:
    """Import `package.module` from the first `package/` folder on sys.path (the commit's checkout,
    which the trial puts first) with `package/__init__.py` left unrun."""
    if package not in sys.modules:
        folder = next((Path(p) / package for p in sys.path if (Path(p) / package / "__init__.py").is_file()), None)
        if folder is None:
            raise ModuleNotFoundError(f"no {package}/ on sys.path", name=package)
        stub = types.ModuleType(package)
        stub.__path__ = [str(folder)]
        stub.__file__ = None
        # submodules read the package's version (`from .. import __version__`): keep that one line
        version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", (folder / "__init__.py").read_text(), re.M)
        if version:
            stub.__version__ = version.group(1)  # type: ignore[attr-defined]
        sys.modules[package] = stub
    return importlib.import_module(f"{package}.{module}")


def _gen(device: str, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _elt(p: Mapping[str, Any]) -> int:
    return torch.empty((), dtype=DTYPES[str(p.get("dtype", "bf16"))]).element_size()


def first(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, (tuple, list)) else result


class NormFwdBwd:
    """LayerNorm or RMSNorm over rows of [T, D], forward and backward in one call (the gradient
    w.r.t. x is the output checked). Subject: `fn(x, weight, bias, dy, eps) -> dx` (bias None for rms)."""

    PARAMS = ("T", "D", "dtype", "kind")

    def make_inputs(self, p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
        g, dt, shape = _gen(device, seed), DTYPES[str(p.get("dtype", "bf16"))], (int(p["T"]), int(p["D"]))
        w = (1.0 + 0.1 * torch.randn(shape[1], generator=g, device=device)).to(dt)
        rms = p.get("kind", "layer") == "rms"
        b = None if rms else (0.1 * torch.randn(shape[1], generator=g, device=device)).to(dt)
        return {
            "x": torch.randn(shape, generator=g, device=device).to(dt),
            "weight": w,
            "bias": b,
            "dy": torch.randn(shape, generator=g, device=device).to(dt),
            "eps": 1e-6,
        }

    def flops(self, p: Mapping[str, Any]) -> float:
        return 16.0 * p["T"] * p["D"]

    def bytes(self, p: Mapping[str, Any]) -> float:
        # forward reads x, writes y; backward reads x and dy, writes dx
        return 5.0 * p["T"] * p["D"] * _elt(p)

    @staticmethod
    def torch_fwd_bwd(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dy: torch.Tensor, eps: float
    ) -> torch.Tensor:
        xr = x.detach().requires_grad_(True)
        if bias is None:
            y = torch.nn.functional.rms_norm(xr, (x.shape[-1],), weight, eps)
        else:
            y = torch.nn.functional.layer_norm(xr, (x.shape[-1],), weight, bias, eps)
        (dx,) = torch.autograd.grad(y, (xr,), dy)
        return dx

    def reference(self, inputs: Mapping[str, Any]) -> torch.Tensor:
        up = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        return self.torch_fwd_bwd(**up)

    def control(self, inputs: Mapping[str, Any]) -> Any:
        return lambda: self.torch_fwd_bwd(**inputs)

    def output(self, result: Any) -> torch.Tensor:
        return first(result).float()

    def tolerance(self, p: Mapping[str, Any]) -> tuple[float, float]:
        return (0.1, 0.05) if p.get("dtype", "bf16") != "fp32" else (1e-3, 1e-3)

    def describe(self, p: Mapping[str, Any]) -> str:
        return f"{p.get('kind', 'layer')} norm fwd+bwd T={p['T']} D={p['D']} {p.get('dtype', 'bf16')}"


class CrossEntropy:
    """Mean cross-entropy of [BT, V] logits against int64 targets, forward only (no gradient kept).
    Subject: `fn(logits, target) -> loss`."""

    PARAMS = ("BT", "V", "dtype")

    def make_inputs(self, p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
        g, dt = _gen(device, seed), DTYPES[str(p.get("dtype", "bf16"))]
        logits = (2.0 * torch.randn((int(p["BT"]), int(p["V"])), generator=g, device=device)).to(dt)
        target = torch.randint(0, int(p["V"]), (int(p["BT"]),), generator=g, device=device)
        return {"logits": logits, "target": target}

    def flops(self, p: Mapping[str, Any]) -> float:
        return 4.0 * p["BT"] * p["V"]

    def bytes(self, p: Mapping[str, Any]) -> float:
        return float(p["BT"] * p["V"] * _elt(p))

    def reference(self, inputs: Mapping[str, Any]) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(inputs["logits"].float(), inputs["target"]).reshape(1)

    def control(self, inputs: Mapping[str, Any]) -> Any:
        logits, target = inputs["logits"], inputs["target"]
        return lambda: torch.nn.functional.cross_entropy(logits, target)

    def output(self, result: Any) -> torch.Tensor:
        return first(result).float().reshape(1)

    def tolerance(self, p: Mapping[str, Any]) -> tuple[float, float]:
        return (0.05, 0.02)

    def describe(self, p: Mapping[str, Any]) -> str:
        return f"cross-entropy BT={p['BT']} V={p['V']} {p.get('dtype', 'bf16')}"


class Rotary:
    """Rotary embedding of x [B, S, H, D] on its first `rotary_dim` features, out of place: GPT-NeoX
    halves, or with `interleaved = true` GPT-J pairs (x[2i], x[2i+1]). Subject: `fn(x, cos, sin) -> out`
    (`fn(x, cos, sin, interleaved=True)` for pairs), cos/sin [S, rotary_dim/2]."""

    PARAMS = ("B", "S", "H", "D", "rotary_dim", "dtype", "interleaved")

    def make_inputs(self, p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
        g, dt = _gen(device, seed), DTYPES[str(p.get("dtype", "bf16"))]
        B, S, H, D, R = (int(p[k]) for k in ("B", "S", "H", "D", "rotary_dim"))
        angle = torch.rand((S, R // 2), generator=g, device=device) * 6.283
        inputs = {
            "x": torch.randn((B, S, H, D), generator=g, device=device).to(dt),
            "cos": torch.cos(angle).to(dt),
            "sin": torch.sin(angle).to(dt),
        }
        if p.get("interleaved", False):  # only then: the non-interleaved subject keeps its 3 arguments
            inputs["interleaved"] = True
        return inputs

    def flops(self, p: Mapping[str, Any]) -> float:
        return 3.0 * p["B"] * p["S"] * p["H"] * p["rotary_dim"]

    def bytes(self, p: Mapping[str, Any]) -> float:
        return (2.0 * p["B"] * p["S"] * p["H"] * p["D"] + p["S"] * p["rotary_dim"]) * _elt(p)

    @staticmethod
    def torch_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
        r = cos.shape[-1] * 2
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        if interleaved:
            pairs = x[..., :r].unflatten(-1, (r // 2, 2))
            x1, x2 = pairs[..., 0], pairs[..., 1]
            rot = torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2)
            return torch.cat([rot, x[..., r:]], dim=-1)
        x1, x2 = x[..., : r // 2], x[..., r // 2 : r]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c, x[..., r:]], dim=-1)

    def reference(self, inputs: Mapping[str, Any]) -> torch.Tensor:
        return self.torch_rotary(
            *(inputs[k].float() for k in ("x", "cos", "sin")), interleaved=bool(inputs.get("interleaved", False))
        )

    def control(self, inputs: Mapping[str, Any]) -> Any:
        x, cos, sin = inputs["x"], inputs["cos"], inputs["sin"]
        interleaved = bool(inputs.get("interleaved", False))
        return lambda: self.torch_rotary(x, cos, sin, interleaved)

    def output(self, result: Any) -> torch.Tensor:
        return first(result).float()

    def tolerance(self, p: Mapping[str, Any]) -> tuple[float, float]:
        return (0.05, 0.02)

    def describe(self, p: Mapping[str, Any]) -> str:
        return (
            f"rotary{' interleaved' if p.get('interleaved', False) else ''} B={p['B']} S={p['S']} H={p['H']} "
            f"D={p['D']} rotary_dim={p['rotary_dim']} {p.get('dtype', 'bf16')}"
        )


class L2NormFwdBwd:
    """L2 normalization of rows of [T, D], forward and backward in one call (dx checked).
    Subject: `fn(x, dy, eps) -> dx`."""

    PARAMS = ("T", "D", "dtype")

    def make_inputs(self, p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
        g, dt, shape = _gen(device, seed), DTYPES[str(p.get("dtype", "bf16"))], (int(p["T"]), int(p["D"]))
        return {
            "x": torch.randn(shape, generator=g, device=device).to(dt),
            "dy": torch.randn(shape, generator=g, device=device).to(dt),
            "eps": 1e-6,
        }

    def flops(self, p: Mapping[str, Any]) -> float:
        return 10.0 * p["T"] * p["D"]

    def bytes(self, p: Mapping[str, Any]) -> float:
        return 5.0 * p["T"] * p["D"] * _elt(p)

    @staticmethod
    def torch_fwd_bwd(x: torch.Tensor, dy: torch.Tensor, eps: float) -> torch.Tensor:
        xr = x.detach().requires_grad_(True)
        xf = xr.float()
        y = (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps)).to(x.dtype)
        (dx,) = torch.autograd.grad(y, (xr,), dy)
        return dx

    def reference(self, inputs: Mapping[str, Any]) -> torch.Tensor:
        return self.torch_fwd_bwd(inputs["x"].float(), inputs["dy"].float(), inputs["eps"])

    def control(self, inputs: Mapping[str, Any]) -> Any:
        return lambda: self.torch_fwd_bwd(**inputs)

    def output(self, result: Any) -> torch.Tensor:
        return first(result).float()

    def tolerance(self, p: Mapping[str, Any]) -> tuple[float, float]:
        return (0.05, 0.05)

    def describe(self, p: Mapping[str, Any]) -> str:
        return f"l2norm fwd+bwd T={p['T']} D={p['D']} {p.get('dtype', 'bf16')}"

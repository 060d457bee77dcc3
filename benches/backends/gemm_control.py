"""torch as the GEMM control, on the CPU and on NVIDIA, for every GEMM shape.

On NVIDIA, scaled fp8 goes through torch._scaled_mm: per tensor (0-dim scales) and per row
([M, 1] and [1, N], e4m3 only) as it takes them; blockwise (1x128 on A, 128x128 on B) through
torch.nn.functional.scaled_mm's BlockWise1x128 / BlockWise128x128 recipes where this torch has
them (cuBLAS from CUDA 12.9 on Hopper: A's scales outer-dim-major, as torch's own tests pass
them). Where _scaled_mm cannot take the shape (e5m2 x e5m2, row-wise e5m2, blockwise on an older
torch or cuBLAS, batched or grouped fp8), the control dequantizes both operands to bf16 in prepare
and times a bf16 cuBLAS matmul: the record's `control_impl` says which ran and why.
On the CPU there is no fp8 matmul: scaled operands are dequantized to fp32 in prepare.
Grouped GEMMs are one matmul per group, timed together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from benches.backends.base import BackendUnavailable, Prepared, prepared
from benches.suites import fp8
from benches.suites.gemm import grouped_matmul, operands_fp32

E4M3 = torch.float8_e4m3fn


def _plain(a: torch.Tensor, b: torch.Tensor, inputs: Mapping[str, Any], impl: str) -> Prepared:
    sizes = inputs.get("group_sizes")
    if sizes is not None:
        counts = sizes.tolist()
        return prepared(lambda: grouped_matmul(a, b, counts), impl=impl + ", one matmul per group")
    return prepared(lambda: torch.matmul(a, b), impl=impl)


def cpu(inputs: Mapping[str, Any]) -> Prepared:
    a, b = inputs["a"], inputs["b"]
    if inputs.get("scaling"):
        a, b = operands_fp32(inputs)
        return _plain(a, b, inputs, "dequantized to fp32 (untimed), fp32 matmul")
    if a.dtype == E4M3:  # unit-scaled fp8: no fp8 matmul on CPU, upcast outside the timing
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    return _plain(a, b, inputs, "matmul")


def _dequantized(inputs: Mapping[str, Any], why: str) -> Prepared:
    a, b = (x.to(torch.bfloat16) for x in operands_fp32(inputs))
    return _plain(a, b, inputs, f"dequantized to bf16 (untimed), bf16 matmul: {why}")


def scaled_mm_call(inputs: Mapping[str, Any]) -> tuple[Any, str] | str:
    """(zero-arg call, impl) for a 2-D scaled fp8 GEMM through torch's scaled matmul, or why not."""
    a, b, scaling = inputs["a"], inputs["b"], inputs["scaling"]
    sa, sb = inputs["a_scale"], inputs["b_scale"]
    out = inputs.get("out_dtype", torch.bfloat16)
    if a.dtype != E4M3 and b.dtype != E4M3:
        return "cuBLAS has no e5m2 x e5m2 fp8 matmul"
    if not hasattr(torch, "_scaled_mm"):
        return "this torch has no torch._scaled_mm"
    a, b = a.contiguous(), b.transpose(-2, -1).contiguous().transpose(-2, -1)  # B column-major
    if scaling == "tensor":
        return (lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out)), "torch._scaled_mm tensor-wise"
    if scaling == "row":
        if a.dtype != E4M3 or b.dtype != E4M3:
            return "torch._scaled_mm's row-wise scaling takes e4m3 only"
        return (lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out)), "torch._scaled_mm row-wise"
    f = torch.nn.functional
    kinds = getattr(f, "ScalingType", None)
    row_kind, block_kind = (
        _member(kinds, "BlockWise1x128", "Blockwise_1x128"),
        _member(kinds, "BlockWise128x128", "Blockwise_128x128"),
    )
    if not hasattr(f, "scaled_mm") or row_kind is None or block_kind is None:
        return "this torch's scaled_mm has no BlockWise1x128 / BlockWise128x128 recipes"
    sa_outer = sa.t().contiguous().t()  # 1x128 scales outer-dim-major
    sb_cols = sb.t().contiguous().t()
    return (
        lambda: f.scaled_mm(a, b, sa_outer, row_kind, sb_cols, block_kind, output_dtype=out)
    ), "torch.nn.functional.scaled_mm BlockWise1x128 x BlockWise128x128"


def _member(enum: Any, *names: str) -> Any:
    """The first of `names` that `enum` has (torch renamed the recipes between releases), or None."""
    return next((getattr(enum, n) for n in names if enum is not None and hasattr(enum, n)), None)


def cuda(inputs: Mapping[str, Any]) -> Prepared:
    a, b = inputs["a"], inputs["b"]
    scaling = inputs.get("scaling")
    if scaling:
        if a.dim() != 2 or inputs.get("group_sizes") is not None:
            return _dequantized(inputs, "batched / grouped fp8 is not timed through _scaled_mm here")
        got = scaled_mm_call(inputs)
        if isinstance(got, str):
            return _dequantized(inputs, got)
        run, impl = got
        try:
            run()  # once, untimed: an older cuBLAS refuses a recipe at the call, not at import
        except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:  # torch's checks raise any of these
            return _dequantized(inputs, f"{impl} refused: {str(exc).splitlines()[0][:160]}")
        return prepared(run, impl=impl)
    if a.dtype == E4M3:  # unit-scaled fp8 (dtype "fp8"), as this control always ran it
        if not hasattr(torch, "_scaled_mm"):
            raise BackendUnavailable("torch_cuda", "this torch has no torch._scaled_mm for fp8")
        a, b = a.contiguous(), b.t().contiguous().t()
        one = torch.ones((), device=a.device, dtype=torch.float32)
        out = inputs.get("out_dtype", torch.bfloat16)
        return prepared(
            lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=out), impl="torch._scaled_mm unit scales"
        )
    return _plain(a, b, inputs, "cuBLAS matmul")


def expand_scales(inputs: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """A's and B's scales as per-row [M, 1] and per-column [N, 1] vectors (aiter's a8w8 convention)."""
    scaling, a, b = inputs["scaling"], inputs["a"], inputs["b"]
    m, n = a.shape[-2], b.shape[-1]
    sa, sb = inputs["a_scale"], inputs["b_scale"]
    if scaling == "tensor":
        return sa.reshape(1, 1).expand(m, 1).contiguous(), sb.reshape(1, 1).expand(n, 1).contiguous()
    if scaling == "row":
        return sa.reshape(m, 1).contiguous(), fp8.transpose_scale(sb, "row").reshape(n, 1)
    raise ValueError("blockwise scales do not expand to rows")

"""aiter's calls for the attention and GEMM shapes beyond dense bf16: the operands each takes, built
without a GPU (unit-tested on the CPU). NOT YET RUN ON AMD HARDWARE.

Read at ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879:
- aiter/ops/mha.py `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
  max_seqlen_k, ..., softmax_scale=None, ..., causal=False, ...)`: q [total_q, H, D], k, v
  [total_k, Hkv, D], int32 cu_seqlens [B+1]; GQA by fewer K/V heads; causal bottom-right. It first
  offers the call to FlyDSL (`flydsl_flash_attn_varlen_func`), which takes it on gfx1250 for
  D_q = 192, D_v = 128, bf16, no block_table: that case is refused as a control (FlyDSL may be the
  commit under test).
- `mha_batch_prefill_func(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q,
  max_seqlen_k, ..., softmax_scale=None, ..., causal=False, ..., kv_last_page_lens=None, ...)`
  with the "linear" paged cache k, v [pages, page_size, Hkv, D] (op_tests/test_batch_prefill.py):
  the paged control. No FlyDSL path in the code read.
- aiter/ops/gemm_op_a8w8.py `gemm_a8w8(XQ [M, K], WQ [N, K], x_scale [M, 1], w_scale [N, 1],
  bias, dtype)` and `gemm_a8w8_blockscale(XQ, WQ, x_scale [M, K/128], w_scale [N/128, K/128],
  dtype)` (op_tests/test_gemm_a8w8_blockscale.py); fp8 is `aiter.dtypes.fp8`, e4m3fn on gfx950.
  The blockscale dispatch goes to CK, CK-tile or Triton, not FlyDSL.
- No fp8 batched or grouped GEMM control: `batched_gemm_a8w8` is exercised with int8 operands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from benches.backends.base import BackendUnavailable
from benches.backends.gemm_control import expand_scales
from benches.suites import attn_layout as lay


@dataclass(frozen=True)
class Call:
    """One aiter function and what to pass it: fn name (an attribute of `aiter`), args, kwargs."""

    fn: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Callable[[Any], torch.Tensor]
    what: str


def varlen_goes_to_flydsl(gfx: str, q: torch.Tensor, v: torch.Tensor, paged: bool) -> bool:
    """aiter's flash_attn_varlen_func hands this call to FlyDSL (its own gate, as read)."""
    return gfx == "gfx1250" and q.shape[-1] == 192 and v.shape[-1] == 128 and q.dtype == torch.bfloat16 and not paged


def _first(o: Any) -> torch.Tensor:
    return o[0] if isinstance(o, (tuple, list)) else o


def attention(inputs: Mapping[str, Any], gfx: str) -> Call | None:
    """The varlen or paged call for a shape (None: a dense shape, which `flash_attn_func` takes)."""
    g = inputs["geometry"]
    if g.dense_q and g.dense_k and not g.page_size:
        return None
    q = lay.as_thd(inputs["q"], g.dense_q).contiguous()
    scale, causal = inputs["sm_scale"], inputs["causal"]

    def output(o: Any) -> torch.Tensor:
        return lay.from_thd(_first(o), g.dense_q, g.batch)

    if g.page_size:
        args = (q, inputs["k_cache"], inputs["v_cache"], inputs["cu_seqlens_q"], inputs["kv_indptr"],
                inputs["kv_indices"], inputs["max_seqlen_q"], inputs["max_seqlen_k"])
        return Call("mha_batch_prefill_func", args, {"softmax_scale": scale, "causal": causal,
                                                     "kv_last_page_lens": inputs["kv_last_page_len"]},
                    output, f"mha_batch_prefill_func page={g.page_size}")
    k, v = (lay.as_thd(inputs[n], g.dense_k).contiguous() for n in ("k", "v"))
    if varlen_goes_to_flydsl(gfx, q, v, paged=False):
        raise BackendUnavailable("aiter", "flash_attn_varlen_func hands this shape to FlyDSL (gfx1250, D 192/128, "
                                          "bf16); FlyDSL may be the commit under test, so it cannot be the control")
    args = (q, k, v, inputs["cu_seqlens_q"], inputs["cu_seqlens_k"], inputs["max_seqlen_q"], inputs["max_seqlen_k"])
    return Call("flash_attn_varlen_func", args, {"softmax_scale": scale, "causal": causal}, output,
                "flash_attn_varlen_func")


def scaled_gemm(inputs: Mapping[str, Any], fp8: torch.dtype | None) -> Call:
    """gemm_a8w8 (tensor / row scales as per-row vectors) or gemm_a8w8_blockscale for a scaled shape."""
    a, b, scaling = inputs["a"], inputs["b"], inputs["scaling"]
    if a.dim() != 2 or inputs.get("group_sizes") is not None:
        raise BackendUnavailable("aiter", "no batched or grouped fp8 GEMM control in the aiter code read "
                                          "(batched_gemm_a8w8 is exercised with int8)")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise BackendUnavailable("aiter", "aiter's a8w8 GEMMs take e4m3 on both sides")
    if fp8 is not None and fp8 != torch.float8_e4m3fn:
        raise BackendUnavailable("aiter", f"aiter's fp8 here is {fp8}; the scaled shapes are e4m3fn (gfx950)")
    xq, wq = a.contiguous(), b.transpose(-2, -1).contiguous()
    out = inputs.get("out_dtype", torch.bfloat16)
    (m, k), n = a.shape, b.shape[-1]
    if scaling == "block":
        x_scale = inputs["a_scale"].contiguous()
        w_scale = inputs["b_scale"].transpose(-2, -1).contiguous()
        return Call("gemm_a8w8_blockscale", (xq, wq, x_scale, w_scale, out), {}, _first,
                    f"gemm_a8w8_blockscale M={m} N={n} K={k}")
    x_scale, w_scale = expand_scales(inputs)
    return Call("gemm_a8w8", (xq, wq, x_scale, w_scale, None, out), {}, _first,
                f"gemm_a8w8 {scaling}-scaled M={m} N={n} K={k}")

"""aiter's calls for the attention and GEMM shapes beyond dense bf16: the operands each takes, built
without a GPU (unit-tested on the CPU). NOT YET RUN ON AMD HARDWARE.

Read at ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879:
- aiter/ops/mha.py `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
  max_seqlen_k, ..., softmax_scale=None, ..., causal=False, ...)`: q [total_q, H, D], k, v
  [total_k, Hkv, D], int32 cu_seqlens [B+1]; GQA by fewer K/V heads; causal bottom-right. Its body
  runs `from .flydsl.fmha_kernels import flydsl_flash_attn_varlen_func` on every call (before any
  GPU check), which imports the top-level `flydsl` package: in a trial, the FlyDSL commit under
  test. So the control does not call it: it calls what it ends in on gfx950 when FlyDSL declines
  and CK is built (ENABLE_CK), `FlashAttnVarlenFunc.apply(...)`, the same positional arguments
  `flash_attn_varlen_func` passes, bound by name to `FlashAttnVarlenFunc.forward`'s signature
  (`varlen_args`), so a reordered or extended signature is followed or refused, never misread.
- fp8 dense and varlen attention: `flash_attn_fp8_pertensor_func(q, k, v, q_descale, k_descale,
  v_descale, causal=False, window_size=..., softmax_scale=None, sink_ptr=None)` and
  `flash_attn_varlen_fp8_pertensor_func(q, k, v, q_descale, k_descale, v_descale, cu_seqlens_q,
  cu_seqlens_k, max_seqlen_q, max_seqlen_k, ..., causal=False, ..., softmax_scale=None, ...)`, the
  calls of op_tests/test_mha_fp8.py and test_mha_varlen_fp8.py; neither imports FlyDSL. The plain
  entry points hard-code the descales to None (`FlashAttnFunc.forward`, `FlashAttnVarlenFunc.forward`)
  and would time CK's no-scale fp8 kernel, not the per-tensor one the subject is given descales for.
- `mha_batch_prefill_func(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q,
  max_seqlen_k, ..., softmax_scale=None, ..., causal=False, ..., kv_last_page_lens=None, ...,
  q_descale=None, k_descale=None, v_descale=None, kv_block_descale=None, ...)` with the "linear"
  paged cache k, v [pages, page_size, Hkv, D], or [pages, Hkv, D] for page size 1
  (op_tests/test_batch_prefill.py): the paged control. It imports no FlyDSL. As in aiter's tests,
  `kv_page_indices` carries 256 zeros past the last valid index ("a batch_prefill ABI requirement:
  the kernel may speculatively read up to 256 entries past the last valid page index"), and fp8
  takes per-tensor descales ([1] fp32; the suite's fp8 values are already quantized, so 1.0).
  Page sizes, dtypes and head sizes it cannot run are refused before (benches/control_limits.py).
- aiter/ops/gemm_op_a8w8.py `gemm_a8w8(XQ [M, K], WQ [N, K], x_scale [M, 1], w_scale [N, 1],
  bias, dtype)` and `gemm_a8w8_blockscale(XQ, WQ, x_scale [M, K/128], w_scale [N/128, K/128],
  dtype)` (op_tests/test_gemm_a8w8_blockscale.py); fp8 is `aiter.dtypes.fp8`, e4m3fn on gfx950.
  The blockscale dispatch goes to CK, CK-tile or Triton, not FlyDSL.
- No fp8 batched or grouped GEMM control: `batched_gemm_a8w8` is exercised with int8 operands.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from benches import control_limits
from benches.backends.base import BackendUnavailable, from_layout, to_layout
from benches.backends.gemm_control import expand_scales
from benches.suites import attn_layout as lay
from benches.suites import fp8

DENSE_FP8 = "flash_attn_fp8_pertensor_func"  # aiter/ops/mha.py: q, k, v, q/k/v_descale, causal=, softmax_scale=
VARLEN_FP8 = "flash_attn_varlen_fp8_pertensor_func"  # q, k, v, descales, cu_seqlens_q/k, max_seqlen_q/k, ...
VARLEN_CK = "ops.mha.FlashAttnVarlenFunc"  # under `aiter`: what flash_attn_varlen_func ends in on CK
KV_INDEX_PAD = 256  # zeros past the last page index: batch prefill may read that far ahead


@dataclass(frozen=True)
class Call:
    """One aiter function and what to pass it: fn (an attribute path under `aiter`), args, kwargs.
    `autograd`: fn is a torch.autograd.Function whose `apply` takes `forward`'s parameters by
    position; kwargs then name them (bound by `varlen_args`)."""

    fn: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Callable[[Any], torch.Tensor]
    what: str
    autograd: bool = False


def varlen_args(forward: Callable[..., Any], named: Mapping[str, Any]) -> tuple[Any, ...]:
    """`FlashAttnVarlenFunc.apply`'s positional arguments: `forward`'s parameters after ctx, each
    from `named` or its default. A parameter with no default that we do not know, or a name we pass
    that it no longer takes, refuses the control rather than shift every argument after it."""
    params = list(inspect.signature(forward).parameters.values())[1:]
    taken = {p.name for p in params}
    gone = sorted(set(named) - taken)
    if gone:
        raise BackendUnavailable("aiter", f"this aiter's FlashAttnVarlenFunc.forward no longer takes {', '.join(gone)}")
    out = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise BackendUnavailable("aiter", f"FlashAttnVarlenFunc.forward's {p.name!r} is not positional")
        if p.name not in named and p.default is p.empty:
            raise BackendUnavailable(
                "aiter", f"this aiter's FlashAttnVarlenFunc.forward takes {p.name!r}, which the control does not know"
            )
        out.append(named.get(p.name, p.default))
    return tuple(out)


def _first(o: Any) -> torch.Tensor:
    return o[0] if isinstance(o, (tuple, list)) else o


def attention(inputs: Mapping[str, Any]) -> Call | None:
    """The varlen or paged call for a shape (None: a dense shape, which `flash_attn_func` takes).
    Raises BackendUnavailable for what aiter cannot run (benches/control_limits.py)."""
    g = inputs["geometry"]
    refused = control_limits.aiter_attention_refusal(g)
    if refused:
        raise BackendUnavailable("aiter", refused[1])
    is_fp8 = g.dtype == "fp8"
    if g.dense_q and g.dense_k and not g.page_size:
        return dense_fp8(inputs) if is_fp8 else None
    q = lay.as_thd(inputs["q"], g.dense_q).contiguous()
    scale, causal = inputs["sm_scale"], inputs["causal"]

    def output(o: Any) -> torch.Tensor:
        return lay.from_thd(_first(o), g.dense_q, g.batch)

    if g.page_size:
        return paged(inputs, q, output)
    k, v = (lay.as_thd(inputs[n], g.dense_k).contiguous() for n in ("k", "v"))
    if is_fp8:
        descales = fp8.unit_descales(q.device)
        args = (
            q,
            k,
            v,
            *(descales[n] for n in fp8.ATTENTION_DESCALES),
            inputs["cu_seqlens_q"],
            inputs["cu_seqlens_k"],
            inputs["max_seqlen_q"],
            inputs["max_seqlen_k"],
        )
        return Call(
            VARLEN_FP8, args, {"causal": causal, "softmax_scale": scale}, output, f"{VARLEN_FP8} (per-tensor descales)"
        )
    # What flash_attn_varlen_func passes FlashAttnVarlenFunc.apply, by name (its defaults for the rest).
    named = {
        "q": q,
        "k": k,
        "v": v,
        "cu_seqlens_q": inputs["cu_seqlens_q"],
        "cu_seqlens_k": inputs["cu_seqlens_k"],
        "max_seqlen_q": inputs["max_seqlen_q"],
        "max_seqlen_k": inputs["max_seqlen_k"],
        "min_seqlen_q": 0,
        "dropout_p": 0.0,
        "softmax_scale": scale,
        "logits_soft_cap": 0.0,
        "causal": causal,
        "window_size": (-1, -1, 0),
        "bias": None,
        "alibi_slopes": None,
        "deterministic": False,
        "return_lse": False,
        "return_softmax": False,
        "block_table": None,
        "out": None,
        "is_grad_enabled": False,
        "cu_seqlens_q_padded": None,
        "cu_seqlens_k_padded": None,
        "is_v3_atomic_fp32": True,
        "how_v3_bf16_cvt": 1,
        "sink_ptr": None,
    }
    return Call(
        VARLEN_CK, (), named, output, "FlashAttnVarlenFunc (CK, flash_attn_varlen_func without FlyDSL)", autograd=True
    )


def dense_fp8(inputs: Mapping[str, Any]) -> Call:
    """fp8 dense attention as aiter's op_tests/test_mha_fp8.py calls it: q, k, v as [B, S, H, D],
    per-tensor descales positional after them."""
    q, k, v = (to_layout(inputs[n], "bshd") for n in ("q", "k", "v"))
    descales = fp8.unit_descales(q.device)
    args = (q, k, v, *(descales[n] for n in fp8.ATTENTION_DESCALES))
    return Call(
        DENSE_FP8,
        args,
        {"causal": inputs["causal"], "softmax_scale": inputs["sm_scale"]},
        lambda o: from_layout(_first(o), "bshd"),
        f"{DENSE_FP8} (per-tensor descales)",
    )


def paged(inputs: Mapping[str, Any], q: torch.Tensor, output: Callable[[Any], torch.Tensor]) -> Call:
    """mha_batch_prefill_func as aiter's tests call it: page size 1 as a [tokens, Hkv, D] cache, the
    page list padded, unit per-tensor descales for fp8."""
    g = inputs["geometry"]
    k_cache, v_cache = inputs["k_cache"], inputs["v_cache"]
    if g.page_size == 1:
        k_cache, v_cache = (c.reshape(c.shape[0], *c.shape[2:]) for c in (k_cache, v_cache))
    indices = torch.nn.functional.pad(inputs["kv_indices"], (0, KV_INDEX_PAD), value=0)
    kwargs: dict[str, Any] = {
        "softmax_scale": inputs["sm_scale"],
        "causal": inputs["causal"],
        "kv_last_page_lens": inputs["kv_last_page_len"],
    }
    if q.dtype == torch.float8_e4m3fn:
        kwargs.update(fp8.unit_descales(q.device))
    args = (
        q,
        k_cache,
        v_cache,
        inputs["cu_seqlens_q"],
        inputs["kv_indptr"],
        indices,
        inputs["max_seqlen_q"],
        inputs["max_seqlen_k"],
    )
    return Call("mha_batch_prefill_func", args, kwargs, output, f"mha_batch_prefill_func page={g.page_size}")


def scaled_gemm(inputs: Mapping[str, Any], fp8: torch.dtype | None) -> Call:
    """gemm_a8w8 (tensor / row scales as per-row vectors) or gemm_a8w8_blockscale for a scaled shape."""
    a, b, scaling = inputs["a"], inputs["b"], inputs["scaling"]
    if a.dim() != 2 or inputs.get("group_sizes") is not None:
        raise BackendUnavailable(
            "aiter",
            "no batched or grouped fp8 GEMM control in the aiter code read (batched_gemm_a8w8 is exercised with int8)",
        )
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
        return Call(
            "gemm_a8w8_blockscale",
            (xq, wq, x_scale, w_scale, out),
            {},
            _first,
            f"gemm_a8w8_blockscale M={m} N={n} K={k}",
        )
    x_scale, w_scale = expand_scales(inputs)
    return Call(
        "gemm_a8w8", (xq, wq, x_scale, w_scale, None, out), {}, _first, f"gemm_a8w8 {scaling}-scaled M={m} N={n} K={k}"
    )

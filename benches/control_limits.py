"""What a control library or a subject adapter cannot run, known from a shape's parameters before
any trial.

Read by `bisector check-config` (a refused shape is a config error: `file: key: problem`, exit 2)
and by the control's own `prepare` in the trial (the same words, as the control's `unavailable`).
A control that fails anyway at run time is recorded as the control's, never as the subject's
(benches/trial.py). Pure Python over benches.shapes: no torch, no vendor import.

aiter's attention, read at ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879:
- CK's fmha kernels take fp16 / bf16 / fp8, head sizes up to 256 (aiter/ops/mha.py's dispatch,
  CK's generated instances): no fp32 attention, no D over 256.
- `mha_batch_prefill_func` (the paged control) raises "Batch prefill requires head size divisible
  by vector size" unless D is a multiple of 16 bytes // element size: 8 for bf16 / fp16, 16 for fp8.
- CK builds batch-prefill kernels for page sizes 1, 16 and 1024 only (op_tests/test_batch_prefill.py
  runs exactly these; any other fails with "no matching kernel found").
- fp8 dense and varlen attention go through the per-tensor entry points
  (`flash_attn_fp8_pertensor_func`, `flash_attn_varlen_fp8_pertensor_func`). aiter's own tests of
  them (op_tests/test_mha_fp8.py, test_mha_varlen_fp8.py) run D = 128 only; the fp8 ASM kernels
  (`is_fmha_v3_fp8`) take D = 128, or 256 on gfx950 for dense shapes with power-of-two GQA ratios
  only; the CK fp8 instances of the pinned composable_kernel were not readable here. So fp8 dense
  takes D = 128 or 256, fp8 varlen D = 128.

FlyDSL's subject adapter, read at ROCm/FlyDSL@11c4174d82b7491c2d08d5828a254183f2a8b959
(benches/backends/flydsl.py): it passes dense attention and a plain 2-D GEMM only; fp8 attention
is gfx950's dense kernel built for head_dim 128 (`_build_dense_fp8`), with no varlen or paged KV.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benches import shapes

AITER_PAGE_SIZES = (1, 16, 1024)
AITER_FP8_DENSE_HEAD_DIMS = (128, 256)
AITER_FP8_VARLEN_HEAD_DIMS = (128,)
FLYDSL_FP8_HEAD_DIM = 128
FLYDSL_GEMM_DTYPES = ("bf16", "fp16", "fp8")
AITER_MAX_HEAD_DIM = 256
_VECTOR_BYTES = 16  # CK's dwordx4 loads: a batch-prefill head must be whole vectors
_ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


def aiter_attention_refusal(g: shapes.Attention) -> tuple[str, str] | None:
    """(shape key, why) when aiter's attention cannot run this geometry, else None."""
    if g.dtype not in _ELEMENT_BYTES:
        return "dtype", f"aiter's attention kernels take bf16, fp16 or fp8, not {g.dtype}"
    if g.head_dim > AITER_MAX_HEAD_DIM:
        return "D", f"aiter's attention kernels take head sizes up to {AITER_MAX_HEAD_DIM}, got {g.head_dim}"
    if not g.page_size:
        if g.dtype != "fp8":
            return None
        dense = g.dense_q and g.dense_k
        allowed = AITER_FP8_DENSE_HEAD_DIMS if dense else AITER_FP8_VARLEN_HEAD_DIMS
        if g.head_dim in allowed:
            return None
        entry = "flash_attn_fp8_pertensor_func" if dense else "flash_attn_varlen_fp8_pertensor_func"
        return "D", (
            f"aiter's fp8 {'dense' if dense else 'varlen'} attention ({entry}) has kernels for head sizes "
            f"{', '.join(map(str, allowed))} only, got {g.head_dim}"
        )
    if g.page_size not in AITER_PAGE_SIZES:
        return "page_size", (
            f"aiter's batch prefill (the paged control) has kernels for page sizes "
            f"{', '.join(map(str, AITER_PAGE_SIZES))} only, got {g.page_size}"
        )
    vector = _VECTOR_BYTES // _ELEMENT_BYTES[g.dtype]
    if g.head_dim % vector:
        return (
            "D",
            f"aiter's batch prefill needs a {g.dtype} head size that is a multiple of {vector}, got {g.head_dim}",
        )
    return None


def refusal(control: str, suite: str, params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(shape key, why) when `control` cannot run this built-in suite's shape, else None."""
    if control == "aiter" and suite == "fa":
        return aiter_attention_refusal(shapes.attention(params))
    return None


def flydsl_attention_refusal(g: shapes.Attention) -> tuple[str, str] | None:
    """(shape key, why) when the flydsl adapter does not pass this attention geometry on."""
    if g.page_size:
        return "page_size", "the flydsl adapter passes dense attention only (no varlen, no paged KV)"
    if not (g.dense_q and g.dense_k):
        return "varlen", "the flydsl adapter passes dense attention only (no varlen, no paged KV)"
    if g.dtype == "fp8" and g.head_dim != FLYDSL_FP8_HEAD_DIM:
        return "D", (
            f"FlyDSL's fp8 attention is built for head size {FLYDSL_FP8_HEAD_DIM} only (gfx950 dense), got {g.head_dim}"
        )
    return None


_PLAIN_GEMM = "the flydsl adapter passes a plain 2-D GEMM only (no scales, batches or groups)"


def flydsl_gemm_refusal(
    scaling: str | None, batched: bool, grouped: bool, dtype_a: str, dtype_b: str
) -> tuple[str, str] | None:
    """(shape key, why) when the flydsl adapter does not pass this GEMM on (from the shape in
    `bisector check-config`, from the inputs in the trial)."""
    for key, refused in (("scaling", bool(scaling)), ("batch", batched), ("groups", grouped)):
        if refused:
            return key, _PLAIN_GEMM
    if dtype_a not in FLYDSL_GEMM_DTYPES or dtype_b != dtype_a:
        return "dtype", (
            f"compile_preshuffle_gemm takes {', '.join(FLYDSL_GEMM_DTYPES)} on both sides, got {dtype_a} x {dtype_b}"
        )
    return None


def subject_refusal(adapter: str, suite: str, params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(shape key, why) when a subject adapter cannot pass this built-in suite's shape on, else None."""
    if adapter != "flydsl":
        return None
    if suite == "fa":
        return flydsl_attention_refusal(shapes.attention(params))
    if suite == "gemm":
        g = shapes.gemm(params)
        return flydsl_gemm_refusal(g.scaling, g.batched, g.grouped, g.dtype_a, g.dtype_b)
    return None

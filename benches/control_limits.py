"""What a control library cannot run, known from a shape's parameters before any trial.

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
"""

from __future__ import annotations

from typing import Any, Mapping

from benches import shapes

AITER_PAGE_SIZES = (1, 16, 1024)
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
        return None
    if g.page_size not in AITER_PAGE_SIZES:
        return "page_size", (f"aiter's batch prefill (the paged control) has kernels for page sizes "
                             f"{', '.join(map(str, AITER_PAGE_SIZES))} only, got {g.page_size}")
    vector = _VECTOR_BYTES // _ELEMENT_BYTES[g.dtype]
    if g.head_dim % vector:
        return "D", f"aiter's batch prefill needs a {g.dtype} head size that is a multiple of {vector}, got {g.head_dim}"
    return None


def refusal(control: str, suite: str, params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(shape key, why) when `control` cannot run this built-in suite's shape, else None."""
    if control == "aiter" and suite == "fa":
        return aiter_attention_refusal(shapes.attention(params))
    return None

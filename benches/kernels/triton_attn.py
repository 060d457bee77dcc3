"""Attention forward in Triton over packed sequences: variable lengths, GQA, a paged KV cache.

Entry point (flash-attention's names, reached through a subject's declared mapping):

    varlen_attention(q, k, v, cu_seqlens_q, seqused_k, max_seqlen_q, softmax_scale, causal,
                     cu_seqlens_k=None, block_table=None, out=None) -> o

q [total_q, H, D]; k, v either packed [total_k, Hkv, D] with cu_seqlens_k, or a paged cache
[pages, page_size, Hkv, D] read through block_table [B, max pages]; seqused_k [B] the keys each
sequence uses. Causal masks are aligned bottom-right (query i of a sequence with q queries and k
keys sees keys 0 .. i + k - q). One program per (query block, sequence, head); a paged key's
address is looked up key by key, so any page size works. Written as the H200 decode subject of
configs/h200-decode.toml; it runs under TRITON_INTERPRET=1 at small fp16 sizes in the tests.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _attn_fwd(
    Q,
    K,
    V,
    O,
    CU_Q,
    CU_K,
    SEQUSED_K,
    BLOCK_TABLE,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_bt,
    group,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    PAGED: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    q_start = tl.load(CU_Q + seq)
    q_len = tl.load(CU_Q + seq + 1) - q_start
    if pid_m * BLOCK_M >= q_len:
        return
    k_len = tl.load(SEQUSED_K + seq)
    kv_head = head // group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < q_len
    q_ptrs = Q + (q_start + offs_m)[:, None].to(tl.int64) * stride_qt + head * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    shift = k_len - q_len  # bottom-right: query i sees keys <= i + shift
    hi = k_len
    if CAUSAL:
        hi = tl.minimum(k_len, (pid_m + 1) * BLOCK_M + shift)
    if not PAGED:
        k_start = tl.load(CU_K + seq)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < k_len
        if PAGED:
            page = tl.load(BLOCK_TABLE + seq * stride_bt + cols // PAGE, mask=col_ok, other=0)
            token = page.to(tl.int64) * PAGE + cols % PAGE
        else:
            token = (k_start + cols).to(tl.int64)
        kv_off = token[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None]
        k = tl.load(K + kv_off, mask=col_ok[None, :], other=0.0)
        qk = tl.dot(q, k) * qk_scale
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + shift)
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v_off = token[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :]
        v = tl.load(V + v_off, mask=col_ok[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    o_ptrs = O + (q_start + offs_m)[:, None].to(tl.int64) * stride_qt + head * stride_qh + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    max_seqlen_q: int,
    softmax_scale: float,
    causal: bool = False,
    cu_seqlens_k: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    block_m: int = 16,
    block_n: int = 32,
    num_warps: int = 4,
    num_stages: int = 2,
) -> torch.Tensor:
    _total_q, heads, d = q.shape
    paged = block_table is not None
    if paged:
        _, page, kv_heads, _ = k.shape
        k2, v2 = k.reshape(-1, kv_heads, d), v.reshape(-1, kv_heads, d)
    else:
        if cu_seqlens_k is None:
            raise ValueError("packed keys need cu_seqlens_k (or give a paged cache and block_table)")
        page, kv_heads = 1, k.shape[1]
        k2, v2 = k, v
    if d & (d - 1) or d < 16:
        raise ValueError(f"head dim {d} must be a power of two >= 16")
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not group over {kv_heads} KV heads")
    if not (q.is_contiguous() and k2.is_contiguous() and v2.is_contiguous()):
        raise ValueError("q, k, v must be contiguous")
    o = torch.empty_like(q) if out is None else out
    batch = cu_seqlens_q.numel() - 1
    dummy = seqused_k  # an int32 tensor for the pointer the variant does not read
    grid = (triton.cdiv(max_seqlen_q, block_m), batch, heads)
    _attn_fwd[grid](
        q,
        k2,
        v2,
        o,
        cu_seqlens_q,
        cu_seqlens_k if cu_seqlens_k is not None else dummy,
        seqused_k,
        block_table if paged else dummy,
        softmax_scale * LOG2E,
        q.stride(0),
        q.stride(1),
        k2.stride(0),
        k2.stride(1),
        block_table.stride(0) if paged else 0,
        heads // kv_heads,
        D=d,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        PAGE=page,
        PAGED=paged,
        CAUSAL=causal,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return o

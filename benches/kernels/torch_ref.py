"""Torch subjects with the subject calling convention: for CPU runs of the harness and tests.

Besides the default conventions (`attention`, `matmul`), kernels with the calling conventions real
libraries use, reached through a subject's declared mapping (benches/backends/callmap.py):
`varlen_attention` (flash-attention's cu_seqlens), `paged_attention` (a page table and seqused_k),
`scaled_matmul` (fp8 with tensor / row / 1x128-128x128 block scales), `grouped_matmul` (offsets).
"""

from __future__ import annotations

import torch

BLOCK = 128


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float) -> torch.Tensor:
    gqa = {"enable_gqa": True} if k.shape[-3] != q.shape[-3] else {}
    sq, sk = q.shape[-2], k.shape[-2]
    if causal and sq != sk:  # bottom-right, as flash-attention aligns it
        mask = torch.ones((sq, sk), dtype=torch.bool, device=q.device).tril(sk - sq)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sm_scale, **gqa)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale, **gqa)


def matmul(a: torch.Tensor, b: torch.Tensor, tile: tuple[int, int, int] | None = None) -> torch.Tensor:
    return a @ b


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """q [total_q, H, D], k, v [total_k, Hkv, D] -> [total_q, H, D], one sequence at a time."""
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = torch.empty_like(q)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(cq) - 1):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        o = attention(q[qs].transpose(0, 1), k[ks].transpose(0, 1), v[ks].transpose(0, 1), causal, scale)
        out[qs] = o.transpose(0, 1)
    return out


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seqused_k: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """q [total_q, H, D]; caches [pages, page_size, Hkv, D] read through block_table [B, max pages]."""
    page = k_cache.shape[1]
    keys, values, lens = [], [], seqused_k.tolist()
    for i, n in enumerate(lens):
        pos = torch.arange(n, device=q.device)
        pages = block_table[i, pos // page].long()
        keys.append(k_cache[pages, pos % page])
        values.append(v_cache[pages, pos % page])
    cu_k = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu_k[1:] = torch.cumsum(torch.tensor(lens), 0)
    return varlen_attention(q, torch.cat(keys), torch.cat(values), cu_seqlens_q, cu_k, causal, softmax_scale)


def _expand(scale: torch.Tensor, rows: int, cols: int, operand: str) -> torch.Tensor:
    """A scale of any of the three kinds, inferred from its shape, broadcast to [rows, cols]."""
    if scale.numel() == 1:
        return scale.reshape(1, 1).expand(rows, cols)
    if (operand == "a" and scale.shape == (rows, 1)) or (operand == "b" and scale.shape == (1, cols)):
        return scale.expand(rows, cols)
    if operand == "a":
        return scale.repeat_interleave(BLOCK, dim=-1)[:, :cols]
    return scale.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:rows, :cols]


def scaled_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """fp8 a [M, K] @ b [K, N] with dequantization scales; fp32 accumulation, `out_dtype` result."""
    (m, k), n = a.shape, b.shape[1]
    a32 = a.float() * _expand(a_scale, m, k, "a")
    b32 = b.float() * _expand(b_scale, k, n, "b")
    return (a32 @ b32).to(out_dtype)


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, group_offsets: torch.Tensor) -> torch.Tensor:
    """a [sum M, K] (groups end at group_offsets, int32 [G]) @ b [G, K, N] -> [sum M, N]."""
    out = torch.empty((a.shape[0], b.shape[-1]), dtype=a.dtype, device=a.device)
    start = 0
    for i, end in enumerate(group_offsets.tolist()):
        out[start:end] = a[start:end] @ b[i]
        start = end
    return out

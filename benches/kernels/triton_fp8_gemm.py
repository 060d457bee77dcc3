"""Scaled fp8 GEMM in Triton: C = (A * a_scale) @ (B * b_scale), fp32 accumulation, bf16 out.

Entry point (torch._scaled_mm's argument names, reached through a subject's declared mapping):

    scaled_matmul(a, b, a_scale, b_scale, out_dtype=torch.bfloat16) -> c

a [M, K] and b [K, N] fp8 (e4m3 or e5m2, any strides); the scales' shapes say their kind: per
tensor (one value), per row (a_scale [M, 1], b_scale [1, N]), or blockwise (a_scale [M, K/128],
1x128 along K; b_scale [K/128, N/128], 128x128), applied per 128-deep slice of K inside the loop
as DeepSeek's and Primus-Turbo's blockwise kernels do. The H200 blockwise subject of
configs/h200-decode.toml; it runs under TRITON_INTERPRET=1 in the tests.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 128  # one K slice per scale block


@triton.jit
def _scaled_mm(
    A,
    B,
    C,
    SA,
    SB,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_sa,
    stride_sb,
    KIND: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok, n_ok = offs_m < M, offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        ks = kb * BLOCK_K + offs_k
        k_ok = ks < K
        a = tl.load(
            A + offs_m[:, None] * stride_am + ks[None, :] * stride_ak, mask=m_ok[:, None] & k_ok[None, :], other=0.0
        )
        b = tl.load(
            B + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=k_ok[:, None] & n_ok[None, :], other=0.0
        )
        part = tl.dot(a, b)
        if KIND == 2:  # blockwise: A's scale per (row, K slice), B's per (K slice, 128 columns)
            sa = tl.load(SA + offs_m * stride_sa + kb, mask=m_ok, other=0.0)
            sb = tl.load(SB + kb * stride_sb + offs_n // 128, mask=n_ok, other=0.0)
            acc += part * sa[:, None] * sb[None, :]
        else:
            acc += part
    if KIND == 0:  # per tensor
        acc = acc * tl.load(SA) * tl.load(SB)
    if KIND == 1:  # per row of A, per column of B
        sa = tl.load(SA + offs_m, mask=m_ok, other=0.0)
        sb = tl.load(SB + offs_n, mask=n_ok, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    c_ptrs = C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def scale_kind(a_scale: torch.Tensor, b_scale: torch.Tensor, m: int, n: int, k: int) -> int:
    """0 per tensor, 1 per row, 2 blockwise, from the scales' shapes."""
    if a_scale.numel() == 1 and b_scale.numel() == 1:
        return 0
    if tuple(a_scale.shape) == (m, 1) and tuple(b_scale.shape) == (1, n):
        return 1
    if tuple(a_scale.shape) == (m, triton.cdiv(k, 128)) and tuple(b_scale.shape) == (
        triton.cdiv(k, 128),
        triton.cdiv(n, 128),
    ):
        return 2
    raise ValueError(
        f"scales {tuple(a_scale.shape)} x {tuple(b_scale.shape)} are neither per tensor, per row "
        f"nor 1x128 / 128x128 blocks for M={m} N={n} K={k}"
    )


def scaled_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    block_m: int = 64,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    (m, k), n = a.shape, b.shape[1]
    kind = scale_kind(a_scale, b_scale, m, n, k)
    if kind == 2 and 128 % block_n:
        raise ValueError(f"block_n={block_n} must divide 128 so a tile sits in one scale block")
    sa, sb = a_scale.float().contiguous(), b_scale.float().contiguous()
    c = torch.empty((m, n), device=a.device, dtype=out_dtype)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _scaled_mm[grid](
        a,
        b,
        c,
        sa,
        sb,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        sa.stride(0) if kind == 2 else 0,
        sb.stride(0) if kind == 2 else 0,
        KIND=kind,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=BLOCK_K,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return c

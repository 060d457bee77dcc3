"""GEMM in Triton, the matmul tutorial's kernel: grouped program order for L2 reuse.

Entry point: `matmul(a, b, tile=None) -> c` with a [M, K], b [K, N] (any strides); c is a's dtype
(bf16 for fp8 inputs). Defaults 128x256x64, GROUP_M=8, 8 warps, 3 stages (good on H100/H200).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _matmul(
    A,
    B,
    C,
    M,
    N,
    K,
    s_am,
    s_ak,
    s_bk,
    s_bn,
    s_cm,
    s_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    group = pid // per_group
    first_m = group * GROUP_M
    group_size = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptr = A + offs_m[:, None] * s_am + offs_k[None, :] * s_ak
    b_ptr = B + offs_k[:, None] * s_bk + offs_n[None, :] * s_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - kk * BLOCK_K
        a = tl.load(a_ptr, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptr, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptr += BLOCK_K * s_ak
        b_ptr += BLOCK_K * s_bk
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(C + rows[:, None] * s_cm + cols[None, :] * s_cn, acc.to(C.dtype.element_ty), mask=mask)


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    tile: tuple[int, int, int] | None = None,
    group_m: int = 8,
    num_warps: int = 8,
    num_stages: int = 3,
) -> torch.Tensor:
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    bm, bn, bk = tile or (128, 256, 64)
    out_dtype = torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype
    c = torch.empty((m, n), device=a.device, dtype=out_dtype)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _matmul[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=group_m,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return c

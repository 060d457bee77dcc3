"""Flash-attention forward: shape params -> inputs, FLOP and byte counts, fp32 reference.

The canonical tensors are each in their natural form: q dense [B, H, Sq, D] when every sequence
has the same number of queries, else packed [total_q, H, D]; k and v dense [B, Hkv, Sk, D] or
packed [total_k, Hkv, D]. The output has q's form. Alongside: cu_seqlens_q / cu_seqlens_k (int32
[B+1]), seqused_k ([B]), max_seqlen_q / max_seqlen_k, and for a paged shape the cache k_cache /
v_cache [pages, page_size, Hkv, D] with a shuffled block_table and FlashInfer's kv_indptr /
kv_indices / kv_last_page_len. Backends convert to their own layout (benches/backends/callmap.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from benches import shapes
from benches.suites import attn_layout as lay
from benches.suites.dtypes import torch_dtype

NAME = "fa"
PARAMS = shapes.ATTN_KEYS[1:]
REFERENCE_ROWS = 1024  # query rows per step of the reference: bounds its fp32 score matrix


def flops(p: Mapping[str, Any]) -> float:
    """4 * H * D per attended (query, key) pair; causal S x S counts half (shapes.attended_pairs)."""
    return shapes.attention_flops(p)


def bytes(p: Mapping[str, Any]) -> float:  # noqa: A001 - the suite contract's name
    return shapes.attention_bytes(p)


def make_inputs(p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
    """Random q, k, v (never zeros) drawn from a per-trial seed, plus the softmax scale and the
    sequence bookkeeping. A plain (B, H, S, D) shape draws exactly what it always drew."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    g = shapes.attention(p)
    dtype = torch_dtype(g.dtype)
    draw = torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype
    d = g.head_dim
    q_shape = (g.batch, g.heads, g.q_lens[0], d) if g.dense_q else (g.total_q, g.heads, d)
    k_shape = (g.batch, g.kv_heads, g.k_lens[0], d) if g.dense_k else (g.total_k, g.kv_heads, d)
    q, k, v = (torch.randn(s, generator=gen, device=device, dtype=draw) for s in (q_shape, k_shape, k_shape))
    if draw != dtype:
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    out: dict[str, Any] = {
        "q": q,
        "k": k,
        "v": v,
        "causal": g.causal,
        "sm_scale": 1.0 / math.sqrt(d),
        "geometry": g,
        "cu_seqlens_q": lay.cumulative(g.q_lens, device),
        "cu_seqlens_k": lay.cumulative(g.k_lens, device),
        "seqused_k": torch.tensor(g.k_lens, dtype=torch.int32, device=device),
        "max_seqlen_q": max(g.q_lens),
        "max_seqlen_k": max(g.k_lens),
    }
    if g.page_size:
        table, slots = lay.page_table(g, gen, device)
        num = sum(g.pages)
        fill = [
            torch.randn((num * g.page_size, g.kv_heads, d), generator=gen, device=device, dtype=draw).to(dtype)
            for _ in range(2)
        ]
        out["k_cache"], out["v_cache"] = (
            lay.to_pages(lay.as_thd(x, g.dense_k), slots, num, g.page_size, f) for x, f in zip((k, v), fill)
        )
        out["block_table"] = table
        out["kv_indptr"], out["kv_indices"], out["kv_last_page_len"] = lay.flat_pages(table, g)
    return out


def _one_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """fp32 softmax(q k^T * scale) v for one sequence: q [H, sq, D], k, v [Hkv, sk, D] -> [H, sq, D]."""
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    sq, sk = q.shape[1], k.shape[1]
    mask = lay.visible(sq, sk, causal, q.device)
    out = torch.empty_like(q)
    for start in range(0, sq, REFERENCE_ROWS):
        rows = slice(start, start + REFERENCE_ROWS)
        scores = (q[:, rows] @ k.transpose(1, 2)) * scale
        scores = scores.masked_fill(~mask[rows], float("-inf"))
        out[:, rows] = torch.softmax(scores, dim=-1) @ v
    return out


def reference(inputs: Mapping[str, Any]) -> torch.Tensor:
    """fp32 attention, sequence by sequence, for the correctness check when the trial has no control."""
    g: shapes.Attention = inputs["geometry"]
    q = lay.as_thd(inputs["q"].float(), g.dense_q)
    k, v = (lay.as_thd(inputs[n].float(), g.dense_k) for n in ("k", "v"))
    outs, qs, ks = [], 0, 0
    for sq, sk in zip(g.q_lens, g.k_lens):
        o = _one_sequence(
            q[qs : qs + sq].transpose(0, 1),
            k[ks : ks + sk].transpose(0, 1),
            v[ks : ks + sk].transpose(0, 1),
            g.causal,
            inputs["sm_scale"],
        )
        outs.append(o.transpose(0, 1))
        qs, ks = qs + sq, ks + sk
    return lay.from_thd(torch.cat(outs), g.dense_q, g.batch)


def describe(p: Mapping[str, Any]) -> str:
    g = shapes.attention(p)
    causal = " causal" if g.causal else ""
    heads = f"H={g.heads}" + (f" Hkv={g.kv_heads}" if g.kv_heads != g.heads else "")
    if "S" in p and not p.get("varlen"):
        seq = f"S={p['S']}" + "".join(f" {k}={p[k]}" for k in ("Sq", "Sk") if k in p)
    else:
        sq = f"Sq={g.q_lens[0]}" if g.dense_q else "Sq=varlen"
        sk = f"Sk={g.k_lens[0]}" if g.dense_k else f"Sk=varlen[{min(g.k_lens)}..{max(g.k_lens)}]"
        seq = f"{sq} {sk}"
    paged = f" page={g.page_size}" if g.page_size else ""
    return f"B={g.batch} {heads} {seq} D={g.head_dim} {g.dtype}{causal}{paged}"

"""torch SDPA as the attention control for every attention shape, on the CPU and on NVIDIA.

- same lengths, no mask needed (non-causal, causal Sq == Sk, or one query row): plain SDPA, GQA
  through `enable_gqa` (FlashAttention takes it on CUDA);
- causal with Sq < Sk: a bottom-right boolean mask (SDPA's `is_causal` is top-left), K and V
  repeated to H heads in prepare (the kernels that take a mask on CUDA do not take GQA);
- variable lengths: padded to the longest sequence with a mask per sequence (its own keys only,
  bottom-right causal), K and V repeated; the output is unpadded untimed.
A paged shape's control reads the same keys from a contiguous tensor: SDPA has no page table.
Everything but the SDPA call happens in prepare, outside the timing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from benches.suites import attn_layout as lay


@dataclass(frozen=True)
class SdpaPlan:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None
    is_causal: bool
    enable_gqa: bool
    scale: float
    output: Callable[[torch.Tensor], torch.Tensor]
    impl: str


def _repeat(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.repeat_interleave(heads // x.shape[1], dim=1) if x.shape[1] != heads else x


def plan(inputs: Mapping[str, Any]) -> SdpaPlan:
    g = inputs["geometry"]
    scale = inputs["sm_scale"]
    gqa = g.kv_heads != g.heads
    if g.dense_q and g.dense_k:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        sq, sk = g.q_lens[0], g.k_lens[0]
        if not g.causal or sq == 1 or sq == sk:
            return SdpaPlan(
                q,
                k,
                v,
                None,
                g.causal and sq == sk and sq > 1,
                gqa,
                scale,
                lambda o: o,
                "sdpa" + (" enable_gqa" if gqa else ""),
            )
        mask = lay.visible(sq, sk, True, q.device)
        return SdpaPlan(
            q,
            _repeat(k, g.heads),
            _repeat(v, g.heads),
            mask,
            False,
            False,
            scale,
            lambda o: o,
            "sdpa bottom-right mask" + (", KV repeated" if gqa else ""),
        )
    q = inputs["q"] if g.dense_q else lay.pad(inputs["q"], g.q_lens)
    k, v = (inputs[n] if g.dense_k else lay.pad(inputs[n], g.k_lens) for n in ("k", "v"))
    lens = g.q_lens

    def unpad(o: torch.Tensor) -> torch.Tensor:
        return o if g.dense_q else lay.unpad(o, lens)

    return SdpaPlan(
        q,
        _repeat(k, g.heads),
        _repeat(v, g.heads),
        lay.padded_mask(g, q.device),
        False,
        False,
        scale,
        unpad,
        "sdpa padded to the longest sequence, mask per sequence" + (", KV repeated" if gqa else ""),
    )


def call(p: SdpaPlan) -> torch.Tensor:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if p.enable_gqa:
        return sdpa(p.q, p.k, p.v, attn_mask=p.mask, is_causal=p.is_causal, scale=p.scale, enable_gqa=True)
    return sdpa(p.q, p.k, p.v, attn_mask=p.mask, is_causal=p.is_causal, scale=p.scale)

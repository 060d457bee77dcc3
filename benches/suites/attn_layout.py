"""Attention tensors between their forms: dense [B, H, S, D], packed "thd" [total, H, D] with
cumulative lengths, padded dense with a mask, and a paged KV cache [pages, page_size, Hkv, D] with
a page table. Used by the suite (inputs, reference), the controls and the subject adapters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from benches.shapes import Attention


def cumulative(lens: Sequence[int], device: str | torch.device) -> torch.Tensor:
    """[0, l0, l0 + l1, ...] as int32: cu_seqlens."""
    out = torch.zeros(len(lens) + 1, dtype=torch.int32, device=device)
    out[1:] = torch.cumsum(torch.tensor(list(lens), dtype=torch.int64, device=device), 0).to(torch.int32)
    return out


def dense_to_thd(x: torch.Tensor) -> torch.Tensor:
    """[B, H, S, D] -> [B*S, H, D]."""
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b * s, h, d)


def thd_to_dense(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[B*S, H, D] -> [B, H, S, D] (every sequence the same length)."""
    total, h, d = x.shape
    return x.reshape(batch, total // batch, h, d).transpose(1, 2)


def as_thd(x: torch.Tensor, dense: bool) -> torch.Tensor:
    return dense_to_thd(x) if dense else x


def from_thd(x: torch.Tensor, dense: bool, batch: int) -> torch.Tensor:
    return thd_to_dense(x, batch) if dense else x


def pad(x_thd: torch.Tensor, lens: Sequence[int]) -> torch.Tensor:
    """Packed [total, H, D] -> zero-padded [B, H, max(lens), D]."""
    _total, h, d = x_thd.shape
    out = x_thd.new_zeros((len(lens), max(lens), h, d))
    start = 0
    for i, n in enumerate(lens):
        out[i, :n] = x_thd[start : start + n]
        start += n
    return out.transpose(1, 2)


def unpad(x: torch.Tensor, lens: Sequence[int]) -> torch.Tensor:
    """Padded [B, H, max, D] -> packed [total, H, D]."""
    return torch.cat([x[i, :, :n].transpose(0, 1) for i, n in enumerate(lens)])


def visible(q_len: int, k_len: int, causal: bool, device: str | torch.device) -> torch.Tensor:
    """[q_len, k_len] bool: which keys each query sees; causal aligned bottom-right."""
    if not causal:
        return torch.ones((q_len, k_len), dtype=torch.bool, device=device)
    return torch.ones((q_len, k_len), dtype=torch.bool, device=device).tril(k_len - q_len)


def padded_mask(g: Attention, device: str | torch.device) -> torch.Tensor:
    """[B, 1, max_q, max_k] bool for the padded form: a query sees its own sequence's keys only.
    Padding rows see key 0, so no row is all masked (their outputs are dropped)."""
    mq, mk = max(g.q_lens), max(g.k_lens)
    mask = torch.zeros((g.batch, 1, mq, mk), dtype=torch.bool, device=device)
    for i, (q, k) in enumerate(zip(g.q_lens, g.k_lens)):
        mask[i, 0, :q, :k] = visible(q, k, g.causal, device)
        mask[i, 0, q:, 0] = True
    return mask


def page_table(g: Attention, gen: torch.Generator, device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A shuffled page table: (block_table [B, max pages] int32, physical slot of every key [total_k]).

    Pages are handed out in a random order drawn from the trial's seed, so a kernel that walks
    the cache in order instead of through the table reads the wrong keys. Table entries past a
    sequence's last page are 0, as vLLM pads them."""
    assert g.page_size
    pages = g.pages
    order = torch.randperm(sum(pages), generator=gen, device=device).to(torch.int32)
    table = torch.zeros((g.batch, max(pages)), dtype=torch.int32, device=device)
    slots, start = [], 0
    for i, (n, k_len) in enumerate(zip(pages, g.k_lens)):
        table[i, :n] = order[start : start + n]
        pos = torch.arange(k_len, device=device)
        slots.append(table[i, pos // g.page_size].long() * g.page_size + pos % g.page_size)
        start += n
    return table, torch.cat(slots)


def to_pages(
    x_thd: torch.Tensor, slots: torch.Tensor, num_pages: int, page_size: int, filler: torch.Tensor
) -> torch.Tensor:
    """Packed keys [total_k, Hkv, D] -> cache [num_pages, page_size, Hkv, D]; unused slots hold `filler`
    (finite garbage, as a real cache holds stale keys: a kernel that reads past a sequence's length
    gets wrong numbers, not NaN)."""
    _, h, d = x_thd.shape
    cache = filler.reshape(num_pages * page_size, h, d).clone()
    cache[slots] = x_thd
    return cache.reshape(num_pages, page_size, h, d)


def flat_pages(table: torch.Tensor, g: Attention) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's and aiter's page convention: (kv_indptr [B+1], kv_indices [sum pages],
    kv_last_page_len [B]), all int32."""
    pages = g.pages
    indices = torch.cat([table[i, :n] for i, n in enumerate(pages)])
    last = torch.tensor([(k - 1) % g.page_size + 1 for k in g.k_lens], dtype=torch.int32, device=table.device)
    return cumulative(pages, table.device), indices, last

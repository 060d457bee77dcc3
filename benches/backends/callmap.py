"""A subject's own calling convention, declared in its config: which suite input each parameter gets.

    [subject.fa]
    entry = "flash_attn:flash_attn_with_kvcache"
    args = ["q", "k_cache", "v_cache"]                       # positional, in order
    kwargs = { cache_seqlens = "seqused_k", block_table = "block_table", softmax_scale = "sm_scale" }

The names (benches/shapes.py: ATTN_INPUTS, PAGED_INPUTS, GEMM_INPUTS, ...) are views of the
suite's canonical inputs, made in `prepare` (untimed) and only for the names the mapping uses:
attention `q`/`k`/`v` in the subject's layout (packed [total, H, D] for variable lengths),
`q_thd`/`k_thd`/`v_thd` always packed, the int32 `cu_seqlens_q`/`cu_seqlens_k`/`seqused_k`
(= `cache_seqlens`), `max_seqlen_q`/`max_seqlen_k`, the paged `k_cache`/`v_cache`/`block_table`
and `kv_indptr`/`kv_indices`/`kv_last_page_len`; GEMM `a`, `b`, `b_nk` ([N, K] contiguous),
`a_scale`, `b_scale`, `b_scale_nk`, `group_offsets`, `group_sizes`, `out_dtype`, `tile`. `out` is a
preallocated output (in the form of the q the mapping passes); a kernel that returns None is read
from it. A brought suite's inputs are passed by their own names. `options` add constant keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from benches.backends.base import Prepared, from_layout, prepared, to_layout
from benches.suites import attn_layout as lay
from benches.suites import fp8

Thunk = Callable[[], Any]


def attention_view(inputs: Mapping[str, Any], layout: str, packed_out: bool) -> dict[str, Thunk]:
    g = inputs["geometry"]

    def natural(name: str, dense: bool) -> Thunk:
        return lambda: to_layout(inputs[name], layout) if dense else inputs[name].contiguous()

    def thd(name: str, dense: bool) -> Thunk:
        return lambda: lay.as_thd(inputs[name], dense).contiguous()

    def out() -> torch.Tensor:
        q = inputs["q"]
        if packed_out or not g.dense_q:
            shape = (g.total_q, g.heads, g.head_dim)
        else:
            shape = tuple(q.shape) if layout == "bhsd" else (q.shape[0], q.shape[2], q.shape[1], q.shape[3])
        return torch.empty(shape, dtype=_out_dtype(q.dtype), device=q.device)

    view: dict[str, Thunk] = {
        "q": natural("q", g.dense_q),
        "k": natural("k", g.dense_k),
        "v": natural("v", g.dense_k),
        "q_thd": thd("q", g.dense_q),
        "k_thd": thd("k", g.dense_k),
        "v_thd": thd("v", g.dense_k),
        "softmax_scale": lambda: inputs["sm_scale"],
        "cache_seqlens": lambda: inputs["seqused_k"],
        "out": out,
    }
    for name in (
        "causal",
        "sm_scale",
        "cu_seqlens_q",
        "cu_seqlens_k",
        "seqused_k",
        "max_seqlen_q",
        "max_seqlen_k",
        "k_cache",
        "v_cache",
        "block_table",
        "kv_indptr",
        "kv_indices",
        "kv_last_page_len",
    ):
        if name in inputs:
            view[name] = lambda n=name: inputs[n]
    return view


def _out_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.bfloat16 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else dtype


def gemm_view(inputs: Mapping[str, Any]) -> dict[str, Thunk]:
    def out() -> torch.Tensor:
        a, b = inputs["a"], inputs["b"]
        rows = a.shape[:-1]
        return torch.empty((*rows, b.shape[-1]), dtype=inputs["out_dtype"], device=a.device)

    view: dict[str, Thunk] = {"b_nk": lambda: inputs["b"].transpose(-2, -1).contiguous(), "out": out}
    if inputs.get("scaling"):
        view["b_scale_nk"] = lambda: fp8.transpose_scale(inputs["b_scale"], inputs["scaling"])
    for name in ("a", "b", "a_scale", "b_scale", "out_dtype", "tile", "group_offsets", "group_sizes"):
        if inputs.get(name) is not None:
            view[name] = lambda n=name: inputs[n]
    return view


def mapped(
    fn: Callable[..., Any],
    suite: str,
    inputs: Mapping[str, Any],
    layout: str,
    args: Sequence[str],
    kwargs: Mapping[str, str],
    options: Mapping[str, Any],
) -> Prepared:
    """`fn(*args, **kwargs, **options)` with each name replaced by its view of the inputs."""
    names = [*args, *kwargs.values()]
    packed_out = "q_thd" in names
    if suite == "fa":
        view = attention_view(inputs, layout, packed_out)
    elif suite == "gemm":
        view = gemm_view(inputs)
    else:
        view = {k: (lambda v=v: v) for k, v in inputs.items()}
    missing = sorted({n for n in names if n not in view})
    if missing:
        raise ValueError(
            f"the subject's mapping names {', '.join(missing)}, which this {suite} shape does not have "
            f"(has: {', '.join(sorted(view))})"
        )
    values = {n: view[n]() for n in dict.fromkeys(names)}
    pos = [values[n] for n in args]
    kw = {**{k: values[n] for k, n in kwargs.items()}, **options}

    def output(result: Any) -> torch.Tensor:
        if result is None:
            result = values.get("out")
        if isinstance(result, (tuple, list)):
            result = result[0]
        if suite != "fa":
            return result
        g = inputs["geometry"]
        if packed_out:
            return lay.from_thd(result, g.dense_q, g.batch)
        return from_layout(result, layout) if g.dense_q else result

    return prepared(lambda: fn(*pos, **kw), output)

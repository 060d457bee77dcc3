"""GEMM C = A @ B: shape params -> inputs, FLOP and byte counts, fp32 reference.

`a` is a logical [M, K] tensor and `b` a logical [K, N] tensor ([batch, ..] for a batched GEMM; a
grouped GEMM has `a` [sum M, K], `b` [groups, K, N] and `group_sizes` / `group_offsets`); the
layout ("nn", "nt", "tn", "tt") says which of them is stored transposed (then passed as a
transposed view). fp8 with `scaling` draws fp32 operands with rows (and blocks) of very different
magnitude and quantizes them (benches/suites/fp8.py), so a kernel that drops a scale is wrong.
Correctness is judged relative to the output's RMS (benches/correctness.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from benches import shapes
from benches.suites import fp8
from benches.suites.dtypes import FP8_TYPES, torch_dtype

NAME = "gemm"
PARAMS = shapes.GEMM_KEYS[1:]


def flops(p: Mapping[str, Any]) -> float:
    return shapes.gemm_flops(p)


def bytes(p: Mapping[str, Any]) -> float:  # noqa: A001 - the suite contract's name
    return shapes.gemm_bytes(p)


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp8 GEMMs write bf16; the others write their input dtype."""
    return torch.bfloat16 if dtype in FP8_TYPES else dtype


def _draw(
    gen: torch.Generator, lead: tuple[int, ...], rows: int, cols: int, device: str, dtype: torch.dtype, spread: bool
) -> torch.Tensor:
    """[lead.., rows, cols]; with `spread`, fp32 with rows and 128-column blocks of magnitudes 2^-4..2^4."""
    if not spread:
        draw = torch.float32 if dtype in FP8_TYPES else dtype
        return torch.randn((*lead, rows, cols), generator=gen, device=device, dtype=draw)
    x = torch.randn((*lead, rows, cols), generator=gen, device=device)
    row = torch.randint(-4, 5, (*lead, rows, 1), generator=gen, device=device).float()
    block = torch.randint(-2, 3, (*lead, 1, -(-cols // shapes.BLOCK)), generator=gen, device=device).float()
    block = block.repeat_interleave(shapes.BLOCK, dim=-1)[..., :cols]
    return x * torch.exp2(row + block)


def _stored(x: torch.Tensor, transposed: bool) -> torch.Tensor:
    """The logical tensor, held transposed in memory when the layout says so (a view, same values)."""
    return x.transpose(-2, -1).contiguous().transpose(-2, -1) if transposed else x.contiguous()


def make_inputs(p: Mapping[str, Any], device: str, seed: int) -> dict[str, Any]:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    g = shapes.gemm(p)
    if g.layout not in ("nn", "nt", "tn", "tt"):
        raise ValueError(f"unknown GEMM layout {g.layout!r}")
    dt_a, dt_b = torch_dtype(g.dtype_a), torch_dtype(g.dtype_b)
    scaling = g.scaling
    m, n, k = g.m_sizes[0], g.n, g.k
    if not g.batched and not g.grouped and scaling is None:
        # The shapes this suite always had: the same draws as before, so stored trials stay comparable.
        def make(rows: int, cols: int, transposed: bool, dtype: torch.dtype) -> torch.Tensor:
            dims = (cols, rows) if transposed else (rows, cols)
            t = _draw(gen, (), *dims, device, dtype, False).to(dtype)
            return t.t() if transposed else t

        a, b = make(m, k, g.layout[0] == "t", dt_a), make(k, n, g.layout[1] == "t", dt_b)
        tile = p.get("tile")
        return {
            "a": a,
            "b": b,
            "tile": tuple(tile) if tile else None,
            "out_dtype": out_dtype(dt_a),
            "scaling": None,
            "a_scale": None,
            "b_scale": None,
        }

    lead = (len(g.m_sizes),) if g.batched else ()
    a32 = _draw(gen, lead, sum(g.m_sizes) if g.grouped else m, k, device, dt_a, scaling is not None)
    b32 = _draw(gen, (len(g.m_sizes),) if g.grouped else lead, k, n, device, dt_b, scaling is not None)
    out: dict[str, Any] = {
        "tile": tuple(p["tile"]) if p.get("tile") else None,
        "out_dtype": out_dtype(dt_a),
        "scaling": scaling,
        "a_scale": None,
        "b_scale": None,
    }
    if scaling is not None:
        a32, out["a_scale"] = fp8.quantize(a32, dt_a, scaling, "a")
        b32, out["b_scale"] = fp8.quantize(b32, dt_b, scaling, "b")
    else:
        a32, b32 = a32.to(dt_a), b32.to(dt_b)
    out["a"], out["b"] = _stored(a32, g.layout[0] == "t"), _stored(b32, g.layout[1] == "t")
    if g.grouped:
        sizes = torch.tensor(g.m_sizes, dtype=torch.int32, device=device)
        out.update(group_sizes=sizes, group_offsets=torch.cumsum(sizes, 0).to(torch.int32))
    return out


def operands_fp32(inputs: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """A and B as the fp32 values they stand for (dequantized when scaled)."""
    scaling = inputs.get("scaling")
    if scaling is None:
        return inputs["a"].float(), inputs["b"].float()
    return (
        fp8.dequantize(inputs["a"], inputs["a_scale"], scaling, "a"),
        fp8.dequantize(inputs["b"], inputs["b_scale"], scaling, "b"),
    )


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, sizes: list[int], out: torch.Tensor | None = None) -> torch.Tensor:
    """a [sum M, K] @ b[g] for each group's rows, one matmul per group."""
    out = torch.empty((a.shape[0], b.shape[-1]), device=a.device, dtype=a.dtype) if out is None else out
    start = 0
    for i, rows in enumerate(sizes):
        torch.matmul(a[start : start + rows], b[i], out=out[start : start + rows])
        start += rows
    return out


def reference(inputs: Mapping[str, Any]) -> torch.Tensor:
    a, b = operands_fp32(inputs)
    if inputs.get("group_sizes") is not None:
        return grouped_matmul(a, b, inputs["group_sizes"].tolist())
    return a @ b


def describe(p: Mapping[str, Any]) -> str:
    g = shapes.gemm(p)
    tile = f" tile={'x'.join(map(str, p['tile']))}" if p.get("tile") else ""
    rows = f"groups={list(g.m_sizes)}" if g.grouped else f"M={g.m_sizes[0]}"
    batch = f" batch={len(g.m_sizes)}" if g.batched else ""
    dtype = g.dtype_a + (f"x{g.dtype_b}" if g.dtype_b != g.dtype_a else "")
    scaling = f" {g.scaling}-scaled" if g.scaling else ""
    return f"{rows} N={g.n} K={g.k}{batch} {dtype}{scaling} {g.layout}{tile}"

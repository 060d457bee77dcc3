"""Shape parameters of the built-in suites: validation, geometry, FLOP and byte counts. Plain data.

No torch here: the bot's config check reads this module to refuse a bad shape by key before anything
is built, and the trial's suites use the same geometry, so the shape a config names and the shape a
trial measures cannot drift apart.

Attention: `S` is the shorthand for `Sq` and `Sk`; `Hkv` divides `H` (GQA, or MQA at 1); `varlen`
gives each sequence's key length (a list of B lengths, or a seeded uniform draw
`{min, max, seed}`), the query lengths being the same unless `Sq` is given (decode: `Sq = 1`);
`page_size` stores the keys in a paged cache with a shuffled page table. Causal masks are aligned
bottom-right when a sequence has fewer queries than keys, as flash-attention does.

GEMM: `batch` (batched, [batch, M, K] x [batch, K, N]) or `groups` (grouped, the M of each group,
[sum M, K] x [groups, K, N]); fp8 as `fp8_e4m3` / `fp8_e5m2` (`fp8` is e4m3 with unit scales, as
before) with `scaling` per tensor, per row (A's rows, B's columns) or per block (1x128 on A,
128x128 on B, as Primus-Turbo's and aiter's blockwise FP8 GEMMs).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ATTN_KEYS = ("name", "B", "H", "Hkv", "S", "Sq", "Sk", "D", "causal", "dtype", "varlen", "page_size")
GEMM_KEYS = ("name", "M", "N", "K", "dtype", "dtype_b", "layout", "tile", "scaling", "batch", "groups")
ATTN_DTYPES = ("bf16", "fp16", "fp32", "fp8")
GEMM_DTYPES = ("bf16", "fp16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2")
FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
SCALINGS = ("tensor", "row", "block")
BLOCK = 128  # the blockwise scale granule: 1x128 on A, 128x128 on B
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
MAX_VARLEN_BATCH = 65536

# The names a subject's declared mapping (`args`, `kwargs`) may give its kernel, per suite.
ATTN_INPUTS = frozenset(
    {
        "q",
        "k",
        "v",
        "q_thd",
        "k_thd",
        "v_thd",
        "causal",
        "sm_scale",
        "softmax_scale",
        "cu_seqlens_q",
        "cu_seqlens_k",
        "seqused_k",
        "cache_seqlens",
        "max_seqlen_q",
        "max_seqlen_k",
        "out",
    }
)
PAGED_INPUTS = frozenset({"k_cache", "v_cache", "block_table", "kv_indptr", "kv_indices", "kv_last_page_len"})
GEMM_INPUTS = frozenset({"a", "b", "b_nk", "out_dtype", "out"})
SCALE_INPUTS = frozenset({"a_scale", "b_scale", "b_scale_nk"})
GROUP_INPUTS = frozenset({"group_offsets", "group_sizes"})


class ShapeError(ValueError):
    """A shape row that cannot be measured: `key` names the row's key, `problem` says why."""

    def __init__(self, key: str, problem: str) -> None:
        self.key, self.problem = key, problem
        super().__init__(f"{key}: {problem}")


def _int(row: Mapping[str, Any], key: str, default: Any = ...) -> Any:
    if key not in row:
        if default is ...:
            raise ShapeError(key, "missing")
        return default
    value = row[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ShapeError(key, f"must be int, got {value!r}"[:120])
    if value <= 0:
        raise ShapeError(key, f"must be > 0, got {value!r}")
    return value


def _choice(row: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str | None) -> str | None:
    value = row.get(key, default)
    if value is not None and value not in choices:
        raise ShapeError(key, f"must be one of {', '.join(choices)}, got {value!r}"[:160])
    return value


def varlen_lengths(spec: Any, batch: int) -> tuple[int, ...]:
    """The B key lengths a `varlen` value stands for: a list as given, or a seeded uniform draw.

    The draw uses Python's own `random.Random(seed)` (stable across versions and machines), so the
    config check, the trial and a report all see the same lengths."""
    if isinstance(spec, (list, tuple)):
        if len(spec) != batch:
            raise ShapeError("varlen", f"must give B={batch} lengths, got {len(spec)}")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in spec):
            raise ShapeError("varlen", "lengths must be positive ints")
        return tuple(spec)
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"min", "max", "seed"})
        if unknown:
            raise ShapeError(f"varlen.{unknown[0]}", "unknown key (known: min, max, seed)")
        try:
            lo, hi = _int(spec, "min"), _int(spec, "max")
        except ShapeError as exc:
            raise ShapeError(f"varlen.{exc.key}", exc.problem) from None
        seed = spec.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ShapeError("varlen.seed", f"must be int, got {seed!r}"[:120])
        if lo > hi:
            raise ShapeError("varlen", f"min {lo} > max {hi}")
        if batch > MAX_VARLEN_BATCH:
            raise ShapeError("B", f"at most {MAX_VARLEN_BATCH} sequences with varlen")
        draw = random.Random(seed)
        return tuple(draw.randint(lo, hi) for _ in range(batch))
    raise ShapeError("varlen", f"must be a list of lengths or a table {{min, max, seed}}, got {spec!r}"[:160])


def normalize_attention(row: Mapping[str, Any]) -> dict[str, Any]:
    """A config row -> the shape's params (without its name). A row with only B, H, S, D, causal
    and dtype gives exactly the params it always gave, so stored trials keep their meaning."""
    params: dict[str, Any] = {d: _int(row, d) for d in ("B", "H")}
    if "S" in row:
        params["S"] = _int(row, "S")
    params["D"] = _int(row, "D")
    for key in ("Sq", "Sk"):
        if key in row:
            params[key] = _int(row, key)
    if "Hkv" in row:
        params["Hkv"] = _int(row, "Hkv")
        if params["H"] % params["Hkv"]:
            raise ShapeError("Hkv", f"must divide H={params['H']}, got {params['Hkv']}")
    if "varlen" in row:
        if "S" in row or "Sk" in row:
            raise ShapeError("varlen", "gives the key lengths: leave out S and Sk")
        params["varlen"] = varlen_lengths(row["varlen"], params["B"])
    elif ("Sq" not in params and "S" not in params) or ("Sk" not in params and "S" not in params):
        raise ShapeError("S", "missing (give S, or Sq and Sk, or varlen)")
    if "page_size" in row:
        params["page_size"] = _int(row, "page_size")
    params["dtype"] = _choice(row, "dtype", ATTN_DTYPES, "bf16")
    causal = row.get("causal", False)
    if not isinstance(causal, bool):
        raise ShapeError("causal", f"must be bool, got {causal!r}"[:120])
    params["causal"] = causal
    geo = attention(params)
    if causal and any(q > k for q, k in zip(geo.q_lens, geo.k_lens)):
        raise ShapeError(
            "Sq",
            "causal with more queries than keys leaves rows with nothing to attend "
            "(the mask is aligned bottom-right): give Sq <= Sk",
        )
    return params


def normalize_gemm(row: Mapping[str, Any]) -> dict[str, Any]:
    """A config row -> the GEMM shape's params; a plain M, N, K row gives the params it always gave."""
    params: dict[str, Any] = {}
    if "groups" in row:
        groups = row["groups"]
        if "M" in row or "batch" in row:
            raise ShapeError("groups", "gives each group's M: leave out M and batch")
        if (
            not isinstance(groups, list)
            or not groups
            or not all(isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in groups)
        ):
            raise ShapeError("groups", "must be a non-empty list of positive ints (each group's M)")
        params["groups"] = tuple(groups)
    else:
        params["M"] = _int(row, "M")
    params["N"], params["K"] = _int(row, "N"), _int(row, "K")
    if "batch" in row:
        params["batch"] = _int(row, "batch")
    params["dtype"] = dtype = _choice(row, "dtype", GEMM_DTYPES, "bf16")
    if "dtype_b" in row:
        if dtype not in FP8[1:]:
            raise ShapeError("dtype_b", "only for fp8_e4m3 / fp8_e5m2 shapes")
        params["dtype_b"] = _choice(row, "dtype_b", FP8[1:], None)
    layout = _choice(row, "layout", ("nn", "nt", "tn", "tt"), "nn")
    if "groups" in params and layout[0] == "t":
        raise ShapeError("layout", "a grouped GEMM's A is [sum M, K] row-major: use nn or nt")
    params["layout"] = layout
    if "scaling" in row:
        if dtype not in FP8[1:]:
            raise ShapeError("scaling", "only for fp8_e4m3 / fp8_e5m2 shapes (fp8 means unit scales)")
        params["scaling"] = _choice(row, "scaling", SCALINGS, None)
        if params["scaling"] == "block" and (params["K"] % BLOCK or params["N"] % BLOCK):
            raise ShapeError("scaling", f"blockwise scales need K and N multiples of {BLOCK}")
    elif dtype in FP8[1:]:
        raise ShapeError("scaling", "missing: an fp8_e4m3 / fp8_e5m2 shape names its scales (tensor, row, block)")
    tile = row.get("tile")
    if tile is not None:
        if (
            not isinstance(tile, list)
            or len(tile) != 3
            or not all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in tile)
        ):
            raise ShapeError("tile", "must be [BLOCK_M, BLOCK_N, BLOCK_K]")
        params["tile"] = tuple(tile)
    return params


@dataclass(frozen=True)
class Attention:
    """One attention shape as sequences: each sequence's query and key length."""

    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]
    dense_q: bool  # every sequence has the same query length: q is [B, H, Sq, D], else packed
    dense_k: bool
    causal: bool
    page_size: int | None
    dtype: str

    @property
    def total_q(self) -> int:
        return sum(self.q_lens)

    @property
    def total_k(self) -> int:
        return sum(self.k_lens)

    @property
    def pages(self) -> tuple[int, ...]:
        """Pages each sequence's keys fill (its last page may be partly used)."""
        size = self.page_size or 1
        return tuple(-(-n // size) for n in self.k_lens)


def attention(p: Mapping[str, Any]) -> Attention:
    b, h = int(p["B"]), int(p["H"])
    s = p.get("S")
    sq, sk = p.get("Sq", s), p.get("Sk", s)
    varlen = p.get("varlen")
    if varlen:
        k_lens = tuple(int(n) for n in varlen)
        q_lens = (int(p["Sq"]),) * b if "Sq" in p else k_lens
        dense_q, dense_k = "Sq" in p, False
    else:
        q_lens, k_lens, dense_q, dense_k = (int(sq),) * b, (int(sk),) * b, True, True
    return Attention(
        batch=b,
        heads=h,
        kv_heads=int(p.get("Hkv", h)),
        head_dim=int(p["D"]),
        q_lens=q_lens,
        k_lens=k_lens,
        dense_q=dense_q,
        dense_k=dense_k,
        causal=bool(p.get("causal", False)),
        page_size=p.get("page_size"),
        dtype=str(p.get("dtype", "bf16")),
    )


def attended_pairs(q: int, k: int, causal: bool) -> float:
    """(query, key) pairs a sequence computes. Causal with q == k counts half, as FlashAttention's
    benchmarks (and this bot before) do; with q < k the exact bottom-right count."""
    if not causal:
        return float(q * k)
    if q == k:
        return q * k / 2
    return float(q * k - q * (q - 1) // 2)


def attention_flops(p: Mapping[str, Any]) -> float:
    """4 * H * D per attended pair: the two matmuls of the forward pass."""
    g = attention(p)
    return 4.0 * g.heads * g.head_dim * sum(attended_pairs(q, k, g.causal) for q, k in zip(g.q_lens, g.k_lens))


def attention_bytes(p: Mapping[str, Any]) -> float:
    """DRAM bytes at the least: Q, K, V read once, O written once (fp8 attention writes bf16), and
    for a paged cache the page table and the sequence lengths."""
    g = attention(p)
    elem = ELEMENT_BYTES[g.dtype]
    out = 2 if g.dtype == "fp8" else elem
    total = g.total_q * g.heads * g.head_dim * (elem + out) + 2 * g.total_k * g.kv_heads * g.head_dim * elem
    if g.page_size:
        total += 4 * (sum(g.pages) + g.batch)
    return float(total)


def attention_inputs(p: Mapping[str, Any]) -> frozenset[str]:
    return ATTN_INPUTS | (PAGED_INPUTS if p.get("page_size") else frozenset())


def needs_mapping(suite: str, p: Mapping[str, Any]) -> str | None:
    """Why a shape cannot be called with the default convention (then the subject declares `args`/`kwargs`)."""
    if suite == "fa" and (p.get("varlen") or p.get("page_size")):
        return "varlen and paged attention shapes pass cu_seqlens / block_table / ..."
    if suite == "gemm" and p.get("groups"):
        return "grouped GEMM shapes pass the group offsets"
    return None


@dataclass(frozen=True)
class Gemm:
    """One GEMM shape as problems: the M of each batch entry or group, N, K, and the operand types."""

    m_sizes: tuple[int, ...]
    n: int
    k: int
    batched: bool
    grouped: bool
    dtype_a: str
    dtype_b: str
    scaling: str | None
    layout: str

    @property
    def out_dtype(self) -> str:
        return "bf16" if self.dtype_a in FP8 else self.dtype_a


def gemm(p: Mapping[str, Any]) -> Gemm:
    dtype = str(p.get("dtype", "bf16"))
    if p.get("groups"):
        m_sizes, batched, grouped = tuple(int(m) for m in p["groups"]), False, True
    else:
        count = int(p.get("batch") or 1)
        m_sizes, batched, grouped = (int(p["M"]),) * count, bool(p.get("batch")), False
    return Gemm(
        m_sizes=m_sizes,
        n=int(p["N"]),
        k=int(p["K"]),
        batched=batched,
        grouped=grouped,
        dtype_a=dtype,
        dtype_b=str(p.get("dtype_b", dtype)),
        scaling=p.get("scaling"),
        layout=str(p.get("layout", "nn")),
    )


def gemm_flops(p: Mapping[str, Any]) -> float:
    g = gemm(p)
    return 2.0 * sum(g.m_sizes) * g.n * g.k


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def gemm_bytes(p: Mapping[str, Any]) -> float:
    """A, B and the scales read once, C written once (fp8 GEMMs write bf16)."""
    g = gemm(p)
    rows, mats = sum(g.m_sizes), len(g.m_sizes)
    total = (
        rows * g.k * ELEMENT_BYTES[g.dtype_a]
        + mats * g.k * g.n * ELEMENT_BYTES[g.dtype_b]
        + rows * g.n * ELEMENT_BYTES[g.out_dtype]
    )
    scales = {
        "tensor": 2 * mats,
        "row": rows + mats * g.n,
        "block": rows * _blocks(g.k) + mats * _blocks(g.k) * _blocks(g.n),
    }.get(g.scaling or "", 0)
    return float(total + 4 * scales)


def gemm_inputs(p: Mapping[str, Any]) -> frozenset[str]:
    names = GEMM_INPUTS | (SCALE_INPUTS if p.get("scaling") else frozenset()) | ({"tile"} if p.get("tile") else set())
    return names | (GROUP_INPUTS if p.get("groups") else frozenset())


def inputs_of(suite: str, p: Mapping[str, Any]) -> frozenset[str]:
    return attention_inputs(p) if suite == "fa" else gemm_inputs(p)

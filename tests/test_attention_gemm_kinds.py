"""Each new shape kind on the CPU against the float32 reference: GQA / MQA, Sq != Sk with a
bottom-right causal mask, variable lengths, a shuffled paged KV cache; fp8 e4m3 / e5m2 with tensor,
row and 1x128 / 128x128 block scales, batched and grouped GEMM. The control (torch) and torch
subjects called through a declared mapping must agree with the reference, and subjects that get
the convention wrong (top-left causal, cache read in order, scales dropped) must not."""

from __future__ import annotations

import math

import pytest
import torch

from benches import backends, shapes
from benches.backends.base import BackendUnavailable
from benches.correctness import compare
from benches.suites import attn_layout as lay
from benches.suites import flash_attention, fp8, gemm

CPU = backends.control("torch", "cpu")
ATTN = {
    "gqa": {"B": 2, "H": 8, "Hkv": 2, "S": 48, "D": 16, "causal": True},
    "mqa_decode": {"B": 3, "H": 4, "Hkv": 1, "Sq": 1, "Sk": 70, "D": 16, "causal": True},
    "sq_lt_sk": {"B": 2, "H": 4, "Hkv": 2, "Sq": 24, "Sk": 64, "D": 16, "causal": True},
    "varlen": {"B": 3, "H": 4, "Hkv": 2, "varlen": [5, 33, 17], "D": 16, "causal": True},
    "paged_decode": {
        "B": 4,
        "H": 4,
        "Hkv": 2,
        "Sq": 1,
        "varlen": {"min": 9, "max": 40, "seed": 2},
        "D": 16,
        "page_size": 8,
        "causal": True,
    },
    "paged_prefill": {"B": 2, "H": 2, "Sq": 12, "Sk": 29, "D": 16, "page_size": 4, "causal": True},
}
PAGED_MAP = {
    "args": ["q_thd", "k_cache", "v_cache", "block_table", "seqused_k", "cu_seqlens_q"],
    "kwargs": {"causal": "causal", "softmax_scale": "sm_scale"},
}
VARLEN_MAP = {
    "args": ["q_thd", "k_thd", "v_thd", "cu_seqlens_q", "cu_seqlens_k"],
    "kwargs": {"causal": "causal", "softmax_scale": "sm_scale"},
}


def attn(row: dict, seed: int = 0) -> tuple[dict, dict]:
    p = shapes.normalize_attention({"dtype": "fp32", **row})
    return p, flash_attention.make_inputs(p, "cpu", seed)


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Attention of one sequence written out element by element: q [sq, H, D], k, v [sk, Hkv, D]."""
    sq, h, _ = q.shape
    sk, hkv, _ = k.shape
    out = torch.empty_like(q, dtype=torch.float64)
    for head in range(h):
        kh = head // (h // hkv)
        for i in range(sq):
            last = i + sk - sq if causal else sk - 1
            s = torch.tensor([float(q[i, head].double() @ k[j, kh].double()) * scale for j in range(last + 1)])
            w = torch.softmax(s, 0)
            out[i, head] = (w[:, None] * v[: last + 1, kh].double()).sum(0)
    return out


def test_reference_matches_attention_written_out():
    """The suite's reference, against attention computed key by key (bottom-right causal, GQA)."""
    for name in ("sq_lt_sk", "varlen", "paged_decode"):
        _p, inputs = attn({**ATTN[name], "B": 2} if name == "sq_lt_sk" else ATTN[name])
        g = inputs["geometry"]
        ref = lay.as_thd(flash_attention.reference(inputs), g.dense_q)
        q = lay.as_thd(inputs["q"], g.dense_q)
        k, v = (lay.as_thd(inputs[n], g.dense_k) for n in ("k", "v"))
        qs = ks = 0
        for sq, sk in zip(g.q_lens, g.k_lens):
            want = naive(q[qs : qs + sq], k[ks : ks + sk], v[ks : ks + sk], g.causal, inputs["sm_scale"])
            assert torch.allclose(ref[qs : qs + sq].double(), want, atol=1e-5), name
            qs, ks = qs + sq, ks + sk


@pytest.mark.parametrize("name", sorted(ATTN))
def test_torch_control_matches_reference(name):
    _, inputs = attn(ATTN[name])
    prep = CPU.prepare("fa", inputs)
    chk = compare(prep.output(prep.run()), flash_attention.reference(inputs), 1e-5, 1e-5)
    assert chk.ok, (name, prep.impl, chk)


@pytest.mark.parametrize(
    "name,mapping",
    [("paged_decode", PAGED_MAP), ("paged_prefill", PAGED_MAP), ("varlen", VARLEN_MAP), ("sq_lt_sk", VARLEN_MAP)],
)
def test_subjects_with_their_own_convention(name, mapping):
    entry = "paged_attention" if mapping is PAGED_MAP else "varlen_attention"
    _, inputs = attn(ATTN[name])
    sub = backends.subject({"entry": f"benches.kernels.torch_ref:{entry}", "adapter": "torch", **mapping}, "cpu")
    prep = sub.prepare("fa", inputs)
    assert compare(prep.output(prep.run()), flash_attention.reference(inputs), 1e-5, 1e-5).ok


def test_default_convention_takes_gqa_and_fewer_queries():
    for name in ("gqa", "mqa_decode", "sq_lt_sk"):
        _, inputs = attn(ATTN[name])
        prep = backends.subject(
            {"entry": "benches.kernels.torch_ref:attention", "adapter": "torch", "layout": "bhsd"}, "cpu"
        ).prepare("fa", inputs)
        assert compare(prep.output(prep.run()), flash_attention.reference(inputs), 1e-5, 1e-5).ok, name
    _, inputs = attn(ATTN["varlen"])
    with pytest.raises(ValueError, match="declare the subject's args / kwargs"):
        backends.subject({"entry": "benches.kernels.torch_ref:attention"}, "cpu").prepare("fa", inputs)


def test_top_left_causal_is_caught_when_sq_lt_sk():
    _, inputs = attn(ATTN["sq_lt_sk"])
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = inputs["q"], inputs["k"].repeat_interleave(2, 1), inputs["v"].repeat_interleave(2, 1)
    wrong = sdpa(q, k, v, is_causal=True, scale=inputs["sm_scale"])  # top-left: SDPA's own alignment
    assert not compare(wrong, flash_attention.reference(inputs), 1e-3, 1e-3).ok


def test_page_table_is_shuffled_and_stale_slots_hold_garbage():
    _p, inputs = attn(ATTN["paged_decode"])
    g, table = inputs["geometry"], inputs["block_table"]
    used = torch.cat([table[i, :n] for i, n in enumerate(g.pages)])
    assert sorted(used.tolist()) == list(range(sum(g.pages)))  # every page handed out once
    assert used.tolist() != sorted(used.tolist())  # not in order
    k_thd = lay.as_thd(inputs["k"], g.dense_k)
    start = 0
    for i, n in enumerate(g.k_lens):  # each key where its table says
        for t in (0, n - 1):
            page = int(table[i, t // g.page_size])
            assert torch.equal(inputs["k_cache"][page, t % g.page_size], k_thd[start + t])
        start += n
    indptr, indices, last = inputs["kv_indptr"], inputs["kv_indices"], inputs["kv_last_page_len"]
    assert indptr.tolist() == [0, *torch.tensor(g.pages).cumsum(0).tolist()] and torch.equal(indices, used)
    assert last.tolist() == [(n - 1) % g.page_size + 1 for n in g.k_lens]
    # A kernel that walks the cache in page order instead of through the table is wrong.
    in_order = {
        **inputs,
        "block_table": torch.arange(table.numel(), dtype=torch.int32).reshape(table.shape) % sum(g.pages),
    }
    sub = backends.subject(
        {"entry": "benches.kernels.torch_ref:paged_attention", "adapter": "torch", **PAGED_MAP}, "cpu"
    )
    prep = sub.prepare("fa", in_order)
    assert not compare(prep.output(prep.run()), flash_attention.reference(inputs), 1e-3, 1e-3).ok


def test_a_plain_attention_shape_draws_what_it_always_drew():
    p = {"B": 1, "H": 2, "S": 16, "D": 8, "dtype": "bf16", "causal": False}
    inputs = flash_attention.make_inputs(p, "cpu", 7)
    gen = torch.Generator().manual_seed(7)
    old = [torch.randn((1, 2, 16, 8), generator=gen, dtype=torch.bfloat16) for _ in range(3)]
    assert all(torch.equal(inputs[n], t) for n, t in zip("qkv", old)) and inputs["sm_scale"] == 1 / math.sqrt(8)


SCALED = [(dt, sc) for dt in ("fp8_e4m3", "fp8_e5m2") for sc in ("tensor", "row", "block")]


@pytest.mark.parametrize("dtype,scaling", SCALED)
def test_scaled_fp8_operands(dtype, scaling):
    p = shapes.normalize_gemm({"M": 64, "N": 256, "K": 384, "dtype": dtype, "scaling": scaling, "layout": "nt"})
    inputs = gemm.make_inputs(p, "cpu", 1)
    a, b = inputs["a"], inputs["b"]
    assert a.dtype == b.dtype == (torch.float8_e4m3fn if dtype == "fp8_e4m3" else torch.float8_e5m2)
    assert b.shape == (384, 256) and b.stride() == (1, 384)  # nt: B held as [N, K]
    want = {"tensor": ((), ()), "row": ((64, 1), (1, 256)), "block": ((64, 3), (3, 2))}[scaling]
    assert (tuple(inputs["a_scale"].shape), tuple(inputs["b_scale"].shape)) == want
    # Each scale's group reaches the format's maximum: the quantization used the full range.
    top = fp8.fp8_max(a.dtype)
    assert float(a.float().abs().max()) == top and float(b.float().abs().max()) == top
    ref = gemm.reference(inputs)
    # The reference is the product of the dequantized operands, written here per 128-deep K slice
    # (how blockwise kernels apply the scales) for the block case.
    if scaling == "block":
        sa, sb = inputs["a_scale"], inputs["b_scale"]
        acc = torch.zeros(64, 256)
        for kb in range(3):
            ks = slice(128 * kb, 128 * (kb + 1))
            part = a[:, ks].float() @ b[ks].float()
            acc += part * sa[:, kb : kb + 1] * sb[kb].repeat_interleave(128)[None, :]
        assert torch.allclose(acc, ref, rtol=1e-4, atol=1e-3 * float(ref.abs().max()))
    prep = CPU.prepare("gemm", inputs)
    assert compare(prep.output(prep.run()), ref, 1e-4, 1e-4).ok
    sub = backends.subject({"entry": "benches.kernels.torch_ref:scaled_matmul", "adapter": "torch"}, "cpu")
    sprep = sub.prepare("gemm", inputs)
    assert compare(sprep.output(sprep.run()), ref, 3e-2, 3e-2).ok


def test_a_kernel_that_drops_the_scales_is_wrong():
    for scaling in ("row", "block"):
        p = shapes.normalize_gemm({"M": 64, "N": 256, "K": 256, "dtype": "fp8_e4m3", "scaling": scaling})
        inputs = gemm.make_inputs(p, "cpu", 0)
        unscaled = inputs["a"].float() @ inputs["b"].float()
        scale = float(gemm.reference(inputs).abs().max()) / float(unscaled.abs().max())
        assert not compare(unscaled * scale, gemm.reference(inputs), 3e-2, 3e-2).ok  # even rescaled as a whole


def test_batched_and_grouped():
    p = shapes.normalize_gemm({"M": 16, "N": 32, "K": 64, "batch": 3, "dtype": "fp32", "layout": "tn"})
    inputs = gemm.make_inputs(p, "cpu", 0)
    assert inputs["a"].shape == (3, 16, 64) and not inputs["a"].is_contiguous()
    ref = gemm.reference(inputs)
    assert all(torch.allclose(ref[i], inputs["a"][i] @ inputs["b"][i], atol=1e-5) for i in range(3))
    prep = CPU.prepare("gemm", inputs)
    assert compare(prep.output(prep.run()), ref, 1e-5, 1e-5).ok
    p = shapes.normalize_gemm({"groups": [3, 20, 9], "N": 32, "K": 64, "dtype": "fp32", "layout": "nt"})
    inputs = gemm.make_inputs(p, "cpu", 0)
    a, b = inputs["a"], inputs["b"]
    assert a.shape == (32, 64) and b.shape == (3, 64, 32) and inputs["group_offsets"].tolist() == [3, 23, 32]
    ref = gemm.reference(inputs)
    assert torch.allclose(ref[3:23], a[3:23] @ b[1], atol=1e-5)
    prep = CPU.prepare("gemm", inputs)
    assert compare(prep.output(prep.run()), ref, 1e-5, 1e-5).ok and "per group" in prep.impl
    sub = backends.subject(
        {"entry": "benches.kernels.torch_ref:grouped_matmul", "adapter": "torch", "args": ["a", "b", "group_offsets"]},
        "cpu",
    )
    sprep = sub.prepare("gemm", inputs)
    assert compare(sprep.output(sprep.run()), ref, 1e-5, 1e-5).ok
    with pytest.raises(ValueError, match="grouped GEMM shapes pass the group offsets"):
        backends.subject({"entry": "benches.kernels.torch_ref:matmul"}, "cpu").prepare("gemm", inputs)


def test_a_plain_gemm_shape_draws_what_it_always_drew():
    p = {"M": 16, "N": 8, "K": 32, "dtype": "fp8", "layout": "nt"}
    inputs = gemm.make_inputs(p, "cpu", 3)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn((16, 32), generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn((8, 32), generator=gen).to(torch.float8_e4m3fn).t()
    assert torch.equal(inputs["a"].float(), a.float()) and torch.equal(inputs["b"].float(), b.float())
    assert inputs["out_dtype"] == torch.bfloat16 and inputs["scaling"] is None


def test_flydsl_refuses_the_shapes_it_does_not_pass():
    from benches.backends.flydsl import unsupported

    _, paged = attn(ATTN["paged_decode"])
    assert "dense attention only" in unsupported("fa", paged)
    _, dense = attn(ATTN["gqa"])
    assert unsupported("fa", dense) is None
    p = shapes.normalize_gemm({"M": 64, "N": 128, "K": 128, "dtype": "fp8_e4m3", "scaling": "row"})
    assert "plain 2-D GEMM" in unsupported("gemm", gemm.make_inputs(p, "cpu", 0))


def test_fp8_attention_has_no_sdpa_control():
    _, inputs = attn({**ATTN["gqa"], "dtype": "fp8"})
    with pytest.raises(BackendUnavailable, match="no fp8 attention"):
        CPU.prepare("fa", inputs)

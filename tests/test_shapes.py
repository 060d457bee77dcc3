"""benches/shapes.py: the shape rules the config check and the trial share, the FLOP and byte counts
of every shape kind (worked out by hand here), and the names a subject's mapping may use."""

from __future__ import annotations

import pytest

from benches import shapes
from benches.backends.callmap import attention_view, gemm_view
from benches.suites import flash_attention, gemm


def test_plain_rows_keep_the_params_they_always_had():
    row = {"name": "s", "B": 2, "H": 32, "S": 4096, "D": 128, "dtype": "bf16", "causal": True}
    assert shapes.normalize_attention(row) == {"B": 2, "H": 32, "S": 4096, "D": 128, "dtype": "bf16", "causal": True}
    assert shapes.normalize_gemm({"M": 8, "N": 16, "K": 32}) == {
        "M": 8,
        "N": 16,
        "K": 32,
        "dtype": "bf16",
        "layout": "nn",
    }


@pytest.mark.parametrize(
    "row,key,problem",
    [
        ({"B": 1, "H": 8, "Hkv": 3, "S": 64, "D": 16}, "Hkv", "must divide H=8"),
        ({"B": 1, "H": 8, "Sq": 64, "D": 16}, "S", "missing"),
        ({"B": 1, "H": 8, "Sq": 65, "Sk": 64, "D": 16, "causal": True}, "Sq", "give Sq <= Sk"),
        ({"B": 2, "H": 8, "varlen": [3], "D": 16}, "varlen", "must give B=2 lengths"),
        ({"B": 2, "H": 8, "varlen": [3, 4], "S": 4, "D": 16}, "varlen", "leave out S and Sk"),
        ({"B": 2, "H": 8, "varlen": {"min": 9, "max": 4}, "D": 16}, "varlen", "min 9 > max 4"),
        ({"B": 2, "H": 8, "varlen": {"min": 1, "max": 4, "mean": 2}, "D": 16}, "varlen.mean", "unknown key"),
        ({"B": 2, "H": 8, "varlen": {"max": 4}, "D": 16}, "varlen.min", "missing"),
        ({"B": 1, "H": 8, "S": 64, "D": 16, "page_size": 0}, "page_size", "must be > 0"),
        ({"B": 1, "H": 8, "S": 64, "D": 16, "causal": "yes"}, "causal", "must be bool"),
    ],
)
def test_bad_attention_rows_name_their_key(row, key, problem):
    with pytest.raises(shapes.ShapeError) as info:
        shapes.normalize_attention(row)
    assert info.value.key == key and problem in info.value.problem


@pytest.mark.parametrize(
    "row,key,problem",
    [
        ({"M": 8, "N": 16, "K": 32, "dtype": "fp8_e4m3"}, "scaling", "missing"),
        ({"M": 8, "N": 16, "K": 32, "dtype": "fp8", "scaling": "row"}, "scaling", "unit scales"),
        ({"M": 8, "N": 100, "K": 256, "dtype": "fp8_e4m3", "scaling": "block"}, "scaling", "multiples of 128"),
        ({"M": 8, "N": 16, "K": 32, "scaling": "row"}, "scaling", "only for fp8"),
        ({"M": 8, "N": 16, "K": 32, "dtype_b": "fp8_e5m2"}, "dtype_b", "only for"),
        ({"groups": [4, 8], "M": 12, "N": 16, "K": 32}, "groups", "leave out M"),
        ({"groups": [], "N": 16, "K": 32}, "groups", "non-empty"),
        ({"groups": [4, 8], "N": 16, "K": 32, "layout": "tn"}, "layout", "row-major"),
        ({"M": 8, "N": 16, "K": 32, "batch": -1}, "batch", "must be > 0"),
    ],
)
def test_bad_gemm_rows_name_their_key(row, key, problem):
    with pytest.raises(shapes.ShapeError) as info:
        shapes.normalize_gemm(row)
    assert info.value.key == key and problem in info.value.problem


def test_varlen_draw_is_seeded_and_stable():
    a = shapes.varlen_lengths({"min": 100, "max": 200, "seed": 3}, 50)
    assert a == shapes.varlen_lengths({"min": 100, "max": 200, "seed": 3}, 50)
    assert a != shapes.varlen_lengths({"min": 100, "max": 200, "seed": 4}, 50)
    assert len(a) == 50 and min(a) >= 100 and max(a) <= 200 and len(set(a)) > 10
    # Python's own generator: the same lengths on every machine and version this runs on.
    assert shapes.varlen_lengths({"min": 1, "max": 1000, "seed": 0}, 3) == (865, 395, 777)


def test_geometry_of_each_attention_kind():
    g = shapes.attention(
        shapes.normalize_attention({"B": 3, "H": 8, "Hkv": 2, "Sq": 1, "varlen": [5, 9, 2], "D": 16, "page_size": 4})
    )
    assert g.q_lens == (1, 1, 1) and g.k_lens == (5, 9, 2) and g.dense_q and not g.dense_k
    assert g.pages == (2, 3, 1) and g.kv_heads == 2
    g = shapes.attention(shapes.normalize_attention({"B": 2, "H": 8, "varlen": [5, 9], "D": 16}))
    assert g.q_lens == g.k_lens == (5, 9) and not g.dense_q and g.total_q == 14


def test_attention_flops_count_attended_pairs():
    assert shapes.attended_pairs(4, 4, False) == 16
    assert shapes.attended_pairs(4, 4, True) == 8  # the S^2/2 convention for square causal blocks
    # Bottom-right causal, 2 queries over 5 keys: rows see 4 and 5 keys.
    assert shapes.attended_pairs(2, 5, True) == 9
    assert shapes.attended_pairs(1, 2300, True) == 2300  # decode: the one row sees every key
    p = {"B": 2, "H": 4, "Hkv": 2, "Sq": 2, "Sk": 5, "D": 8, "causal": True}
    assert flash_attention.flops(p) == 4 * 4 * 8 * 2 * 9
    p = {"B": 2, "H": 4, "varlen": (3, 5), "D": 8, "causal": False}
    assert flash_attention.flops(p) == 4 * 4 * 8 * (9 + 25)
    assert flash_attention.flops({"B": 2, "H": 32, "S": 16384, "D": 128}) == 4 * 2 * 32 * 16384**2 * 128


def test_attention_bytes():
    # Decode: q and o 200 rows of 16 heads, K and V 200 x 2300 keys of 8 heads, fp16; the page table
    # (144 pages a sequence) and the 200 lengths as int32.
    p = {"B": 200, "H": 16, "Hkv": 8, "Sq": 1, "Sk": 2300, "D": 128, "dtype": "fp16", "page_size": 16}
    qo = 200 * 16 * 128 * 2 * 2
    kv = 2 * 200 * 2300 * 8 * 128 * 2
    assert flash_attention.bytes(p) == qo + kv + 4 * (200 * 144 + 200)
    # fp8 attention reads one byte an element and writes bf16.
    assert flash_attention.bytes({"B": 1, "H": 1, "S": 4, "D": 2, "dtype": "fp8"}) == 4 * 2 * (1 + 2) + 2 * 4 * 2


def test_gemm_flops_and_bytes():
    plain = {"M": 4, "N": 8, "K": 16, "dtype": "bf16"}
    assert gemm.flops(plain) == 2 * 4 * 8 * 16
    assert gemm.bytes(plain) == 2 * (4 * 16 + 16 * 8 + 4 * 8)
    grouped = {"groups": (3, 5), "N": 8, "K": 16, "dtype": "fp32"}
    assert gemm.flops(grouped) == 2 * 8 * 8 * 16
    assert gemm.bytes(grouped) == 4 * (8 * 16 + 2 * 16 * 8 + 8 * 8)
    batched = {"M": 4, "N": 8, "K": 16, "batch": 3, "dtype": "fp16"}
    assert gemm.flops(batched) == 3 * 2 * 4 * 8 * 16
    block = {"M": 256, "N": 256, "K": 512, "dtype": "fp8_e4m3", "scaling": "block"}
    data = 256 * 512 + 512 * 256 + 2 * 256 * 256  # fp8 in, bf16 out
    assert gemm.bytes(block) == data + 4 * (256 * 4 + 4 * 2)
    row = {**block, "scaling": "row"}
    assert gemm.bytes(row) == data + 4 * (256 + 256)
    assert gemm.bytes({**block, "scaling": "tensor"}) == data + 4 * 2


def test_every_mapping_name_the_config_accepts_has_a_view_in_the_trial():
    """The config check and the adapters agree on the names: a name the check lets through but the
    trial cannot make would fail every commit of a bisection."""
    p = shapes.normalize_attention(
        {"B": 2, "H": 4, "Hkv": 2, "Sq": 1, "varlen": [3, 9], "D": 16, "page_size": 4, "dtype": "fp32"}
    )
    inputs = flash_attention.make_inputs(p, "cpu", 0)
    view = attention_view(inputs, "bshd", packed_out=False)
    assert shapes.attention_inputs(p) <= set(view)
    for name in shapes.attention_inputs(p):
        view[name]()
    plain = shapes.normalize_attention({"B": 1, "H": 2, "S": 8, "D": 16, "dtype": "fp32"})
    assert not shapes.attention_inputs(plain) & {"k_cache", "block_table"}
    g = shapes.normalize_gemm({"groups": [4, 12], "N": 128, "K": 256, "dtype": "fp8_e4m3", "scaling": "block"})
    view = gemm_view(gemm.make_inputs(g, "cpu", 0))
    assert shapes.gemm_inputs(g) <= set(view)
    assert view["b_nk"]().shape == (2, 128, 256) and view["b_scale_nk"]().shape == (2, 1, 2)
    assert shapes.needs_mapping("gemm", g) and not shapes.needs_mapping("gemm", {"M": 1})

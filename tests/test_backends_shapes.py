"""The adapters and controls for the new shapes without a GPU: the Triton kernels under the
interpreter at small fp16 / fp8 sizes, the SDPA forms per shape kind, the scaled-GEMM control's
choice and fall-back, aiter's a8w8 / blockscale operands run through stand-ins written from aiter's
documented semantics (its attention controls: tests/test_aiter_control.py), and the mapping's
preallocated output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from benches import shapes
from benches.backends import aiter_calls, gemm_control, sdpa
from benches.backends.base import BackendUnavailable
from benches.correctness import compare
from benches.kernels import torch_ref
from benches.suites import flash_attention, gemm


def attn(row: dict) -> dict:
    return flash_attention.make_inputs(shapes.normalize_attention({"dtype": "fp32", **row}), "cpu", 0)


def scaled(row: dict) -> dict:
    return gemm.make_inputs(shapes.normalize_gemm(row), "cpu", 0)


def test_triton_kernels_under_interpreter():
    pytest.importorskip("triton")
    code = textwrap.dedent("""
        from benches import backends, shapes, suites
        from benches.correctness import compare
        ATTN = {"entry": "benches.kernels.triton_attn:varlen_attention", "adapter": "triton",
                "kwargs": {"cu_seqlens_q": "cu_seqlens_q", "seqused_k": "seqused_k", "max_seqlen_q": "max_seqlen_q",
                           "softmax_scale": "sm_scale", "causal": "causal"}}
        PACKED = {**ATTN, "args": ["q_thd", "k_thd", "v_thd"],
                  "kwargs": {**ATTN["kwargs"], "cu_seqlens_k": "cu_seqlens_k"}}
        PAGED = {**ATTN, "args": ["q_thd", "k_cache", "v_cache"],
                 "kwargs": {**ATTN["kwargs"], "block_table": "block_table", "out": "out"}}
        GEMM = {"entry": "benches.kernels.triton_fp8_gemm:scaled_matmul", "adapter": "triton",
                "args": ["a", "b", "a_scale", "b_scale"], "kwargs": {"out_dtype": "out_dtype"}}
        CASES = [
            ("fa", PACKED, {"B": 2, "H": 4, "Hkv": 2, "varlen": [17, 40], "D": 16, "dtype": "fp16", "causal": True}),
            ("fa", PACKED, {"B": 2, "H": 2, "Hkv": 1, "Sq": 20, "Sk": 50, "D": 32, "dtype": "fp16", "causal": True}),
            ("fa", PAGED, {"B": 3, "H": 4, "Hkv": 2, "Sq": 1, "varlen": [9, 37, 16], "D": 16, "dtype": "fp16",
                           "causal": True, "page_size": 8}),
            ("fa", PAGED, {"B": 1, "H": 2, "Sq": 24, "Sk": 64, "D": 16, "dtype": "fp16", "causal": True,
                           "page_size": 16}),
            ("gemm", GEMM, {"M": 48, "N": 256, "K": 256, "dtype": "fp8_e4m3", "scaling": "block", "layout": "nt"}),
            ("gemm", GEMM, {"M": 40, "N": 64, "K": 256, "dtype": "fp8_e5m2", "dtype_b": "fp8_e4m3", "scaling": "row"}),
            ("gemm", GEMM, {"M": 32, "N": 64, "K": 128, "dtype": "fp8_e4m3", "scaling": "tensor"}),
        ]
        for suite, sub, row in CASES:
            p = shapes.normalize_attention(row) if suite == "fa" else shapes.normalize_gemm(row)
            inputs = suites.get(suite).make_inputs(p, "cpu", 0)
            prep = backends.subject(sub, "cpu").prepare(suite, inputs)
            tol = 5e-3 if suite == "fa" else 3e-2
            chk = compare(prep.output(prep.run()), suites.get(suite).reference(inputs), tol, tol)
            assert chk.ok, (row, chk)
            print("OK", suite, chk.max_rel_err)
        # A kernel that reads the cache in order, not through the page table, is caught.
        p = shapes.normalize_attention(CASES[2][2])
        inputs = suites.get("fa").make_inputs(p, "cpu", 0)
        g = inputs["geometry"]
        import torch
        table = torch.arange(inputs["block_table"].numel(), dtype=torch.int32).reshape(g.batch, -1) % sum(g.pages)
        prep = backends.subject(PAGED, "cpu").prepare("fa", {**inputs, "block_table": table})
        assert not compare(prep.output(prep.run()), suites.get("fa").reference(inputs), 5e-3, 5e-3).ok
        print("OK shuffled")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("OK") == 8


def test_sdpa_form_per_shape_kind():
    assert sdpa.plan(attn({"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": True})).impl == "sdpa enable_gqa"
    p = sdpa.plan(attn({"B": 1, "H": 4, "Hkv": 2, "Sq": 1, "Sk": 8, "D": 16, "causal": True}))
    assert p.mask is None and not p.is_causal and p.enable_gqa  # one row sees every key: no mask needed
    p = sdpa.plan(attn({"B": 1, "H": 4, "Hkv": 2, "Sq": 3, "Sk": 8, "D": 16, "causal": True}))
    assert p.mask is not None and p.mask.shape == (3, 8) and p.k.shape[1] == 4 and not p.enable_gqa
    assert p.mask[0].tolist() == [True] * 6 + [False] * 2  # bottom-right
    p = sdpa.plan(attn({"B": 2, "H": 4, "varlen": [3, 7], "D": 16, "causal": True}))
    assert p.q.shape == (2, 4, 7, 16) and p.mask.shape == (2, 1, 7, 7) and "padded" in p.impl
    assert not p.mask[0, 0, 3:, 1:].any() and p.mask[0, 0, 3:, 0].all()  # padding rows: key 0 only


def test_cuda_gemm_control_choices_and_fall_back_on_cpu_tensors():
    """The NVIDIA control's code path run on CPU tensors (torch's CPU _scaled_mm takes tensor- and
    row-wise, refuses blockwise): what it chooses, and that a refusal falls back and says so."""
    ref_of = gemm.reference
    row = scaled({"M": 32, "N": 256, "K": 256, "dtype": "fp8_e4m3", "scaling": "row", "layout": "nt"})
    prep = gemm_control.cuda(row)
    assert prep.impl == "torch._scaled_mm row-wise" and compare(prep.run(), ref_of(row), 3e-2, 3e-2).ok
    block = scaled({"M": 32, "N": 256, "K": 256, "dtype": "fp8_e4m3", "scaling": "block"})
    got = gemm_control.scaled_mm_call(block)
    assert not isinstance(got, str) and "BlockWise1x128" in got[1]
    prep = gemm_control.cuda(block)
    assert prep.impl.startswith(
        "dequantized to bf16 (untimed), bf16 matmul: torch.nn.functional.scaled_mm "
        "BlockWise1x128 x BlockWise128x128 refused: "
    )
    assert compare(prep.run(), ref_of(block), 3e-2, 3e-2).ok
    e5 = scaled({"M": 32, "N": 64, "K": 128, "dtype": "fp8_e5m2", "scaling": "tensor"})
    assert gemm_control.scaled_mm_call(e5) == "cuBLAS has no e5m2 x e5m2 fp8 matmul"
    mixed = scaled({"M": 32, "N": 64, "K": 128, "dtype": "fp8_e4m3", "dtype_b": "fp8_e5m2", "scaling": "row"})
    assert gemm_control.scaled_mm_call(mixed) == "torch._scaled_mm's row-wise scaling takes e4m3 only"
    grouped = scaled({"groups": [8, 24], "N": 128, "K": 128, "dtype": "fp8_e4m3", "scaling": "block"})
    prep = gemm_control.cuda(grouped)
    assert "batched / grouped" in prep.impl and compare(prep.run(), ref_of(grouped), 3e-2, 3e-2).ok


def _fake_aiter() -> SimpleNamespace:
    """aiter's calls as its docstrings and op_tests define them, in torch."""

    def gemm_a8w8(xq, wq, x_scale, w_scale, bias=None, dtype=torch.bfloat16):
        assert x_scale.shape == (xq.shape[0], 1) and w_scale.shape == (wq.shape[0], 1)
        return ((xq.float() @ wq.float().t()) * x_scale * w_scale.t()).to(dtype)

    def gemm_a8w8_blockscale(xq, wq, x_scale, w_scale, dtype=torch.bfloat16):
        (m, k), n = xq.shape, wq.shape[0]
        assert x_scale.shape == (m, k // 128) and w_scale.shape == (n // 128, k // 128)
        x = xq.float() * x_scale.repeat_interleave(128, 1)
        w = wq.float() * w_scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
        return (x @ w.t()).to(dtype)

    return SimpleNamespace(gemm_a8w8=gemm_a8w8, gemm_a8w8_blockscale=gemm_a8w8_blockscale)


def _run(call: aiter_calls.Call) -> torch.Tensor:
    return call.output(getattr(_fake_aiter(), call.fn)(*call.args, **call.kwargs))


@pytest.mark.parametrize(
    "scaling,fn", [("tensor", "gemm_a8w8"), ("row", "gemm_a8w8"), ("block", "gemm_a8w8_blockscale")]
)
def test_aiter_scaled_gemm_operands(scaling, fn):
    inputs = scaled({"M": 32, "N": 256, "K": 384, "dtype": "fp8_e4m3", "scaling": scaling, "layout": "nt"})
    call = aiter_calls.scaled_gemm(inputs, torch.float8_e4m3fn)
    assert call.fn == fn and call.args[1].shape == (256, 384) and call.args[1].is_contiguous()
    assert compare(_run(call), gemm.reference(inputs), 3e-2, 3e-2).ok
    with pytest.raises(BackendUnavailable, match="e4m3 on both sides"):
        aiter_calls.scaled_gemm(scaled({"M": 32, "N": 128, "K": 128, "dtype": "fp8_e5m2", "scaling": scaling}), None)
    with pytest.raises(BackendUnavailable, match="e4m3fnuz"):
        aiter_calls.scaled_gemm(inputs, torch.float8_e4m3fnuz)
    with pytest.raises(BackendUnavailable, match="batched or grouped"):
        aiter_calls.scaled_gemm(
            scaled({"M": 32, "N": 128, "K": 128, "batch": 2, "dtype": "fp8_e4m3", "scaling": scaling}), None
        )


def test_mapped_kernel_writing_into_out():
    inputs = attn({"B": 2, "H": 4, "Hkv": 2, "Sq": 1, "varlen": [9, 20], "D": 16, "page_size": 4, "causal": True})

    def kernel(q, k_cache, v_cache, block_table, seqused_k, cu_seqlens_q, out=None, causal=False, softmax_scale=None):
        out.copy_(
            torch_ref.paged_attention(q, k_cache, v_cache, block_table, seqused_k, cu_seqlens_q, causal, softmax_scale)
        )

    from benches.backends.callmap import mapped

    prep = mapped(
        kernel,
        "fa",
        inputs,
        "bshd",
        ["q_thd", "k_cache", "v_cache", "block_table", "seqused_k", "cu_seqlens_q"],
        {"out": "out", "causal": "causal", "softmax_scale": "sm_scale"},
        {},
    )
    got = prep.output(prep.run())
    assert got.shape == (2, 4, 1, 16) and compare(got, flash_attention.reference(inputs), 1e-5, 1e-5).ok
    with pytest.raises(ValueError, match="names block_table, which this fa shape does not have"):
        mapped(kernel, "fa", attn({"B": 1, "H": 2, "S": 8, "D": 16}), "bhsd", ["block_table"], {}, {})

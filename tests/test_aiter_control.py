"""The aiter attention controls on the CPU, through stand-in `aiter` and `flydsl` packages written
to disk by a fixture and imported from sys.path as a trial imports them (the checkout under test
first). The stand-ins keep the behaviour read in ROCm/aiter@e4048607 that the control depends on:
`flash_attn_varlen_func` imports the top-level `flydsl` on every call and then ends in
`FlashAttnVarlenFunc.apply`; `mha_batch_prefill_func` has kernels for page sizes 1, 16 and 1024
only, may read 256 page indices past the last valid one, takes a [tokens, Hkv, D] cache for page
size 1 and fp8 only with descales. Refusals before the trial: `bisector check-config`."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

from benches import control_limits, shapes
from benches.backends import aiter_calls
from benches.backends.aiter import AiterControl
from benches.backends.base import BackendUnavailable
from benches.correctness import compare
from benches.suites import flash_attention

MHA = """
import torch
from benches.kernels import torch_ref

ENABLE_CK = True


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, min_seqlen_q, dropout_p,
                softmax_scale, logits_soft_cap, causal, window_size, bias, alibi_slopes, deterministic, return_lse,
                return_softmax, block_table, out, is_grad_enabled, cu_seqlens_q_padded=None,
                cu_seqlens_k_padded=None, is_v3_atomic_fp32=True, how_v3_bf16_cvt=1, sink_ptr=None):
        assert window_size == (-1, -1, 0) and dropout_p == 0.0 and min_seqlen_q == 0 and not return_lse
        assert q.dim() == 3 and cu_seqlens_q.dtype == torch.int32 and isinstance(max_seqlen_k, int)
        return torch_ref.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, softmax_scale)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, min_seqlen_q=0,
                           dropout_p=0.0, softmax_scale=None, logits_soft_cap=0.0, causal=False, **_):
    from flydsl import fmha  # aiter: `from .flydsl.fmha_kernels import ...`, on every call
    return FlashAttnVarlenFunc.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, min_seqlen_q,
                                     dropout_p, softmax_scale, logits_soft_cap, causal, (-1, -1, 0), None, None,
                                     False, False, False, None, None, False)


def mha_batch_prefill_func(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, kv_last_page_lens=None, q_descale=None,
                           k_descale=None, v_descale=None, kv_block_descale=None, **_):
    vector = 16 // k.element_size()
    if q.shape[-1] % vector:
        raise ValueError("Batch prefill requires head size divisible by vector size")
    page = 1 if k.dim() == 3 else k.shape[1]
    if page not in (1, 16, 1024) or (page == 1) != (k.dim() == 3):
        raise RuntimeError(f"no matching kernel found (page_size={page}, k.dim()={k.dim()})")
    used = int(kv_indptr[-1])
    if kv_page_indices.numel() < used + 256:
        raise RuntimeError("memory access fault: page indices read past the buffer")
    fp8 = q.dtype == torch.float8_e4m3fn
    if fp8 and (q_descale is None or k_descale is None or v_descale is None) and kv_block_descale is None:
        raise RuntimeError("no matching kernel found: fp8 batch prefill needs per-tensor or KV-blockscale descales")
    ptr, idx, last = kv_indptr.tolist(), kv_page_indices.tolist(), kv_last_page_lens.tolist()
    keys, values, lens = [], [], []
    for i in range(len(ptr) - 1):
        pages = idx[ptr[i]:ptr[i + 1]]
        n = (len(pages) - 1) * page + last[i]
        keys.append(k[pages].reshape(-1, *k.shape[-2:])[:n].float())
        values.append(v[pages].reshape(-1, *v.shape[-2:])[:n].float())
        lens.append(n)
    cu_k = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32)
    out = torch_ref.varlen_attention(q.float(), torch.cat(keys), torch.cat(values), cu_seqlens_q, cu_k, causal,
                                     softmax_scale)
    return out.to(torch.bfloat16 if fp8 else q.dtype)
"""

FLYDSL = """
import os
from pathlib import Path

Path(os.environ["SUBJECT_FLYDSL_MARK"]).write_text("imported")
raise ImportError("the subject's flydsl (this FlyDSL commit cannot be imported by aiter's code)")
"""


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """A checkout under test holding a `flydsl` that records being imported and raises, first on
    sys.path, and a stand-in `aiter` after it; both forgotten afterwards."""
    subject, site = tmp_path / "checkout", tmp_path / "site"
    (subject / "flydsl").mkdir(parents=True)
    (subject / "flydsl" / "__init__.py").write_text(FLYDSL)
    (site / "aiter" / "ops").mkdir(parents=True)
    (site / "aiter" / "__init__.py").write_text("from .ops.mha import *  # noqa: F401,F403\n")
    (site / "aiter" / "ops" / "__init__.py").write_text("")
    (site / "aiter" / "ops" / "mha.py").write_text(textwrap.dedent(MHA))
    mark = tmp_path / "flydsl-imported"
    monkeypatch.setenv("SUBJECT_FLYDSL_MARK", str(mark))
    monkeypatch.setenv("AITER_LOG_TUNED_CONFIG", "1")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(subject))  # the trial's order: the checkout first
    yield mark
    for name in [m for m in sys.modules if m.split(".")[0] in ("aiter", "flydsl")]:
        del sys.modules[name]


def inputs(row: dict) -> dict:
    return flash_attention.make_inputs(shapes.normalize_attention({"dtype": "bf16", **row}), "cpu", 0)


def test_varlen_control_never_imports_the_subjects_flydsl(stand_ins):
    control = AiterControl(need_gpu=False)
    shape = inputs({"B": 3, "H": 4, "Hkv": 2, "varlen": [5, 30, 12], "D": 16, "causal": True})
    prep = control.prepare("fa", shape)
    got = prep.output(prep.run())
    assert compare(got, flash_attention.reference(shape), 2e-2, 2e-2).ok
    assert prep.impl.startswith("aiter FlashAttnVarlenFunc (CK")
    assert not stand_ins.exists() and "flydsl" not in sys.modules
    # The stand-in is faithful: aiter's public varlen function would have imported the subject.
    with pytest.raises(ImportError, match="the subject's flydsl"):
        control.aiter.flash_attn_varlen_func(None, None, None, None, None, 1, 1)
    assert stand_ins.exists()


def test_varlen_control_refuses_an_aiter_without_ck(stand_ins):
    control = AiterControl(need_gpu=False)
    control.aiter.ops.mha.ENABLE_CK = False
    with pytest.raises(BackendUnavailable, match="without CK"):
        control.prepare("fa", inputs({"B": 2, "H": 2, "varlen": [5, 9], "D": 16}))


def test_varlen_arguments_follow_the_signature_or_refuse():
    named = {"q": 1, "k": 2, "causal": True}

    def forward(ctx, q, k, causal, window_size=(-1, -1, 0)):
        pass

    assert aiter_calls.varlen_args(forward, named) == (1, 2, True, (-1, -1, 0))

    def reordered(ctx, k, q, extra=None, causal=False):
        pass

    assert aiter_calls.varlen_args(reordered, named) == (2, 1, None, True)

    def needs_more(ctx, q, k, causal, scale_tensor):
        pass

    with pytest.raises(BackendUnavailable, match="takes 'scale_tensor'"):
        aiter_calls.varlen_args(needs_more, named)

    def takes_less(ctx, q, k):
        pass

    with pytest.raises(BackendUnavailable, match="no longer takes causal"):
        aiter_calls.varlen_args(takes_less, named)


@pytest.mark.parametrize(
    "row",
    [
        {"B": 3, "H": 4, "Hkv": 1, "Sq": 1, "varlen": [9, 40, 17], "D": 16, "causal": True, "page_size": 16},
        {"B": 2, "H": 2, "Sq": 6, "Sk": 20, "D": 16, "causal": True, "page_size": 1},
        {"B": 2, "H": 2, "Hkv": 1, "Sq": 4, "Sk": 40, "D": 32, "causal": True, "page_size": 16, "dtype": "fp8"},
    ],
)
def test_paged_control_as_aiters_tests_call_it(stand_ins, row):
    shape = inputs(row)
    call = aiter_calls.attention(shape)
    assert call is not None and call.fn == "mha_batch_prefill_func"
    indices = call.args[5]
    assert indices.numel() == shape["kv_indices"].numel() + 256 and not indices[-256:].any()
    assert (call.kwargs.get("q_descale") is not None) == (row.get("dtype") == "fp8")
    prep = AiterControl(need_gpu=False).prepare("fa", shape)
    tol = 6e-2 if row.get("dtype") == "fp8" else 2e-2
    assert compare(prep.output(prep.run()), flash_attention.reference(shape), tol, tol).ok
    assert not stand_ins.exists()


@pytest.mark.parametrize(
    "row,key,words",
    [
        ({"page_size": 256}, "page_size", "page sizes 1, 16, 1024 only, got 256"),
        ({"dtype": "fp32"}, "dtype", "not fp32"),
        ({"D": 512}, "D", "up to 256, got 512"),
        ({"D": 12, "page_size": 16}, "D", "bf16 head size that is a multiple of 8, got 12"),
        ({"D": 24, "page_size": 16, "dtype": "fp8"}, "D", "fp8 head size that is a multiple of 16, got 24"),
    ],
)
def test_what_aiter_cannot_run_is_refused_before_the_trial(tmp_path, row, key, words):
    from bisector.commands.check_config_cmd import command

    params = {"B": 2, "H": 4, "Sq": 1, "Sk": 64, "D": 64, "dtype": "bf16", "causal": True, **row}
    got = control_limits.refusal("aiter", "fa", shapes.normalize_attention(params))
    assert got is not None and got[0] == key and words in got[1]
    assert control_limits.refusal("torch", "fa", shapes.normalize_attention(params)) is None
    with pytest.raises(BackendUnavailable, match=words.split(",")[0]):  # and in the trial's prepare
        aiter_calls.attention(inputs(params))
    lines = "\n".join(f"{k} = {v!r}".replace("'", '"').replace("True", "true") for k, v in params.items())
    cfg = tmp_path / "amd.toml"
    cfg.write_text(f"""
[upstream]
repo = "https://example.invalid/lib.git"
[device]
kind = "rocm"
[control]
backend = "aiter"
[subject.fa]
entry = "lib:attn"
args = ["q", "k", "v"]
[[suites.fa.shapes]]
name = "good"
B = 2
H = 4
Sq = 1
Sk = 64
D = 64
page_size = 16
[[suites.fa.shapes]]
name = "bad"
{lines}
""")
    res = CliRunner().invoke(command, [str(cfg)])
    assert res.exit_code == 2, res.output
    assert f"suites.fa.shapes[1].{key}: control aiter: " in res.output and words in res.output


# A stand-in aiter shaped like ROCm/aiter@e4048607 where the subject's FlyDSL could leak in:
# `aiter/__init__` -> `ops/attention` -> `ops/triton/gluon/pa_decode_gluon` imports `flydsl.*`
# inside try/except; `aiter.ops.flydsl.utils.is_flydsl_available` is a find_spec asked at every
# call; `tuned_gemm` imports it (falling back to False on ImportError) and its lru-cached
# `get_GEMM_A16W16_config` takes a FlyDSL kernel when it says True.
CHAIN = {
    "aiter/__init__.py": "from .ops.attention import *  # noqa\nfrom .ops.mha import *  # noqa\n",
    "aiter/ops/__init__.py": "",
    "aiter/ops/attention.py": "from aiter.ops.triton.gluon.pa_decode_gluon import FLYDSL_PS_REDUCE_AVAILABLE\n",
    "aiter/ops/triton/__init__.py": "",
    "aiter/ops/triton/gluon/__init__.py": "",
    "aiter/ops/triton/gluon/pa_decode_gluon.py": textwrap.dedent("""
        FLYDSL_PS_REDUCE_AVAILABLE = True
        try:
            import flydsl.compiler as flyc
        except Exception:
            FLYDSL_PS_REDUCE_AVAILABLE = False
        """),
    "aiter/ops/flydsl/__init__.py": (
        "from .utils import is_flydsl_available\nif is_flydsl_available():\n    import flydsl\n"
    ),
    "aiter/ops/flydsl/utils.py": textwrap.dedent("""
        import importlib.util

        def is_flydsl_available():
            return importlib.util.find_spec("flydsl") is not None
        """),
    "aiter/tuned_gemm.py": textwrap.dedent("""
        import functools
        try:
            from aiter.ops.flydsl.utils import is_flydsl_available
        except ImportError:
            def is_flydsl_available():
                return False

        @functools.lru_cache(maxsize=4096)
        def get_GEMM_A16W16_config(M, N, K, bias, dtype, otype, scaleAB=False, bpreshuffle=False):
            if is_flydsl_available():
                return {"libtype": "flydsl", "kernelName": "flydsl_hgemm_splitk"}
            return {"libtype": "hipblaslt", "kernelName": ""}
        """),
}

SUBJECT_FLYDSL = """
import os
from pathlib import Path

Path(os.environ["SUBJECT_FLYDSL_MARK"]).write_text("imported")
"""


@pytest.fixture
def chain(tmp_path, monkeypatch):
    """The installed stand-in aiter on sys.path; the checkout's `flydsl` (which records its import)
    put on sys.path only when the test says, as benches/trial.py does after the control is loaded."""
    site, checkout = tmp_path / "site", tmp_path / "checkout"
    for rel, text in {**CHAIN, "aiter/ops/mha.py": textwrap.dedent(MHA)}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (checkout / "flydsl").mkdir(parents=True)
    (checkout / "flydsl" / "__init__.py").write_text(SUBJECT_FLYDSL)
    (checkout / "flydsl" / "compiler.py").write_text("")
    mark = tmp_path / "flydsl-imported"
    monkeypatch.setenv("SUBJECT_FLYDSL_MARK", str(mark))
    monkeypatch.setenv("AITER_LOG_TUNED_CONFIG", "1")
    monkeypatch.syspath_prepend(str(site))
    yield checkout, mark, monkeypatch
    for name in [m for m in sys.modules if m.split(".")[0] in ("aiter", "flydsl")]:
        del sys.modules[name]


def test_the_control_imports_aiter_without_the_subjects_flydsl_and_never_picks_it_later(chain):
    from benches.backends.aiter import a16w16_choice

    checkout, mark, monkeypatch = chain
    control = AiterControl(need_gpu=False)  # the trial's order: the control before the checkout
    assert not mark.exists() and not any(m.split(".")[0] == "flydsl" for m in sys.modules)
    assert control.aiter.ops.attention.FLYDSL_PS_REDUCE_AVAILABLE is False
    monkeypatch.syspath_prepend(str(checkout))
    import flydsl  # the subject's, loaded under its own name and from the checkout

    assert mark.exists() and flydsl.__file__.startswith(str(checkout))
    # Asked now, with the subject's FlyDSL importable, aiter's lookup still keeps the control off it.
    tuned = sys.modules["aiter.tuned_gemm"]
    choice = a16w16_choice(tuned, 64, 7168, 2048, torch.bfloat16)
    assert choice["libtype"] == "hipblaslt"


def test_the_stand_in_chain_is_faithful_an_unguarded_import_reaches_the_subjects_flydsl(chain):
    checkout, mark, monkeypatch = chain
    monkeypatch.syspath_prepend(str(checkout))  # the order before: the checkout first, then aiter
    import aiter  # noqa: F401, A004 - the library itself: its import runs the subject's code

    assert mark.exists()  # pa_decode_gluon's `import flydsl.compiler` ran the subject's code
    tuned = importlib.import_module("aiter.tuned_gemm")
    assert tuned.get_GEMM_A16W16_config(64, 7168, 2048, False, "bf16", "bf16")["libtype"] == "flydsl"


def test_a_flydsl_loaded_before_the_control_is_refused_loudly(chain):
    checkout, _mark, monkeypatch = chain
    monkeypatch.syspath_prepend(str(checkout))
    import flydsl  # noqa: F401

    with pytest.raises(RuntimeError, match="must be imported first"):
        AiterControl(need_gpu=False)


def test_the_trial_loads_the_control_before_the_checkout_is_on_sys_path(tmp_path, monkeypatch):
    from benches import backends, trial

    seen: list[list[str]] = []
    real = backends.control

    def recording(name, device):
        seen.append(list(sys.path))
        return real(name, device)

    monkeypatch.setattr(backends, "control", recording)
    (tmp_path / "sub_order.py").write_text("from benches.kernels.torch_ref import matmul as mm\n")
    spec = {
        "sha": "abc",
        "suite": "gemm",
        "device": "cpu",
        "seed": 0,
        "control": "torch",
        "reps": 3,
        "warmup": 1,
        "source_dirs": [str(tmp_path)],
        "subjects": {"gemm": {"entry": "sub_order:mm", "adapter": "callable"}},
        "shapes": [{"suite": "gemm", "key": "gemm/t", "params": {"M": 32, "N": 32, "K": 32, "dtype": "fp32"}}],
    }
    out = trial.run(spec, tmp_path / "out.json")
    assert seen and str(tmp_path) not in seen[0]
    assert out["results"][0]["status"] == "ok", out["results"][0]


def fp8_inputs(row: dict) -> dict:
    return flash_attention.make_inputs(shapes.normalize_attention({"dtype": "fp8", **row}), "cpu", 0)


@pytest.mark.parametrize(
    "row,fn",
    [
        ({"B": 2, "H": 2, "S": 8, "D": 128}, aiter_calls.DENSE_FP8),
        ({"B": 2, "H": 2, "varlen": [5, 9], "D": 128}, aiter_calls.VARLEN_FP8),
    ],
)
def test_fp8_attention_controls_take_aiters_per_tensor_path_with_the_subjects_descales(row, fn):
    from benches.backends.flydsl import fa_kwargs

    shape = fp8_inputs(row)
    call = aiter_calls.attention(shape)
    assert call is not None and call.fn == fn and not call.autograd
    control_descales = [a for a in call.args if isinstance(a, torch.Tensor) and a.shape == (1,)]
    subject = fa_kwargs(shape["q"], False, {})
    assert len(control_descales) == 3
    for got, name in zip(control_descales, ("q_descale", "k_descale", "v_descale")):
        assert got.dtype == subject[name].dtype == torch.float32 and torch.equal(got, subject[name])
    assert call.args[0].dtype == torch.float8_e4m3fn


@pytest.mark.parametrize(
    "row,key,words",
    [
        (
            {"S": 64, "D": 64},
            "D",
            "fp8 dense attention (flash_attn_fp8_pertensor_func) has kernels for head sizes 128, 256 only, got 64",
        ),
        ({"S": 64, "D": 96}, "D", "head sizes 128, 256 only, got 96"),
        (
            {"varlen": [5, 9], "D": 64},
            "D",
            "fp8 varlen attention (flash_attn_varlen_fp8_pertensor_func) has kernels for head sizes 128 only",
        ),
        ({"varlen": [5, 9], "D": 256}, "D", "head sizes 128 only, got 256"),
    ],
)
def test_fp8_head_sizes_without_aiter_kernels_are_refused(row, key, words):
    params = shapes.normalize_attention({"B": 2, "H": 2, "dtype": "fp8", **row})
    got = control_limits.refusal("aiter", "fa", params)
    assert got == (key, got[1]) and words in got[1]
    with pytest.raises(BackendUnavailable, match=words.split("(")[0].strip()):
        aiter_calls.attention(fp8_inputs(row | {"B": 2, "H": 2}))
    assert (
        control_limits.refusal(
            "aiter", "fa", shapes.normalize_attention({"B": 2, "H": 2, "dtype": "fp8", "S": 64, "D": 128})
        )
        is None
    )


@pytest.mark.parametrize(
    "suite,row,key,words",
    [
        ("fa", "B = 2\nH = 4\nvarlen = [5, 9]\nD = 128", "varlen", "passes dense attention only"),
        ("fa", "B = 2\nH = 4\nSq = 1\nSk = 64\nD = 128\npage_size = 16", "page_size", "passes dense attention only"),
        ("fa", 'B = 2\nH = 4\nS = 64\nD = 64\ndtype = "fp8"', "D", "built for head size 128 only"),
        ("gemm", "M = 64\nN = 128\nK = 256\nbatch = 2\ntile = [64, 64, 64]", "batch", "plain 2-D GEMM only"),
        (
            "gemm",
            'M = 64\nN = 128\nK = 256\ndtype = "fp8_e4m3"\nscaling = "row"\ntile = [64, 64, 64]',
            "scaling",
            "plain 2-D GEMM only",
        ),
    ],
)
def test_check_config_refuses_what_the_flydsl_adapter_refuses(tmp_path, suite, row, key, words):
    """The same rule in `bisector check-config` and in the adapter at every trial."""
    from benches.backends import flydsl
    from benches.suites import SUITES
    from bisector.commands.check_config_cmd import command

    cfg = tmp_path / "flydsl.toml"
    cfg.write_text(f"""
[upstream]
repo = "https://example.invalid/FlyDSL.git"
[device]
kind = "rocm"
[control]
backend = "none"
[subject.{suite}]
adapter = "flydsl"
entry = "kernels.x:y"
[[suites.{suite}.shapes]]
name = "x"
{row}
""")
    res = CliRunner().invoke(command, [str(cfg)])
    assert res.exit_code == 2, res.output
    assert f"suites.{suite}.shapes[0].{key}: subject adapter flydsl: " in res.output and words in res.output
    params = {k.strip(): eval(v.strip().replace("true", "True")) for k, v in (ln.split("=") for ln in row.splitlines())}
    normal = shapes.normalize_attention(params) if suite == "fa" else shapes.normalize_gemm(params)
    assert words in flydsl.unsupported(suite, SUITES[suite].make_inputs(normal, "cpu", 0))

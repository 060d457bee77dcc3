"""Backends in process: layout plumbing, availability errors, the vendor adapters' argument
plumbing (no AMD GPU here), and the Triton kernels under the interpreter."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from benches import backends, suites
from benches.backends.aiter import a16w16_choice, check_pure, gemm_kind, gemm_operands, pure_control
from benches.backends.base import BackendUnavailable, from_layout, load_entry, prepared, to_layout
from benches.backends.flydsl import check_sm_scale, fa_kwargs, launch_args, plan_gemm
from benches.correctness import compare
from benches.timing import Clock, flush_bytes
from tests.devices import needs_cuda


def test_layouts_round_trip():
    t = torch.randn(2, 3, 5, 4)
    b = to_layout(t, "bshd")
    assert b.shape == (2, 5, 3, 4) and b.is_contiguous()
    assert torch.equal(from_layout(b, "bshd"), t)
    with pytest.raises(ValueError, match="unknown attention layout"):
        to_layout(t, "sbhd")


def test_flops():
    assert suites.get("fa").flops({"B": 2, "H": 32, "S": 16384, "D": 128}) == 4 * 2 * 32 * 16384**2 * 128
    assert suites.get("fa").flops({"B": 1, "H": 1, "S": 8, "D": 2, "causal": True}) == 4 * 64 * 2 / 2
    assert suites.get("gemm").flops({"M": 3, "N": 5, "K": 7}) == 2 * 3 * 5 * 7


def test_inputs_random_per_seed_and_layouts():
    p = {"M": 16, "N": 8, "K": 32, "dtype": "bf16", "layout": "tt"}
    x, y = suites.get("gemm").make_inputs(p, "cpu", 1), suites.get("gemm").make_inputs(p, "cpu", 2)
    assert x["a"].shape == (16, 32) and x["b"].shape == (32, 8) and not x["a"].is_contiguous()
    assert not torch.equal(x["a"], y["a"]) and bool((x["a"] != 0).all())
    assert torch.equal(x["a"], suites.get("gemm").make_inputs(p, "cpu", 1)["a"])
    f = suites.get("fa").make_inputs({"B": 1, "H": 2, "S": 8, "D": 4, "dtype": "fp8"}, "cpu", 0)
    assert f["q"].dtype == torch.float8_e4m3fn and f["sm_scale"] == 0.5


def test_compare_flags_nan_and_mismatch():
    c = torch.randn(64, 64)
    assert compare(c + 1e-6, c, 1e-4, 1e-4).ok
    bad = c.clone()
    bad[3, 4] = float("nan")
    chk = compare(bad, c, 1e-2, 1e-2)
    assert not chk.ok and chk.mismatched == 1 and math.isinf(chk.max_abs_err)
    off = c * 1.05
    chk = compare(off, c, 1e-2, 1e-2)
    assert not chk.ok and 0.04 < chk.max_rel_err < 0.06


def test_load_entry_errors():
    with pytest.raises(BackendUnavailable, match="backend x unavailable: cannot import 'no_such_mod'"):
        load_entry("no_such_mod:f", "x")
    with pytest.raises(BackendUnavailable, match="has no attribute 'nope'"):
        load_entry("math:nope", "x")
    assert load_entry("math:sqrt", "x")(4.0) == 2.0


def test_gpu_and_vendor_backends_unavailable_here():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    for make in (
        lambda: backends.control("torch_cuda", "cuda"),
        lambda: backends.control("aiter", "rocm"),
        lambda: backends.subject({"adapter": "flydsl"}, "rocm"),
        lambda: backends.subject({"adapter": "aiter", "entry": "aiter:flash_attn_func"}, "rocm"),
    ):
        with pytest.raises(BackendUnavailable, match=r"^backend \w+ unavailable: no GPU visible"):
            make()
    with pytest.raises(BackendUnavailable, match="unknown subject adapter"):
        backends.subject({"adapter": "cutlass"}, "cpu")
    assert backends.control("none", "cpu") is None


def test_torch_cpu_control_matches_reference():
    ctl = backends.control("torch", "cpu")
    for suite, p in (
        ("fa", {"B": 1, "H": 2, "S": 32, "D": 8, "dtype": "fp32", "causal": True}),
        ("gemm", {"M": 8, "N": 16, "K": 32, "dtype": "fp8", "layout": "nt"}),
    ):
        inputs = suites.get(suite).make_inputs(p, "cpu", 0)
        prep = ctl.prepare(suite, inputs)
        assert compare(prep.output(prep.run()), suites.get(suite).reference(inputs), 1e-2, 1e-2).ok
    with pytest.raises(BackendUnavailable, match="no fp8 attention"):
        ctl.prepare("fa", suites.get("fa").make_inputs({"B": 1, "H": 1, "S": 4, "D": 4, "dtype": "fp8"}, "cpu", 0))


def test_aiter_gemm_plumbing():
    a, b = torch.randn(16, 32), torch.randn(32, 48)
    inp, w = gemm_operands(a, b, "a16w16")
    assert w.shape == (48, 32) and torch.allclose(torch.nn.functional.linear(inp, w), a @ b, atol=1e-5)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    inp, w, xs, ws = gemm_operands(a8, b8, "a8w8")
    assert xs.shape == (16, 1) and ws.shape == (48, 1) and w.dtype == torch.float8_e4m3fn
    assert gemm_kind(torch.bfloat16, {}) == "a16w16" and gemm_kind(torch.float8_e4m3fn, {}) == "a8w8"
    assert gemm_kind(torch.float8_e4m3fn, {"gemm_kind": "a8w8_bpreshuffle"}) == "a8w8_bpreshuffle"
    with pytest.raises(ValueError, match="does not take"):
        gemm_kind(torch.bfloat16, {"gemm_kind": "a8w8"})


def test_flydsl_gemm_plumbing():
    a = torch.randn(64, 256).to(torch.float8_e4m3fn)
    b = torch.randn(256, 128).to(torch.float8_e4m3fn)
    plan = plan_gemm(a, b, (64, 128, 128), {"waves_per_eu": 2})
    assert plan.compile_kwargs == {
        "N": 128,
        "K": 256,
        "tile_m": 64,
        "tile_n": 128,
        "tile_k": 128,
        "in_dtype": "fp8",
        "out_dtype": "bf16",
        "waves_per_eu": 2,
    }
    assert plan.weight.shape == (128, 256) and plan.out_dtype == torch.bfloat16
    c = torch.empty(64, 128, dtype=torch.bfloat16)
    args = launch_args(plan, plan.weight, c)
    assert args[1].dtype == torch.int8 and args[1].numel() == 64 * 256 and args[2].dtype == torch.int8
    assert args[3].shape == (64,) and args[4].shape == (128,) and args[5].numel() == 0
    assert args[6:] == (64, 128)
    bf = plan_gemm(
        torch.randn(64, 256, dtype=torch.bfloat16),
        torch.randn(256, 64, dtype=torch.bfloat16),
        None,
        {"tile": [64, 64, 64]},
    )
    assert bf.compile_kwargs["in_dtype"] == "bf16"
    assert launch_args(bf, bf.weight, torch.empty(64, 64, dtype=torch.bfloat16))[3].numel() == 0
    with pytest.raises(ValueError, match="needs a tile"):
        plan_gemm(a, b, None, {})
    with pytest.raises(ValueError, match="must divide K"):
        plan_gemm(a, b, (64, 64, 96), {})
    check_sm_scale(1 / math.sqrt(128), 128)
    with pytest.raises(BackendUnavailable, match="only scales by 1/sqrt"):
        check_sm_scale(0.1, 128)


def test_flydsl_gemm_passes_only_real_keywords():
    a, b = torch.randn(64, 256, dtype=torch.bfloat16), torch.randn(256, 128, dtype=torch.bfloat16)
    ok = plan_gemm(a, b, None, {"tile": [64, 128, 128], "lds_stage": 2, "use_async_copy": True})
    assert set(ok.compile_kwargs) == {
        "N",
        "K",
        "tile_m",
        "tile_n",
        "tile_k",
        "in_dtype",
        "out_dtype",
        "lds_stage",
        "use_async_copy",
    }
    for bad in ("preshuffle_b", "epilogue", "shuffle"):  # epilogue: the launch passes no bias
        with pytest.raises(ValueError, match=f"compile_preshuffle_gemm takes no option '{bad}'"):
            plan_gemm(a, b, (64, 128, 128), {bad: True})


def test_flydsl_fa_fp8_gets_shape_1_fp32_descales():
    q8 = torch.randn(1, 16, 2, 64).to(torch.float8_e4m3fn)
    kw = fa_kwargs(q8, False, {"waves_per_eu": 1})
    assert kw["causal"] is False and kw["waves_per_eu"] == 1
    for name in ("q_descale", "k_descale", "v_descale"):
        assert kw[name].shape == (1,) and kw[name].dtype == torch.float32 and kw[name].item() == 1.0
    assert set(fa_kwargs(torch.randn(1, 16, 2, 64, dtype=torch.bfloat16), True, {})) == {"causal"}
    with pytest.raises(ValueError, match="flydsl_flash_attn_func takes no option 'softmax_scale'"):
        fa_kwargs(q8, False, {"softmax_scale": 0.1})


def test_aiter_control_asks_aiter_which_gemm_it_runs():
    seen = {}

    def lookup(**kw):
        seen.update(kw)
        return {"libtype": "hipblaslt", "kernelName": ""}

    got = a16w16_choice(SimpleNamespace(get_GEMM_A16W16_config=lookup), 54560, 8192, 8192, torch.bfloat16)
    assert got["libtype"] == "hipblaslt"
    # The arguments gemm_a16w16 passes for tgemm.mm(inp, weight): no bias, no scales, unshuffled B.
    assert seen == {
        "M": 54560,
        "N": 8192,
        "K": 8192,
        "bias": False,
        "dtype": "torch.bfloat16",
        "otype": "torch.bfloat16",
        "scaleAB": False,
        "bpreshuffle": False,
    }
    assert a16w16_choice(SimpleNamespace(), 1, 2, 3, torch.bfloat16) is None
    assert check_pure("gemm_a16w16 M=1", got, []) == "aiter control gemm_a16w16 M=1: libtype hipblaslt"
    with pytest.raises(BackendUnavailable, match=r"dispatches to FlyDSL \(libtype flydsl, kernel 'flydsl_hgemm_x'\)"):
        check_pure("gemm_a16w16 M=1", {"libtype": "flydsl", "kernelName": "flydsl_hgemm_x"}, [])
    # aiter's own log line is enough (a path we cannot ask, e.g. gemm_a8w8_bpreshuffle).
    line = "shape M:1, N:2, K:3 q_dtype_w:torch.float8_e4m3fn, found ... is tuned, in x.csv! libtype is flydsl!"
    with pytest.raises(BackendUnavailable, match="libtype is flydsl"):
        check_pure("gemm_a8w8", None, ["unrelated", line])
    # A fall-back *away* from FlyDSL is not FlyDSL.
    assert check_pure(
        "gemm_a16w16",
        {"libtype": "asm"},
        ["FlyDSL kernel 'k' from tuned config is not recognized by the current catalog; falling back"],
    )


def test_aiter_control_first_run_is_checked_against_aiter_log(capsys):
    calls = []

    def run(says: str):
        def go():
            calls.append(says)
            logging.getLogger("aiter").info(says)
            return torch.zeros(1)

        return prepared(go)

    clean = pure_control(run("shape is M:1, libtype is hipblaslt, kernel name is "), "gemm_a16w16 M=1")
    for _ in range(3):
        clean.run()
    assert len(calls) == 3 and capsys.readouterr().err.count("aiter control gemm_a16w16 M=1: libtype ?") == 1
    dirty = pure_control(run("[gfx1250] untuned M=1; falling back to flydsl kernel 'k'."), "gemm_a8w8_bpreshuffle")
    with pytest.raises(BackendUnavailable, match="the control's gemm_a8w8_bpreshuffle dispatches to FlyDSL"):
        dirty.run()
    # The capture is removed again and the logger's level restored (INFO was let through meanwhile).
    assert not logging.getLogger("aiter").handlers and logging.getLogger("aiter").level == logging.NOTSET


def test_cpu_clock_and_flush_size():
    assert flush_bytes("cpu", 3) == 3 << 20
    assert 0 < flush_bytes("cpu") <= 512 << 20
    clock = Clock("cpu", 1 << 20)
    times, faults = clock.interleaved([lambda: sum(range(1000)), lambda: None], 4)
    assert len(times) == 2 and all(len(t) == 4 for t in times) and all(x > 0 for x in times[0])
    assert [len(f) for f in faults] == [4, 4] and all(f >= 0 for per in faults for f in per)


def _interpret(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def test_triton_kernels_under_interpreter_and_no_bisector_import():
    pytest.importorskip("triton")
    proc = _interpret("""
        import torch
        from benches import suites
        from benches.backends import subject
        from benches.correctness import compare
        for suite, entry, p, opts in (
                ("gemm", "benches.kernels.triton_matmul:matmul",
                 {"M": 256, "N": 128, "K": 256, "dtype": "fp16", "layout": "nt", "tile": (64, 64, 32)}, {}),
                ("fa", "benches.kernels.triton_fa:attention",
                 {"B": 1, "H": 2, "S": 256, "D": 64, "dtype": "fp16", "causal": False}, {"block_m": 64, "block_n": 32}),
                ("fa", "benches.kernels.triton_fa:attention",
                 {"B": 1, "H": 1, "S": 128, "D": 32, "dtype": "fp16", "causal": True}, {"block_m": 64, "block_n": 32})):
            inputs = suites.get(suite).make_inputs(p, "cpu", 0)
            prep = subject({"entry": entry, "adapter": "triton", "options": opts}, "cpu").prepare(suite, inputs)
            chk = compare(prep.output(prep.run()), suites.get(suite).reference(inputs), 5e-3, 5e-3)
            assert chk.ok, (suite, p, chk)
            print("OK", suite, chk.max_rel_err)
        # The trial side needs only torch (+ triton): it imports nothing from bisector.
        import sys, benches.trial, studies.harness_noise, benches.backends.aiter, benches.backends.flydsl
        import benches.backends.torch_cuda
        bad = [m for m in sys.modules if m == "bisector" or m.startswith("bisector.")]
        assert not bad, bad
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("OK") == 3


def test_telemetry_absent_tools_give_none(monkeypatch):
    from benches import telemetry

    monkeypatch.setattr(telemetry.shutil, "which", lambda name: None)
    monkeypatch.setattr(telemetry, "nvml", lambda: None)  # a GPU host's driver library: not a tool on PATH
    assert telemetry.read("cuda") is None and telemetry.read("cpu") is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert telemetry.physical_index("CUDA_VISIBLE_DEVICES") == "3"


def test_telemetry_reads_vendor_tools(tmp_path, monkeypatch):
    from benches import telemetry

    monkeypatch.setattr(telemetry, "nvml", lambda: None)  # on a GPU host NVML would answer first
    nv = tmp_path / "nvidia-smi"
    nv.write_text(
        '#!/bin/sh\ncase "$*" in *throttle*) exit 2;; esac\necho "$@" > '
        + str(tmp_path / "args")
        + '\necho "1980, 2619, 45, 350.50"\n'
    )
    nv.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    got = telemetry.read("cuda")
    assert got == {
        "tool": "nvidia-smi",
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 2619.0,
        "temperature_c": 45.0,
        "power_w": 350.5,
    }
    assert "-i 5" in (tmp_path / "args").read_text()
    nv.unlink()
    amd = tmp_path / "amd-smi"
    amd.write_text(
        '#!/bin/sh\necho "$@" > ' + str(tmp_path / "args") + "\n"
        'echo \'[{"gpu": 0, "clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}}},'
        ' "temperature": {"edge": {"value": 51, "unit": "C"}},'
        ' "power": {"socket_power": {"value": 900, "unit": "W"}}}]\'\n'
    )
    amd.chmod(0o755)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2")
    got = telemetry.read("rocm")  # no ROCm torch here: amd-smi gets the index from HIP_VISIBLE_DEVICES
    assert got["tool"] == "amd-smi" and got["sm_clock_mhz"] == 2100.0 and got["temperature_c"] == 51.0
    assert got["power_w"] == 900.0 and got["matched_by"] == "index"
    assert (tmp_path / "args").read_text().split()[:3] == ["metric", "-g", "2"]
    # With the HIP device's PCI address, amd-smi is asked for that device, whatever its own numbering.
    monkeypatch.setattr(telemetry, "hip_device_bdf", lambda: "0000:0c:00.0")
    got = telemetry.read("rocm")
    assert got["matched_by"] == "pci" and got["gpu"] == "0000:0c:00.0"
    assert (tmp_path / "args").read_text().split()[:3] == ["metric", "-g", "0000:0c:00.0"]


def test_pci_address_from_device_properties():
    from benches import telemetry

    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x0C, pci_device_id=0)
    assert telemetry.bdf(props) == "0000:0c:00.0"
    assert telemetry.bdf(SimpleNamespace(pci_bus_id=3)) is None
    assert telemetry.hip_device_bdf() is None  # CPU torch: no HIP device


def test_the_flydsl_gemm_launches_on_the_stream_current_at_each_call(monkeypatch):
    from benches.backends.flydsl import on_current_stream

    streams = iter(["graph-capture-stream", "default-stream"])
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: next(streams))
    seen = []
    call = on_current_stream(lambda *args: seen.append(args[-1]), ("c", "a", "b"))
    call()
    call()
    assert seen == ["graph-capture-stream", "default-stream"]


@needs_cuda
@pytest.mark.gpu
def test_telemetry_reads_nvml_in_process_with_the_fields_nvidia_smi_gives():
    """After the device section the trial reads its GPU in-process: nvidia-smi there took 0.4-0.7 s,
    and the device waited for the trial's exit (bisector/runner/executor.py TEARDOWN_GRACE_S)."""
    from benches import telemetry

    got = telemetry.read("cuda")
    assert got is not None and got["tool"] == "nvml", got
    smi = telemetry.nvidia()
    assert smi is not None and set(got) - {"tool"} == set(smi) - {"tool"}
    assert got["sm_clock_mhz"] > 0 and str(got["throttle_reasons"]).startswith("0x")

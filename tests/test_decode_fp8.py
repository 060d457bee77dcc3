"""studies/decode_fp8.py, the H200 decode / fp8 GEMM bench, in its CPU-runnable parts: a small config
measured end to end (fresh trial processes, controls, correctness), a wrong subject's exit code, a
bad config's one line, the table's share of peak bandwidth, and the H200 config's shapes read the
same as the bot reads them."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bisector import config
from bisector.model import BuildResult, BuildStatus
from bisector.runner.spec import build_spec
from studies import decode_fp8

ROOT = Path(__file__).resolve().parents[1]
SMALL = """
name = "small"
[upstream]
repo = "."
[device]
kind = "cpu"
[control]
backend = "torch"
[subject.fa]
entry = "benches.kernels.torch_ref:paged_attention"
adapter = "torch"
args = ["q_thd", "k_cache", "v_cache", "block_table", "seqused_k", "cu_seqlens_q"]
kwargs = { causal = "causal", softmax_scale = "sm_scale" }
[subject.gemm]
entry = "benches.kernels.torch_ref:GEMM_FN"
adapter = "torch"
args = ["a", "b", "a_scale", "b_scale"]
[[suites.fa.shapes]]
name = "decode"
B = 6
Sq = 1
varlen = { min = 20, max = 60, seed = 0 }
H = 4
Hkv = 2
D = 16
page_size = 16
dtype = "fp32"
causal = true
[[suites.gemm.shapes]]
name = "fp8_block"
M = 32
N = 128
K = 256
dtype = "fp8_e4m3"
scaling = "block"
layout = "nt"
[protocol]
reps = 3
warmup = 1
flush_mb = 1
"""


def bench(tmp_path: Path, text: str, *args: str, trials: int = 2) -> subprocess.CompletedProcess:
    cfg = tmp_path / "small.toml"
    cfg.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "studies.decode_fp8", "--config", str(cfg), "--trials", str(trials), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )


def test_small_config_end_to_end(tmp_path):
    proc = bench(tmp_path, SMALL.replace("GEMM_FN", "scaled_matmul"), "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    header, rule, *rows = proc.stdout.strip().splitlines()
    assert "subj GB/s" in header and "ctrl %peak" in header and set(rule) <= {"-", " "}
    assert [r.split()[:2] for r in rows] == [["fa/decode", "ok"], ["gemm/fp8_block", "ok"]]
    assert "sdpa padded" in rows[0] and "dequantized to fp32" in rows[1]
    import json

    saved = json.loads((tmp_path / "r.json").read_text())
    assert len(saved["trials"]) == 2 and {r["trials"] for r in saved["table"]} == {2}


def test_wrong_subject_exit_1(tmp_path):
    # matmul ignores the scales: the check against the control fails.
    proc = bench(
        tmp_path,
        SMALL.replace("GEMM_FN", "matmul").replace('args = ["a", "b", "a_scale", "b_scale"]', 'args = ["a", "b"]'),
        trials=1,
    )
    assert proc.returncode == 1
    assert "gemm/fp8_block  wrong" in proc.stdout and "gemm/fp8_block: output mismatch" in proc.stdout


def test_bad_config_one_line_exit_2(tmp_path):
    proc = bench(tmp_path, SMALL.replace("Hkv = 2", "Hkv = 3"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {tmp_path / 'small.toml'}: suites.fa.shapes[0].Hkv: must divide H=4, got 3\n"


def test_share_of_peak_bandwidth():
    outs = [
        {
            "results": [
                {
                    "shape": "fa/d",
                    "status": "ok",
                    "subject_gbps": g,
                    "control_gbps": 4000.0,
                    "peak_gbps": 4800.0,
                    "subject_ms": [1.0],
                    "control_ms": [0.5],
                    "ratio": 0.5,
                }
            ]
        }
        for g in (2300.0, 2400.0, 2500.0)
    ]
    (row,) = decode_fp8.summarize(outs)
    assert row["subject_peak_pct"] == 50.0 and round(row["control_peak_pct"], 2) == 83.33 and row["trials"] == 3
    assert "50.0" in decode_fp8.render([row])


def test_h200_config_shapes_read_as_the_bot_reads_them():
    path = ROOT / "configs" / "h200-decode.toml"
    data = tomllib.loads(path.read_text())
    mine = decode_fp8.build_spec(data, path, seed=0, reps=None, source=str(ROOT))
    cfg = config.load(path)
    bots = build_spec(cfg, BuildResult("a" * 40, BuildStatus.OK, str(ROOT)), None, seed=0)
    assert mine["shapes"] == bots["shapes"] and mine["subjects"] == bots["subjects"]
    assert mine["control"] == "torch_cuda" and mine["device"] == "cuda" and mine["reps"] == cfg.protocol.reps


def test_spreads_pool_every_repetition_and_keep_each_trial():
    outs = [
        {
            "results": [
                {
                    "shape": "gemm/g",
                    "status": "ok",
                    "subject_ms": ms,
                    "control_ms": [2.0, 2.0, 2.0, 2.0],
                    "ratios": [2.0 / x for x in ms],
                    "ratio": 2.0 / ms[1],
                }
            ]
        }
        for ms in ([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 3.0, 3.0])
    ]
    (row,) = decode_fp8.summarize(outs)
    # eight repetitions 1,1,1,1,1,1,3,3: quartiles 1 and 1.5, median 1 -> 50 %; the control never moves
    assert row["subject_spread_pct"] == 50.0 and row["control_spread_pct"] == 0.0
    assert row["subject_trial_ms"] == [1.0, 2.0] and row["subject_ms"] == 1.5
    assert row["trial_ratios"] == [2.0, 2.0] and row["ratio_spread_pct"] > 0
    assert decode_fp8.iqr_pct([5.0]) is None


def test_h200_subjects_compile_for_sm90_within_its_shared_memory(tmp_path, monkeypatch):
    """Nothing here has run on an H200: at least the config's two Triton subjects, with its options,
    compile ahead of time for sm_90 (studies/kernel_fixtures.py's compile, no GPU) and fit its
    shared memory (227 KiB a block)."""
    pytest.importorskip("triton")
    import json

    import torch
    from triton.runtime.jit import MockTensor

    from benches.kernels import triton_attn, triton_fp8_gemm
    from studies.kernel_fixtures import _compile

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    subjects = tomllib.loads((ROOT / "configs" / "h200-decode.toml").read_text())["subject"]
    f16, i32, f32, e4m3, bf16 = (
        MockTensor(t) for t in (torch.float16, torch.int32, torch.float32, torch.float8_e4m3fn, torch.bfloat16)
    )
    h, hkv, d, pages = 16, 8, 128, 144  # the decode shape: 2300 keys in pages of 16
    opt = subjects["fa"]["options"]
    _compile(
        triton_attn._attn_fwd,
        (f16, f16, f16, f16, i32, i32, i32, i32, 0.1, h * d, d, hkv * d, d, pages, h // hkv),
        dict(
            D=d,
            BLOCK_M=opt["block_m"],
            BLOCK_N=opt["block_n"],
            PAGE=16,
            PAGED=True,
            CAUSAL=True,
            num_warps=opt["num_warps"],
            num_stages=opt["num_stages"],
        ),
    )
    opt = subjects["gemm"]["options"]
    m, n, k = 4096, 7168, 7168  # blockwise, B held as [N, K]
    _compile(
        triton_fp8_gemm._scaled_mm,
        (e4m3, e4m3, bf16, f32, f32, m, n, k, k, 1, 1, k, n, 1, k // 128, k // 128),
        dict(
            KIND=2,
            BLOCK_M=opt["block_m"],
            BLOCK_N=opt["block_n"],
            BLOCK_K=128,
            num_warps=opt["num_warps"],
            num_stages=opt["num_stages"],
        ),
    )
    metas = [json.loads(p.read_text()) for p in tmp_path.glob("*/_[!_]*.json")]
    assert sorted(m["name"] for m in metas) == ["_attn_fwd", "_scaled_mm"]
    assert all(0 < m["shared"] <= 227 * 1024 for m in metas)

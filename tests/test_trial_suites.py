"""benches.trial with the new kinds of subject: GB/s beside TFLOP/s and the control's form in every
result; a suite the user brings (its own inputs, reference and control); the upstream's own
pytest-benchmark tests run in the trial's process between the gate's acquire and release."""

from __future__ import annotations

import time

import pytest

from benches import shapes, trial

PAGED = {
    "args": ["q_thd", "k_cache", "v_cache", "block_table", "seqused_k", "cu_seqlens_q"],
    "kwargs": {"causal": "causal", "softmax_scale": "sm_scale"},
}


def shape(suite: str, name: str, params: dict) -> dict:
    return {
        "key": f"{suite}/{name}",
        "suite": suite,
        "name": name,
        "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
    }


def spec(shapes_: list, subjects: dict, **extra) -> dict:
    return {
        "sha": "f" * 40,
        "suite": ",".join(subjects),
        "shapes": shapes_,
        "subjects": subjects,
        "control": "torch",
        "device": "cpu",
        "source_dirs": [],
        "reps": 3,
        "warmup": 1,
        "flush_mb": 1,
        "seed": 0,
        "tolerances": {},
        **extra,
    }


class Gate:
    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []

    def acquire(self, brief: bool = False) -> dict:
        self.events.append(("acquire", time.time()))
        return {}

    def release(self, brief: bool = False) -> None:
        self.events.append(("release", time.time()))


def test_bandwidth_and_control_form_in_each_result(tmp_path):
    decode = shapes.normalize_attention(
        {
            "B": 3,
            "H": 4,
            "Hkv": 2,
            "Sq": 1,
            "varlen": [9, 30, 17],
            "D": 16,
            "page_size": 8,
            "dtype": "fp32",
            "causal": True,
        }
    )
    block = shapes.normalize_gemm({"M": 32, "N": 128, "K": 256, "dtype": "fp8_e4m3", "scaling": "block"})
    out = trial.run(
        spec(
            [shape("fa", "decode", decode), shape("gemm", "blk", block)],
            {
                "fa": {"entry": "benches.kernels.torch_ref:paged_attention", "adapter": "torch", **PAGED},
                "gemm": {"entry": "benches.kernels.torch_ref:scaled_matmul", "adapter": "torch"},
            },
        ),
        tmp_path / "out.json",
    )
    fa, gm = out["results"]
    assert fa["status"] == "ok" and gm["status"] == "ok", (fa.get("error"), gm.get("error"))
    for r, p, suite in ((fa, decode, "fa"), (gm, block, "gemm")):
        assert r["bytes"] == (shapes.attention_bytes(p) if suite == "fa" else shapes.gemm_bytes(p))
        med = sorted(r["subject_ms"])[1]
        assert r["subject_gbps"] == pytest.approx(r["bytes"] / (med * 1e-3) / 1e9)
        assert r["control_gbps"] > 0 and "peak_gbps" not in r  # no peak known for a CPU
    assert fa["control_impl"].startswith("sdpa padded") and gm["control_impl"].startswith("dequantized to fp32")


SUITE = """
import torch

class RMSNorm:
    PARAMS = ("T", "D", "dtype")

    def make_inputs(self, p, device, seed):
        g = torch.Generator(device=device).manual_seed(seed)
        return {"x": torch.randn((p["T"], p["D"]), generator=g), "weight": torch.rand((p["D"],), generator=g) + 0.5,
                "eps": 1e-6}

    def flops(self, p):
        return 4.0 * p["T"] * p["D"]

    def bytes(self, p):
        return 4.0 * (2 * p["T"] * p["D"] + p["D"])

    def reference(self, inputs):
        x = inputs["x"].double()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + inputs["eps"]) * inputs["weight"]).float()

    def describe(self, p):
        return f"T={p['T']} D={p['D']}"
CONTROL_HERE
"""
CONTROL = """
    def control(self, inputs):
        x, w, eps = inputs["x"], inputs["weight"], inputs["eps"]
        return lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)
"""
KERNELS = """
import torch

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

def rms_norm_no_eps(inp, w):
    return inp * torch.rsqrt(inp.pow(2).mean(-1, keepdim=True)) * w * 1.1
"""


@pytest.mark.parametrize("with_control", [True, False])
def test_brought_suite_gets_the_cold_protocol_control_and_check(tmp_path, with_control):
    tag = "c" if with_control else "n"  # one process runs both cases: modules of their own
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / f"mysuites_{tag}.py").write_text(SUITE.replace("CONTROL_HERE", CONTROL if with_control else ""))
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / f"normlib_{tag}.py").write_text(KERNELS)
    rows = [shape("norm", "t64", {"T": 64, "D": 256}), shape("norm", "t32", {"T": 32, "D": 128})]
    subjects = {"norm": {"entry": f"normlib_{tag}:rms_norm", "adapter": "callable"}}
    mods = {"norm": {"module": f"mysuites_{tag}:RMSNorm", "path": str(tmp_path / "cfg")}}
    out = trial.run(spec(rows, subjects, suite_modules=mods, source_dirs=[str(tmp_path / "up")]), tmp_path / "o.json")
    for r in out["results"]:
        assert r["status"] == "ok", r.get("error")
        assert r["flops"] == 4.0 * 64 * 256 or r["flops"] == 4.0 * 32 * 128
        assert r["subject_gbps"] > 0 and len(r["subject_ms"]) == 3
        assert ("control_ms" in r and r["control_impl"] == "suite norm: control()") == with_control
    # The subject's own names, mapped; a wrong subject is flagged against the control or the reference.
    subjects = {
        "norm": {
            "entry": f"normlib_{tag}:rms_norm_no_eps",
            "adapter": "callable",
            "args": ["x"],
            "kwargs": {"w": "weight"},
        }
    }
    out = trial.run(spec(rows, subjects, suite_modules=mods, source_dirs=[str(tmp_path / "up")]), tmp_path / "o.json")
    assert [r["status"] for r in out["results"]] == ["wrong", "wrong"]


def test_brought_suite_that_breaks_the_contract_is_unavailable(tmp_path):
    (tmp_path / "bad.py").write_text("class S:\n    def flops(self, p):\n        return 1.0\n")
    rows = [shape("x", "a", {"n": 1})]
    out = trial.run(
        spec(rows, {"x": {"entry": "math:sqrt"}}, suite_modules={"x": {"module": "bad:S", "path": str(tmp_path)}}),
        tmp_path / "o.json",
    )
    (r,) = out["results"]
    assert r["status"] == "unavailable" and "lacks make_inputs, bytes, reference, describe" in r["error"]


BENCH = """
import pytest
from lib.ops import work

@pytest.mark.parametrize("n", [2000, 4000])
def test_work(benchmark, n):
    benchmark.extra_info["flops"] = 2.0 * n
    assert benchmark(work, n) == n * (n - 1) // 2

def test_wrong(benchmark):
    assert benchmark(work, 100) == 1

def test_gpu_only(benchmark):
    pytest.skip("needs a GPU")

def test_boom(benchmark):
    benchmark(work, 10)
    raise RuntimeError("illegal memory access")

def test_not_a_benchmark():
    raise AssertionError("never run: --benchmark-only")
"""


def test_pytest_benchmarks_as_shapes(tmp_path):
    up = tmp_path / "up"
    (up / "lib").mkdir(parents=True)
    (up / "lib" / "__init__.py").write_text("")
    (up / "lib" / "ops.py").write_text("def work(n):\n    return sum(range(n))\n")
    (up / "benchmarks").mkdir()
    (up / "benchmarks" / "test_ops.py").write_text(BENCH)
    (up / "pytest.ini").write_text("[pytest]\naddopts = --benchmark-skip -n 8\n")  # would spoil the run
    names = [
        ("w2000", "test_work[2000]"),
        ("w4000", "benchmarks/test_ops.py::test_work[4000]"),
        ("wrong", "test_wrong"),
        ("gpu", "test_gpu_only"),
        ("boom", "test_boom"),
        ("gone", "test_renamed"),
    ]
    rows = [shape("bench", n, {"benchmark": b, "bytes": 8000}) for n, b in names]
    sub = {
        "bench": {
            "entry": "",
            "adapter": "pytest",
            "layout": "bhsd",
            "options": {},
            "pytest": ["benchmarks/test_ops.py"],
        }
    }
    gate = Gate()
    out_dir = tmp_path / "trial"
    out_dir.mkdir()
    out = trial.run(spec(rows, sub, source_dirs=[str(up)], reps=7, control="none"), out_dir / "out.json", gate)
    res = {r["shape"]: r for r in out["results"]}
    for key in ("bench/w2000", "bench/w4000"):
        r = res[key]
        assert r["status"] == "ok" and len(r["subject_ms"]) == 7 and all(t > 0 for t in r["subject_ms"])
        assert r["benchmark"] == f"benchmarks/test_ops.py::test_work[{key[-4:]}]"
        assert r["flops"] == 2.0 * int(key[-4:]) and r["subject_tflops"] > 0 and r["bytes"] == 8000
    assert res["bench/wrong"]["status"] == "wrong" and "assert 4950 == 1" in res["bench/wrong"]["error"]
    assert res["bench/gpu"]["status"] == "unavailable" and "needs a GPU" in res["bench/gpu"]["error"]
    assert res["bench/boom"]["status"] == "crash" and "illegal memory access" in res["bench/boom"]["error"]
    assert res["bench/gone"]["status"] == "crash" and "no benchmark 'test_renamed'" in res["bench/gone"]["error"]
    # One session, inside the device section: after the gate's acquire, before its release.
    (session,) = [p for p in out["phases"] if p[0] == "pytest"]
    (acquired, t0), (released, t1) = gate.events
    assert acquired == "acquire" and released == "release" and t0 <= session[2] <= session[3] <= t1
    assert (out_dir / "benchmark.json").exists() and not (up / ".pytest_cache").exists()


SLEEPER = """
import time

def test_sleep(benchmark):
    benchmark(time.sleep, 0.005)
"""


@pytest.mark.parametrize("cpu_clock", ["cpu", "wall"])
def test_pytest_benchmarks_timed_by_the_trial_clock(tmp_path, cpu_clock):
    """The session's rounds read the trial's clock: on the CPU its CPU time by default, so a round
    that waits (here sleeps 5 ms, as it would while a busy neighbour holds the core) reads ~0, and
    wall time where the protocol asks for it."""
    up = tmp_path / "up"
    (up / "benchmarks").mkdir(parents=True)
    test_file = f"benchmarks/test_sleep_{cpu_clock}.py"  # a name per session: both run in this one process
    (up / test_file).write_text(SLEEPER)
    sub = {"s": {"entry": "", "adapter": "pytest", "layout": "bhsd", "options": {}, "pytest": [test_file]}}
    out_dir = tmp_path / "trial"
    out_dir.mkdir()
    out = trial.run(
        spec(
            [shape("s", "sleep", {"benchmark": "test_sleep"})],
            sub,
            source_dirs=[str(up)],
            reps=3,
            control="none",
            cpu_clock=cpu_clock,
        ),
        out_dir / "out.json",
        Gate(),
    )
    (r,) = out["results"]
    assert r["status"] == "ok" and len(r["subject_ms"]) == 3
    if cpu_clock == "cpu":
        assert out["protocol"]["timer"] == "process_time_ns" and max(r["subject_ms"]) < 2.0
    else:
        assert out["protocol"]["timer"] == "perf_counter_ns" and min(r["subject_ms"]) >= 5.0

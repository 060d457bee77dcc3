"""The suites as pytest-benchmark tests: `pytest benches/ --benchmark-json out.json`.

Same definitions as the trials (suites -> inputs, backends -> callables, correctness check), at
small shapes on the CPU torch backend unless a GPU is visible. Each case checks the subject
against the control before it is timed, and reports TFLOP/s in the benchmark's extra_info.
"""

from __future__ import annotations

import pytest
import torch

from benches import backends, suites
from benches.correctness import compare
from benches.suites.dtypes import TOLERANCES

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
CASES = [
    ("fa", {"B": 1, "H": 4, "S": 256, "D": 64, "causal": False, "dtype": "fp32"}),
    ("fa", {"B": 1, "H": 4, "S": 256, "D": 64, "causal": True, "dtype": "bf16"}),
    ("gemm", {"M": 256, "N": 256, "K": 256, "dtype": "fp32", "layout": "nn"}),
    ("gemm", {"M": 256, "N": 128, "K": 512, "dtype": "bf16", "layout": "nt"}),
]
SUBJECTS = {"fa": "benches.kernels.torch_ref:attention", "gemm": "benches.kernels.torch_ref:matmul"}


def _id(case: tuple[str, dict]) -> str:
    suite, p = case
    return f"{suite}-" + "-".join(f"{k}{v}" for k, v in p.items())


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
@pytest.mark.parametrize("role", ["subject", "control"])
def test_suite(benchmark, case, role):
    suite_name, params = case
    suite = suites.get(suite_name)
    inputs = suite.make_inputs(params, DEVICE, seed=0)
    subject = backends.subject({"entry": SUBJECTS[suite_name], "adapter": "torch"}, DEVICE).prepare(suite_name, inputs)
    control = backends.control("torch", DEVICE)
    assert control is not None
    ctrl = control.prepare(suite_name, inputs)
    check = compare(subject.output(subject.run()), ctrl.output(ctrl.run()), *TOLERANCES[params["dtype"]])
    assert check.ok, check
    run = subject.run if role == "subject" else ctrl.run
    if GPU:

        def timed() -> None:
            run()
            torch.cuda.synchronize()
    else:
        timed = run
    benchmark.extra_info.update(
        suite=suite_name,
        params=params,
        role=role,
        flops=suite.flops(params),
        device=DEVICE,
        max_abs_err=check.max_abs_err,
    )
    benchmark.pedantic(timed, rounds=10, warmup_rounds=2, iterations=1)
    benchmark.extra_info["tflops_median"] = suite.flops(params) / benchmark.stats.stats.median / 1e12

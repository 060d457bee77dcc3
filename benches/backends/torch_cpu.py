"""Control on CPU: torch SDPA and torch.matmul. A demo and CI device, not a measurement one.

Every attention and GEMM shape (benches/backends/sdpa.py, benches/backends/gemm_control.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from benches.backends import gemm_control, sdpa
from benches.backends.base import BackendUnavailable, Prepared, prepared


class TorchCpuControl:
    name = "torch"

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        if suite == "fa":
            if inputs["q"].dtype == torch.float8_e4m3fn:
                raise BackendUnavailable(self.name, "torch SDPA has no fp8 attention")
            plan = sdpa.plan(inputs)
            return prepared(lambda: sdpa.call(plan), plan.output, impl=plan.impl)
        if suite == "gemm":
            return gemm_control.cpu(inputs)
        raise ValueError(f"unknown suite {suite!r}")

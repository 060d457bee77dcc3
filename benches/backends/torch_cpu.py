"""Control on CPU: torch SDPA and torch.matmul. A demo and CI device, not a measurement one."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from benches.backends.base import BackendUnavailable, Prepared, prepared


class TorchCpuControl:
    name = "torch"

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        if suite == "fa":
            q, k, v = inputs["q"], inputs["k"], inputs["v"]
            if q.dtype == torch.float8_e4m3fn:
                raise BackendUnavailable(self.name, "torch SDPA has no fp8 attention")
            causal, scale = inputs["causal"], inputs["sm_scale"]
            sdpa = torch.nn.functional.scaled_dot_product_attention
            return prepared(lambda: sdpa(q, k, v, is_causal=causal, scale=scale))
        if suite == "gemm":
            a, b = inputs["a"], inputs["b"]
            if a.dtype == torch.float8_e4m3fn:  # no fp8 matmul on CPU: upcast outside the timing
                a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
            return prepared(lambda: torch.matmul(a, b))
        raise ValueError(f"unknown suite {suite!r}")

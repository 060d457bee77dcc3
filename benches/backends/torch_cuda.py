"""Control on NVIDIA (and ROCm torch): SDPA restricted to fused kernels, cuBLAS GEMM.

Attention: the flash / cuDNN backends, and for a masked shape (bottom-right causal with Sq < Sk,
variable lengths) the memory-efficient one as well, which takes a mask where flash does not;
never the math fallback (benches/backends/sdpa.py says which form each shape takes).
GEMM: cuBLAS through torch.matmul and torch._scaled_mm (benches/backends/gemm_control.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from benches.backends import gemm_control, sdpa
from benches.backends.base import BackendUnavailable, Prepared, prepared, require_gpu


def _sdpa_backends(masked: bool = False) -> list[Any]:
    from torch.nn.attention import SDPBackend

    names = ["FLASH_ATTENTION", "CUDNN_ATTENTION"] + (["EFFICIENT_ATTENTION"] if masked else [])
    return [getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)]


class TorchCudaControl:
    name = "torch_cuda"

    def __init__(self) -> None:
        require_gpu(self.name)

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        if suite == "fa":
            from torch.nn.attention import sdpa_kernel

            if inputs["q"].dtype == torch.float8_e4m3fn:
                raise BackendUnavailable(self.name, "torch SDPA has no fp8 attention")
            plan = sdpa.plan(inputs)
            backends = _sdpa_backends(plan.mask is not None)

            def run() -> torch.Tensor:
                with sdpa_kernel(backends):
                    return sdpa.call(plan)

            return prepared(run, plan.output, impl=plan.impl)
        if suite == "gemm":
            return gemm_control.cuda(inputs)
        raise ValueError(f"unknown suite {suite!r}")

"""Control on NVIDIA (and ROCm torch): SDPA restricted to the flash / cuDNN backends, cuBLAS GEMM.

fp8 GEMM goes through torch._scaled_mm (per-tensor scales of 1, bf16 out), which needs B
column-major: the copy is made in prepare, outside the timing.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from benches.backends.base import BackendUnavailable, Prepared, prepared, require_gpu


def _sdpa_backends() -> list[Any]:
    from torch.nn.attention import SDPBackend

    names = ["FLASH_ATTENTION", "CUDNN_ATTENTION"]
    return [getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)]


class TorchCudaControl:
    name = "torch_cuda"

    def __init__(self) -> None:
        require_gpu(self.name)

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        if suite == "fa":
            from torch.nn.attention import sdpa_kernel

            q, k, v = inputs["q"], inputs["k"], inputs["v"]
            if q.dtype == torch.float8_e4m3fn:
                raise BackendUnavailable(self.name, "torch SDPA has no fp8 attention")
            causal, scale = inputs["causal"], inputs["sm_scale"]
            sdpa, backends = torch.nn.functional.scaled_dot_product_attention, _sdpa_backends()

            def run() -> torch.Tensor:
                with sdpa_kernel(backends):
                    return sdpa(q, k, v, is_causal=causal, scale=scale)

            return prepared(run)
        if suite == "gemm":
            a, b = inputs["a"], inputs["b"]
            if a.dtype == torch.float8_e4m3fn:
                if not hasattr(torch, "_scaled_mm"):
                    raise BackendUnavailable(self.name, "this torch has no torch._scaled_mm for fp8")
                a, b = a.contiguous(), b.t().contiguous().t()
                one = torch.ones((), device=a.device, dtype=torch.float32)
                out = inputs.get("out_dtype", torch.bfloat16)
                return prepared(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=out))
            return prepared(lambda: torch.matmul(a, b))
        raise ValueError(f"unknown suite {suite!r}")

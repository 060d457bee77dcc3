"""Names of dtypes as configs spell them, and the default correctness tolerances per dtype."""

from __future__ import annotations

import torch

# fp8 means OCP e4m3 (float8_e4m3fn), the format both H200 and MI355X (gfx950) run natively, with unit
# scales; fp8_e4m3 / fp8_e5m2 are the scaled GEMM inputs (benches/suites/fp8.py).
DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}

# (atol, rtol) on outputs of order one; the suites scale inputs so that outputs are O(1).
TOLERANCES: dict[str, tuple[float, float]] = {
    "bf16": (2e-2, 2e-2),
    "fp16": (5e-3, 5e-3),
    "fp32": (1e-4, 1e-4),
    "fp8": (1.5e-1, 1e-1),
    # Scaled fp8 GEMMs are checked against the exact product of the quantized operands: what is left
    # is the order of accumulation and the bf16 output's rounding.
    "fp8_e4m3": (3e-2, 3e-2),
    "fp8_e5m2": (3e-2, 3e-2),
}
FP8_TYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})") from None

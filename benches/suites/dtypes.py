"""Names of dtypes as configs spell them, and the default correctness tolerances per dtype."""

from __future__ import annotations

import torch

# fp8 means OCP e4m3 (float8_e4m3fn), the format both H200 and MI355X (gfx950) run natively.
DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp8": torch.float8_e4m3fn,
}

# (atol, rtol) on outputs of order one; the suites scale inputs so that outputs are O(1).
TOLERANCES: dict[str, tuple[float, float]] = {
    "bf16": (2e-2, 2e-2),
    "fp16": (5e-3, 5e-3),
    "fp32": (1e-4, 1e-4),
    "fp8": (1.5e-1, 1e-1),
}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})") from None

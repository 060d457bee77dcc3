"""Subject output against the control's (or the fp32 reference): pass/fail plus error figures.

The test is |s - c| <= atol * rms(c) + rtol * |c| elementwise: atol is relative to the output's
RMS so that one tolerance fits attention outputs (small, ~1/sqrt(S)) and GEMM outputs (~sqrt(K)).
NaN or Inf in the subject's output always fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Check:
    ok: bool
    max_abs_err: float
    max_rel_err: float  # max |s - c| / max |c|
    mismatched: int  # elements outside the tolerance
    total: int

    def describe(self, atol: float, rtol: float) -> str:
        return (
            f"output mismatch: {self.mismatched}/{self.total} elements outside atol={atol:g}*rms "
            f"rtol={rtol:g}; max abs err {self.max_abs_err:.4g}, max rel err {self.max_rel_err:.4g}"
        )


def compare(subject: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> Check:
    if tuple(subject.shape) != tuple(expected.shape):
        raise ValueError(f"subject output shape {tuple(subject.shape)} != expected {tuple(expected.shape)}")
    s, c = subject.float(), expected.float()
    diff = (s - c).abs()
    finite = bool(torch.isfinite(s).all())
    scale = c.pow(2).mean().sqrt().clamp_min(1e-12)
    bad = ~(diff <= atol * scale + rtol * c.abs())  # NaN compares False, so counts as bad
    max_abs = float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0
    max_rel = max_abs / max(float(c.abs().max()), 1e-12) if c.numel() else 0.0
    mismatched = int(bad.sum())
    return Check(
        ok=finite and mismatched == 0, max_abs_err=max_abs, max_rel_err=max_rel, mismatched=mismatched, total=c.numel()
    )

"""Subjects and controls by name. Each vendor lives in its own module, imported on demand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benches.backends.base import Backend, BackendUnavailable, Prepared

__all__ = ["Backend", "BackendUnavailable", "Prepared", "subject", "control", "SUBJECT_ADAPTERS", "CONTROLS"]

SUBJECT_ADAPTERS = ("triton", "torch", "flydsl", "aiter", "callable", "pytest")
CONTROLS = ("torch", "torch_cuda", "aiter", "none")


def subject(spec: Mapping[str, Any], device: str) -> Backend:
    """spec: {"entry", "adapter", "layout", "options"[, "args", "kwargs"]} as in the trial spec.
    (A "pytest" subject is no backend: benches/pytest_bench.py runs it.)"""
    adapter = spec.get("adapter", "callable")
    entry, layout, options = spec.get("entry", ""), spec.get("layout", "bhsd"), spec.get("options") or {}
    args, kwargs = tuple(spec.get("args") or ()), dict(spec.get("kwargs") or {})
    if adapter in ("callable", "torch"):
        from benches.backends.callable import CallableSubject

        return CallableSubject(entry, layout, options, name=adapter, args=args, kwargs=kwargs)
    if adapter == "triton":
        from benches.backends.triton import TritonSubject

        return TritonSubject(entry, layout, options, device=device, args=args, kwargs=kwargs)
    if adapter == "flydsl":
        from benches.backends.flydsl import FlyDSLSubject

        return FlyDSLSubject(entry or None, options)
    if adapter == "aiter":
        from benches.backends.aiter import AiterSubject

        return AiterSubject(entry, options, layout=layout, args=args, kwargs=kwargs)
    raise BackendUnavailable(str(adapter), f"unknown subject adapter (known: {', '.join(SUBJECT_ADAPTERS)})")


def control(name: str, device: str) -> Backend | None:
    """None for "none": the trial then checks correctness against the suite's fp32 reference."""
    if name == "none":
        return None
    if name == "torch" and device == "cpu":
        from benches.backends.torch_cpu import TorchCpuControl

        return TorchCpuControl()
    if name in ("torch", "torch_cuda"):
        from benches.backends.torch_cuda import TorchCudaControl

        return TorchCudaControl()
    if name == "aiter":
        from benches.backends.aiter import AiterControl

        return AiterControl()
    raise BackendUnavailable(name, f"unknown control (known: {', '.join(CONTROLS)})")

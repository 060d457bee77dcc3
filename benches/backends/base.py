"""The one small interface every subject and control sits behind.

A backend turns a suite's canonical inputs into a `Prepared`: a zero-argument `run` that launches
the kernel (timed), and `output(result)` that converts its result back to the canonical layout
(untimed). Everything that is not the kernel (layout changes, weight shuffles) happens in `prepare`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch


class BackendUnavailable(Exception):
    """A backend cannot run on this machine: the message says which and why."""

    def __init__(self, backend: str, why: str) -> None:
        self.backend, self.why = backend, why
        super().__init__(f"backend {backend} unavailable: {why}")


@dataclass(frozen=True)
class Prepared:
    run: Callable[[], Any]
    output: Callable[[Any], torch.Tensor]
    impl: str = ""  # what a control runs when that depends on the shape (recorded as control_impl)


def _identity(x: Any) -> torch.Tensor:
    return x[0] if isinstance(x, (tuple, list)) else x


class Backend(Protocol):
    name: str

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        """Inputs -> zero-arg callable; raises BackendUnavailable for what it cannot run."""
        ...


def prepared(run: Callable[[], Any], output: Callable[[Any], torch.Tensor] = _identity, impl: str = "") -> Prepared:
    return Prepared(run=run, output=output, impl=impl)


def load_entry(entry: str, backend: str) -> Callable[..., Any]:
    """Import "pkg.mod:fn". A module that does not exist is UNAVAILABLE; one that fails to import
    for another reason (a syntax error in the commit under test) propagates: that is a crash."""
    module_name, _, attr = entry.partition(":")
    if not module_name or not attr:
        raise BackendUnavailable(backend, f"entry point {entry!r} is not 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise BackendUnavailable(backend, f"cannot import {module_name!r}: {exc}") from None
        raise
    fn: Any = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise BackendUnavailable(backend, f"module {module_name!r} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise BackendUnavailable(backend, f"{entry!r} is not callable")
    return fn


def require_module(name: str, backend: str) -> Any:
    """Import a vendor package, or say clearly that it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise BackendUnavailable(backend, f"cannot import {name!r}: {exc}") from None


def require_gpu(backend: str, vendor: str | None = None) -> None:
    """vendor: "cuda" (NVIDIA), "rocm" (AMD), or None for either."""
    if not torch.cuda.is_available():
        raise BackendUnavailable(backend, "no GPU visible to torch (torch.cuda.is_available() is False)")
    is_hip = torch.version.hip is not None
    if vendor == "cuda" and is_hip:
        raise BackendUnavailable(backend, "needs an NVIDIA GPU, this torch is built for ROCm")
    if vendor == "rocm" and not is_hip:
        raise BackendUnavailable(backend, "needs an AMD GPU with a ROCm build of torch")


def to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """Canonical [B, H, S, D] -> the subject's layout ("bhsd" or "bshd"), contiguous."""
    if layout == "bhsd":
        return t.contiguous()
    if layout == "bshd":
        return t.transpose(1, 2).contiguous()
    raise ValueError(f"unknown attention layout {layout!r} (known: bhsd, bshd)")


def from_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The subject's attention output -> canonical [B, H, S, D]."""
    if layout == "bhsd":
        return t
    if layout == "bshd":
        return t.transpose(1, 2)
    raise ValueError(f"unknown attention layout {layout!r} (known: bhsd, bshd)")

"""Benchmark suites: shape parameters -> inputs, FLOP count, reference output."""

from __future__ import annotations

from types import ModuleType

from benches.suites import flash_attention, gemm

SUITES: dict[str, ModuleType] = {"fa": flash_attention, "gemm": gemm}


def get(name: str) -> ModuleType:
    try:
        return SUITES[name]
    except KeyError:
        raise ValueError(f"unknown suite {name!r} (known: {', '.join(SUITES)})") from None

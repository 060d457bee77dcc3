"""Benchmark suites: shape parameters -> inputs, FLOP and byte counts, reference output.

The contract every suite keeps, built in or brought by the user (`[suites.NAME] module =
"pkg.mod:Suite"`): `make_inputs(p, device, seed) -> dict`, `flops(p)`, `bytes(p)`,
`reference(inputs) -> tensor`, `describe(p) -> str`. Optional: `control(inputs) -> callable`
(a stable implementation timed beside the subject), `output(result) -> tensor`, `tolerance(p)`.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from benches.suites import flash_attention, gemm

SUITES: dict[str, Any] = {"fa": flash_attention, "gemm": gemm}
CONTRACT = ("make_inputs", "flops", "bytes", "reference", "describe")
_LOADED: dict[str, Any] = {}


class SuiteUnavailable(Exception):
    """A brought suite that cannot be loaded or does not keep the contract: the message says why."""


def get(name: str) -> Any:
    try:
        return SUITES[name] if name in SUITES else _LOADED[name]
    except KeyError:
        raise ValueError(f"unknown suite {name!r} (known: {', '.join([*SUITES, *_LOADED])})") from None


def load(name: str, module: str, path: str | None = None) -> Any:
    """Import a brought suite "pkg.mod:Attr" (from `path` when given, searched after the commit's own
    source dirs), make an instance when Attr is a class, and check the contract."""
    mod_name, _, attr = module.partition(":")
    if path and path not in sys.path:
        sys.path.append(path)
    try:
        mod: ModuleType = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise SuiteUnavailable(f"suite {name}: cannot import {mod_name!r}: {exc}") from None
        raise
    target: Any = mod
    for part in attr.split("."):
        if not hasattr(target, part):
            raise SuiteUnavailable(f"suite {name}: module {mod_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    suite = target() if isinstance(target, type) else target
    missing = [m for m in CONTRACT if not callable(getattr(suite, m, None))]
    if missing:
        raise SuiteUnavailable(
            f"suite {name}: {module} lacks {', '.join(missing)} (the suite contract: {', '.join(CONTRACT)})"
        )
    _LOADED[name] = suite
    return suite

"""aiter imported as the control without the subject's FlyDSL, and kept from reaching it later.

Read at ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879: `import aiter` runs
`aiter/__init__.py` -> `ops/attention.py` -> `ops/triton/gluon/pa_decode_gluon.py`, which imports
`flydsl.compiler`, `flydsl.expr`, ... (inside try/except), and `aiter.ops.flydsl` imports `flydsl`
when `is_flydsl_available()` (a `find_spec("flydsl")`, asked again at every call) says so. The
tuned GEMM lookup (`tuned_gemm.get_GEMM_A16W16_config`) and `gemm_op_a8w8` consult
`is_flydsl_available()` to take or skip a FlyDSL kernel. Inside a trial the top-level `flydsl` that
Python finds is the FlyDSL commit under test, so a control that imported or consulted it would move
with the subject and hide its steps.

So the control is imported (1) before the checkout goes on sys.path (benches/trial.py) and (2) with
`flydsl` unimportable while aiter's modules load: aiter's own try/except blocks then take their
no-FlyDSL branches, and no `flydsl` module is left in the process for the subject to collide with.
(3) Afterwards every `is_flydsl_available` in aiter's modules answers False, so the GEMM lookups
that run later, with the checkout on sys.path, never pick a FlyDSL kernel: the control's kernel
cannot depend on the subject's commit. The first run of each control kernel is still checked
against aiter's log (benches/backends/aiter.py `pure_control`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

BLOCKED = "flydsl"


def _is_blocked(fullname: str) -> bool:
    return fullname == BLOCKED or fullname.startswith(BLOCKED + ".")


class _Refuse(importlib.abc.MetaPathFinder):
    """A finder placed first that refuses `flydsl` and its submodules (an ImportError, which aiter
    catches where it treats FlyDSL as optional)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if _is_blocked(fullname):
            raise ImportError(
                f"{fullname!r} is not imported by the aiter control (FlyDSL is the commit under test in a trial)",
                name=fullname,
            )
        return None


@contextmanager
def flydsl_unimportable() -> Iterator[None]:
    """While the block runs, `import flydsl...` and `find_spec("flydsl")` raise ImportError."""
    loaded = sorted(name for name in sys.modules if _is_blocked(name))
    if loaded:
        raise RuntimeError(
            f"{loaded[0]!r} was imported before the aiter control: the control must be "
            "imported first, before the checkout is on sys.path"
        )
    finder = _Refuse()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def _never() -> bool:
    """The control's answer to aiter's `is_flydsl_available()`: FlyDSL is never the control's."""
    return False


def pin_without_flydsl() -> list[str]:
    """Every loaded aiter module's `is_flydsl_available` answers False from now on. Returns the
    modules pinned (for the trial log)."""
    pinned = []
    for name, module in list(sys.modules.items()):
        if (name == "aiter" or name.startswith("aiter.")) and callable(getattr(module, "is_flydsl_available", None)):
            module.is_flydsl_available = _never  # type: ignore[attr-defined]
            pinned.append(name)
    return sorted(pinned)


def import_control(name: str = "aiter") -> tuple[ModuleType, list[str]]:
    """`aiter` and the modules the control uses later, imported with FlyDSL unimportable, then
    pinned off FlyDSL. Returns the package and the pinned modules' names."""
    with flydsl_unimportable():
        package = importlib.import_module(name)
        for extra in ("tuned_gemm", "ops.shuffle"):  # imported lazily by the control; load them now
            try:
                importlib.import_module(f"{name}.{extra}")
            except ImportError:
                pass
    return package, pin_without_flydsl()

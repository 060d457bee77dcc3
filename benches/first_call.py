"""What a first call spends its time on: importing modules (a library that imports its kernels
inside the call), Triton's compile of each kernel (a JIT compile, or a load from its cache dir), and
the rest (the library's own first-call work: Triton's driver and launchers, torch's lazy setup, CUDA
module loads, autotuning's benchmark runs).

On a real library (Liger-Kernel on one H100) a trial process's first call took 7-11 s whatever its
JIT cache held, and the demo's 0.7-2 s: naming the parts says which of them can be done once for
many trials and which only once per process. Runs inside the trial process; imports nothing of the
bot, and never imports Triton itself (only a Triton the library already imported is hooked).
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any


class _Clock:
    def __init__(self) -> None:
        self.import_s = 0.0
        self.jit_s = 0.0
        self.jit_calls = 0
        self._depth = 0
        self._jit_start: float | None = None

    def timed_import(self, real: Any) -> Any:
        """`builtins.__import__` with the outermost import of a module not yet loaded timed."""

        def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:  # noqa: A002 - builtins.__import__'s own parameter names
            if self._depth or self._jit_start is not None or (level == 0 and name in sys.modules and not fromlist):
                return real(name, globals, locals, fromlist, level)
            self._depth += 1
            start = time.perf_counter()
            try:
                return real(name, globals, locals, fromlist, level)
            finally:
                self._depth -= 1
                self.import_s += time.perf_counter() - start

        return importer

    def before_compile(self, *args: Any, **kwargs: Any) -> bool:
        self._jit_start = time.perf_counter()
        return False  # go on and compile (Triton: a true return skips the compile)

    def after_compile(self, *args: Any, **kwargs: Any) -> None:
        if self._jit_start is not None:
            self.jit_s += time.perf_counter() - self._jit_start
            self.jit_calls += 1
            self._jit_start = None


def _chain(ours: Any, theirs: Any) -> Any:
    """Our hook, then the one that was set (a library's own), whose answer is kept."""
    if theirs is None:
        return ours

    def both(*args: Any, **kwargs: Any) -> Any:
        ours(*args, **kwargs)
        return theirs(*args, **kwargs)

    return both


@contextlib.contextmanager
def _triton_hooks(clock: _Clock) -> Iterator[None]:
    runtime = getattr(getattr(sys.modules.get("triton.knobs"), "runtime", None), "jit_cache_hook", "absent")
    if runtime == "absent":  # no Triton loaded, or one without the knobs' hooks (before 3.4)
        yield
        return
    knobs = sys.modules["triton.knobs"].runtime
    before, after = knobs.jit_cache_hook, knobs.jit_post_compile_hook
    knobs.jit_cache_hook = _chain(clock.before_compile, before)
    knobs.jit_post_compile_hook = _chain(clock.after_compile, after)
    try:
        yield
    finally:
        knobs.jit_cache_hook, knobs.jit_post_compile_hook = before, after


@contextlib.contextmanager
def parts() -> Iterator[dict[str, Any]]:
    """Within the block, seconds spent importing (`import_s`), in Triton's compiles (`jit_s`, each a
    JIT compile or a cache load: `jit_kernels` of them) and the rest (`other_s`); filled on exit."""
    clock, found = _Clock(), {}
    real = builtins.__import__
    start = time.perf_counter()
    builtins.__import__ = clock.timed_import(real)
    try:
        with _triton_hooks(clock):
            yield found
    finally:
        builtins.__import__ = real
        total = time.perf_counter() - start
        found.update(
            import_s=round(clock.import_s, 6),
            jit_s=round(clock.jit_s, 6),
            jit_kernels=clock.jit_calls,
            other_s=round(max(0.0, total - clock.import_s - clock.jit_s), 6),
        )

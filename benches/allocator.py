"""glibc malloc's thresholds set from inside the trial process, after every import, before timing.

The runner puts fixed thresholds in every CPU trial's environment (bisector/runner/env.py
FIXED_MALLOC): with glibc's dynamic ones, large temporaries are mapped afresh or the heap is trimmed
between calls, so a kernel pays page faults on every call, at a rate that depends on the process's
history. The environment is read once, when the process starts; a library that calls mallopt() at
import, or a process whose variables did not arrive, runs in the dynamic regime all the same. CI saw
two neutral builds fault ~5,760 pages on every timed call (2x slower) in all their trials of one run
(studies/results/cpu-slow-builds.txt). Setting the same values again with mallopt() right before the
device section makes the regime the trial's choice, whatever came before. Where it changes the
regime, the heap grows for a few calls before it settles (torch's memalign'd blocks do not fit the
holes the freed ones leave until those coalesce: a 1 MiB temporary faulted fresh pages for 6-9 calls
after the pin, then none; tests/test_allocator.py); where the environment's values were in force, the
pin changes nothing.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

# mallopt() parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

# The fixed thresholds: the runner puts them in every CPU trial's environment (bisector/runner/env.py
# FIXED_MALLOC), and `pin` sets them here where the environment names none (the benches stand alone).
DEFAULTS = {"MALLOC_MMAP_THRESHOLD_": 32 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20}
PARAMS = {
    "MALLOC_MMAP_THRESHOLD_": M_MMAP_THRESHOLD,
    "MALLOC_TRIM_THRESHOLD_": M_TRIM_THRESHOLD,
    "MALLOC_TOP_PAD_": M_TOP_PAD,
    "MALLOC_ARENA_MAX": M_ARENA_MAX,
}


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def wanted(environ: Mapping[str, str]) -> dict[str, int]:
    """The settings to pin: the environment's where it names them (a config's own choice), else the defaults."""
    out = dict(DEFAULTS)
    for name in PARAMS:
        value = environ.get(name, "").strip()
        if value.isdigit():
            out[name] = int(value)
    return out


def pin(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """mallopt() each setting; what was set ({} where there is no glibc mallopt: macOS, musl)."""
    libc = _libc()
    if libc is None:
        return {}
    settings = wanted(os.environ if environ is None else environ)
    return {name: value for name, value in settings.items() if libc.mallopt(PARAMS[name], value) == 1}

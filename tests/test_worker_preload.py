"""benches.worker's preload: what a zygote computes once so that no forked trial computes it again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD_SEES = textwrap.dedent("""
    import os, sys
    from benches import worker
    assert worker.preload(["triton"]) == []
    from triton.runtime.cache import triton_key
    pid = os.fork()
    if pid == 0:  # a trial forked from the zygote: Triton's key is there before its first JIT call
        os._exit(0 if triton_key.cache_info().currsize == 1 and triton_key.cache_info().misses == 1 else 3)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def test_a_forked_trial_inherits_tritons_cache_key() -> None:
    """Every trial's first kernel call hashed Triton's compiler files and libtriton (~0.4 s of CPU
    a trial, studies/results/h200-first-calls.txt); the zygote hashes them once before it forks."""
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, "-c", CHILD_SEES], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_preload_without_triton_computes_nothing() -> None:
    proc = subprocess.run([sys.executable, "-c", "from benches import worker; import sys; "
                           "worker.preload(['json']); sys.exit('triton' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]

"""benches.allocator: a trial pins glibc's malloc thresholds itself, after its imports.

Real processes, real page faults: a library that sets a small mmap threshold at import makes every
call of a kernel with a 1 MiB temporary fault ~256 pages, whatever the environment said; the trial's
own pin takes that back (studies/results/cpu-slow-builds.txt)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benches import allocator

pytestmark = pytest.mark.skipif(allocator._libc() is None, reason="no glibc mallopt here")

# A subject whose import does what a library may: fix glibc's mmap threshold at 128 KiB, so the
# 1 MiB temporary of every call is mapped afresh (and faults) each time.
LIBRARY = """
import ctypes
import torch

ctypes.CDLL(None).mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD


def matmul(a, b, **_):
    scratch = torch.empty(1 << 18, dtype=torch.float32)  # 1 MiB
    scratch.fill_(1.0)
    return torch.matmul(a, b)
"""

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from benches import allocator
from benches.timing import minor_faults
import library

a = torch.randn(8, 8)

def per_call(settle):
    for _ in range(settle):  # after a change of regime the heap grows for a few calls (memalign'd
        library.matmul(a, a)  # blocks do not fit the holes the freed ones leave) until they coalesce
    out = []
    for _ in range(5):
        f0 = minor_faults()
        library.matmul(a, a)
        out.append(minor_faults() - f0)
    return sorted(out)[2]

before = per_call(1)
pinned = allocator.pin()
print(json.dumps({"before": before, "after": per_call(20), "pinned": pinned}))
"""


def clean_env() -> dict[str, str]:
    """This process's environment without any malloc setting: glibc's own defaults at start."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}


def test_pin_takes_back_a_threshold_a_library_set_at_import(tmp_path: Path) -> None:
    (tmp_path / "library.py").write_text(LIBRARY)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] >= 64, got  # 1 MiB mapped afresh per call: 128-256 faults (the kernel may map 8 KiB a fault)
    assert got["after"] <= 16, got
    assert got["pinned"] == {"MALLOC_MMAP_THRESHOLD_": 32 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20}


def test_a_cpu_trial_pins_after_importing_its_subject(tmp_path: Path) -> None:
    from tests.test_trial import spec

    (tmp_path / "library.py").write_text(LIBRARY)
    # the warm-up calls let the heap settle after the pin (see PROBE)
    (tmp_path / "spec.json").write_text(json.dumps(spec("library:matmul", source_dirs=[str(tmp_path)], warmup=20)))
    proc = subprocess.run(
        [sys.executable, "-m", "benches.trial", "spec.json", "out.json"],
        cwd=tmp_path,
        env={**clean_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["protocol"]["malloc_pinned"]["MALLOC_MMAP_THRESHOLD_"] == 32 << 20
    for r in out["results"]:
        assert r["status"] == "ok" and r["timed_faults"][0] <= 16, r["timed_faults"]


def test_the_environment_names_the_settings_a_config_chose() -> None:
    got = allocator.wanted(
        {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_ARENA_MAX": "1", "MALLOC_TRIM_THRESHOLD_": "x"}
    )
    assert got == {"MALLOC_MMAP_THRESHOLD_": 1 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20, "MALLOC_ARENA_MAX": 1}

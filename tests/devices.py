"""The devices a test of the trial machinery runs on: always the CPU, and a CUDA GPU where there is one.

The fences (memory watch, process groups, host-wide device locks) and the secret scrub are the same
code for every device, but a GPU trial is a different process: a CUDA context, the driver's own
threads, gigabytes of resident memory before the kernel runs. The tests parametrized over `DEVICES`
run those paths on a GPU host (`python -m pytest -m gpu`), and say "skipped" elsewhere.
"""

from __future__ import annotations

import subprocess

import pytest


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


needs_cuda = pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=[needs_cuda, pytest.mark.gpu])]
CONTROL = {"cpu": "torch", "cuda": "torch_cuda"}


def gpu_processes() -> set[int]:
    """PIDs that hold a context on any NVIDIA GPU of this host (nvidia-smi's compute apps)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return {int(line) for line in out.split() if line.strip().isdigit()}

"""Fingerprint of the machine a trial ran on: device, driver, library versions. Stored per trial so
that a toolchain or driver change between two measurements is visible."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from typing import Any

import torch

_PACKAGES = ("torch", "triton", "aiter", "flydsl", "numpy")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    for cmd in (["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                ["amd-smi", "version"]):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip().splitlines()[0]
    return None


def fingerprint(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "versions": {p: v for p in _PACKAGES if (v := _version(p))},
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
        "device_kind": device,
        "visible": os.environ.get("HIP_VISIBLE_DEVICES" if torch.version.hip else "CUDA_VISIBLE_DEVICES"),
    }
    if device != "cpu" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device_name=props.name, multiprocessors=props.multi_processor_count,
                    total_memory=props.total_memory, l2_cache=getattr(props, "L2_cache_size", None),
                    arch=getattr(props, "gcnArchName", None) or f"sm_{props.major}{props.minor}",
                    driver=_driver())
    else:
        info["device_name"] = info["cpu"]
        info["threads"] = torch.get_num_threads()
    return info

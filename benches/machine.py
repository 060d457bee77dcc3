"""Fingerprint of the machine a trial ran on: device, driver, library versions. Stored per trial so
that a toolchain or driver change between two measurements is visible."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

_PACKAGES = ("torch", "triton", "aiter", "flydsl", "numpy")
NVIDIA_PROC = "/proc/driver/nvidia/version"

# Peak DRAM bandwidth by device name, GB/s (vendors' data sheets), for "achieved bandwidth against
# the device's peak": decode attention is bound by it. The first name a device's name contains wins.
PEAK_GBPS: tuple[tuple[str, float], ...] = (
    ("GH200", 4000.0),
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("B200", 8000.0),
    ("GB200", 8000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB", 1935.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("MI355X", 8000.0),
    ("MI350X", 8000.0),
    ("MI325X", 6000.0),
    ("MI300X", 5300.0),
    ("MI300A", 5300.0),
    ("MI250X", 3277.0),
)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    """The GPU driver's version: from the NVIDIA kernel module's file where there is one (a file read,
    where nvidia-smi is a process of ~0.1 s in every trial's setup), else the vendor's tool."""
    try:
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", Path(NVIDIA_PROC).read_text())
        if found:
            return found.group(1)
    except OSError:
        pass
    for cmd in (
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
        ["amd-smi", "version"],
    ):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip().splitlines()[0]
    return None


def peak_gbps(name: str | None) -> float | None:
    """The data-sheet peak bandwidth of a device named `name`, or None when not in the table."""
    for part, gbps in PEAK_GBPS:
        if name and part.lower() in name.lower():
            return gbps
    return None


def device_peak_gbps(device: str) -> float | None:
    if device == "cpu" or not torch.cuda.is_available():
        return None
    return peak_gbps(torch.cuda.get_device_properties(0).name)


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
        info.update(
            device_name=props.name,
            multiprocessors=props.multi_processor_count,
            total_memory=props.total_memory,
            l2_cache=getattr(props, "L2_cache_size", None),
            arch=getattr(props, "gcnArchName", None) or f"sm_{props.major}{props.minor}",
            driver=_driver(),
        )
    else:
        info["device_name"] = info["cpu"]
        info["threads"] = torch.get_num_threads()
    return info

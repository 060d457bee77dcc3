"""The demo's configs: pick the device flavour and point the config's upstream at the written repo.

configs/cpu-demo.toml and configs/h200-demo.toml carry `upstream.repo = "demo"` as a placeholder;
`demo_config` loads one and replaces it with the generated repository's path.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import os
import re
from pathlib import Path

from bisector.config import Config, load
from bisector.errors import BadInput

CONFIG_FILES = {"cpu": "cpu-demo.toml", "cuda": "h200-demo.toml"}
DEVICES = ("auto", "cpu", "cuda")


class DemoDeviceError(BadInput):
    """`--device` names a flavour the demo does not have, or one this machine cannot run."""


def default_configs_dir() -> Path:
    """configs/ of the source checkout this package runs from (editable install)."""
    return Path(__file__).resolve().parents[2] / "configs"


def pick_device(requested: str) -> str:
    """auto -> cuda when a CUDA torch, triton and a GPU are there (`gpu_visible`), else cpu."""
    if requested not in DEVICES:
        raise DemoDeviceError(f"--device: must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    gpu = gpu_visible()
    if requested == "cuda" and not gpu:
        raise DemoDeviceError("--device cuda: no CUDA GPU with triton on this machine (use --device cpu)")
    return "cuda" if gpu else "cpu"


def gpu_visible() -> bool:
    """What `torch.cuda.is_available()` and an importable triton say, without importing either in the
    bot: the build torch records in its version.py (CUDA, or ROCm's HIP), then the driver's own count
    of the devices this process may see (libcuda's, which reads CUDA_VISIBLE_DEVICES as torch does;
    /dev/kfd for ROCm). Importing torch and asking it took 3.4 s on the H200 host, ahead of everything
    else the demo does (the trials import torch in their own processes)."""
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is None or not torch_spec.origin or importlib.util.find_spec("triton") is None:
        return False
    try:
        version = Path(torch_spec.origin).with_name("version.py").read_text()
    except OSError:
        return False
    built = {key: re.search(rf"^{key}\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", version, re.M) for key in ("cuda", "hip")}
    if built["hip"]:
        return Path("/dev/kfd").exists() and os.environ.get("HIP_VISIBLE_DEVICES", "0").strip() not in ("", "-1")
    return bool(built["cuda"]) and cuda_device_count() > 0


def cuda_device_count() -> int:
    """The NVIDIA driver's count of the devices visible here (0 without a driver or a device)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    except OSError:
        return 0


def demo_config(device: str, repo: Path, configs_dir: Path | None = None) -> Config:
    """The demo config of `device` ("cpu" | "cuda") with its upstream set to `repo`."""
    if device not in CONFIG_FILES:
        raise DemoDeviceError(f"device: must be cpu or cuda, got {device!r}")
    config = load((configs_dir or default_configs_dir()) / CONFIG_FILES[device])
    upstream = dataclasses.replace(config.upstream, repo=str(Path(repo).resolve()))
    return dataclasses.replace(config, upstream=upstream)

"""The demo's configs: pick the device flavour and point the config's upstream at the written repo.

configs/cpu-demo.toml and configs/h200-demo.toml carry `upstream.repo = "demo"` as a placeholder;
`demo_config` loads one and replaces it with the generated repository's path.
"""

from __future__ import annotations

import dataclasses
import importlib.util
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
    """auto -> cuda when torch sees a GPU and triton is importable, else cpu."""
    if requested not in DEVICES:
        raise DemoDeviceError(f"--device: must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    import torch

    gpu = torch.cuda.is_available() and importlib.util.find_spec("triton") is not None
    if requested == "cuda" and not gpu:
        raise DemoDeviceError("--device cuda: no CUDA GPU with triton on this machine (use --device cpu)")
    return "cuda" if gpu else "cpu"


def demo_config(device: str, repo: Path, configs_dir: Path | None = None) -> Config:
    """The demo config of `device` ("cpu" | "cuda") with its upstream set to `repo`."""
    if device not in CONFIG_FILES:
        raise DemoDeviceError(f"device: must be cpu or cuda, got {device!r}")
    config = load((configs_dir or default_configs_dir()) / CONFIG_FILES[device])
    upstream = dataclasses.replace(config.upstream, repo=str(Path(repo).resolve()))
    return dataclasses.replace(config, upstream=upstream)

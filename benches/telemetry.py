"""Clock, temperature and power of the trial's GPU, read with nvidia-smi / amd-smi.

None when the tool is absent or says nothing useful: telemetry never fails a trial. The runner
pins the device with CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, so the physical index is read
from there for the vendor tool (which ignores those variables). amd-smi numbers GPUs its own way,
which need not be HIP's order: it is given the PCI address (domain:bus:device.function) of the
HIP device the trial runs on, as torch reports it, and the index only when torch gives none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

_NV_FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "clocks_throttle_reasons.active")
_NV_KEYS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "throttle_reasons")


def physical_index(var: str) -> str:
    value = os.environ.get(var, "0").split(",")[0].strip()
    return value or "0"


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _number(text: str) -> Any:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return text


def nvidia() -> dict[str, Any] | None:
    """Newer drivers renamed the throttle field (clocks_event_reasons): retry without it."""
    if not shutil.which("nvidia-smi"):
        return None
    for n in (len(_NV_FIELDS), len(_NV_FIELDS) - 1):
        out = _run(["nvidia-smi", f"--query-gpu={','.join(_NV_FIELDS[:n])}", "--format=csv,noheader,nounits",
                    "-i", physical_index("CUDA_VISIBLE_DEVICES")])
        if out and out.strip():
            values = out.strip().splitlines()[0].split(",")
            return {"tool": "nvidia-smi", **{k: _number(v) for k, v in zip(_NV_KEYS, values)}}
    return None


def bdf(props: Any) -> str | None:
    """"0000:0c:00.0" from a device's properties (torch's pci_domain_id / pci_bus_id / pci_device_id),
    the form amd-smi's `-g` takes; None when they are missing."""
    try:
        domain, bus, device = (int(getattr(props, f"pci_{k}_id")) for k in ("domain", "bus", "device"))
    except (AttributeError, TypeError, ValueError):
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def hip_device_bdf() -> str | None:
    """The PCI address of the trial's current HIP device; None without a ROCm torch and a GPU."""
    torch = sys.modules.get("torch")  # the trial has imported it; telemetry never imports it itself
    try:
        if torch is None or torch.version.hip is None or not torch.cuda.is_available():
            return None
        return bdf(torch.cuda.get_device_properties(torch.cuda.current_device()))
    except Exception:  # noqa: BLE001 - telemetry never fails a trial
        return None


def amd() -> dict[str, Any] | None:
    """amd-smi's JSON differs between releases: keep it raw, and lift the common fields."""
    if not shutil.which("amd-smi"):
        return None
    address = hip_device_bdf()
    gpu = address or physical_index("HIP_VISIBLE_DEVICES")
    out = _run(["amd-smi", "metric", "-g", gpu, "-c", "-t", "-p", "--json"])
    if not out:
        return None
    try:
        raw = json.loads(out)
    except ValueError:
        return None
    item = raw[0] if isinstance(raw, list) and raw else raw
    found: dict[str, Any] = {"tool": "amd-smi", "gpu": gpu, "matched_by": "pci" if address else "index", "raw": item}
    _lift(item, found)
    return found


def _lift(node: Any, found: dict[str, Any], path: str = "") -> None:
    if isinstance(node, dict):
        if "value" in node and path:
            name = path.lower()
            key = ("sm_clock_mhz" if "gfx" in name and "clk" in name else
                   "temperature_c" if "hotspot" in name or "edge" in name else
                   "power_w" if "socket_power" in name else None)
            if key and key not in found:
                found[key] = _number(str(node["value"]))
        for k, v in node.items():
            _lift(v, found, f"{path}.{k}" if path else str(k))


def read(device: str) -> dict[str, Any] | None:
    if device == "cpu":
        return None
    return nvidia() or amd()

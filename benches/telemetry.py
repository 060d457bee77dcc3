"""Clock, temperature and power of the trial's GPU, read with NVML (else nvidia-smi) / amd-smi.

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


_NVML: dict[str, tuple[Any, Any]] = {}  # physical index -> (library, device handle), opened once a process
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 2, 0


def _nvml_handle() -> tuple[Any, Any] | None:
    """NVML (the library nvidia-smi reads) opened once for this process's physical GPU; None where
    it cannot be (no driver library, an index that is a UUID or MIG name). Why: nvidia-smi after the
    device section took 0.4-0.7 s a trial, and the bot lends the device on only when the trial's
    process has exited (bisector/runner/executor.py, TEARDOWN_GRACE_S): the device idled that long
    after every trial of a real range, more than its timed work."""
    index = physical_index("CUDA_VISIBLE_DEVICES")
    if index in _NVML:
        return _NVML[index]
    if not index.isdigit():
        return None
    try:
        import ctypes

        lib = ctypes.CDLL("libnvidia-ml.so.1")
        handle = ctypes.c_void_p()
        if lib.nvmlInit_v2() != 0 or lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(index)), ctypes.byref(handle)):
            return None
    except (OSError, AttributeError):
        return None
    _NVML[index] = (lib, handle)
    return lib, handle


def nvml() -> dict[str, Any] | None:
    """The same fields as `nvidia()`, from NVML in this process (a few ms, no subprocess)."""
    opened = _nvml_handle()
    if opened is None:
        return None
    import ctypes

    lib, handle = opened
    sm, mem, temp, power, reasons = (
        ctypes.c_uint(),
        ctypes.c_uint(),
        ctypes.c_uint(),
        ctypes.c_uint(),
        ctypes.c_ulonglong(),
    )
    if lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(sm)) or lib.nvmlDeviceGetClockInfo(
        handle, NVML_CLOCK_MEM, ctypes.byref(mem)
    ):
        return None
    out: dict[str, Any] = {"tool": "nvml", "sm_clock_mhz": float(sm.value), "mem_clock_mhz": float(mem.value)}
    if not lib.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU, ctypes.byref(temp)):
        out["temperature_c"] = float(temp.value)
    if not lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power)):
        out["power_w"] = power.value / 1000.0
    read = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or lib.nvmlDeviceGetCurrentClocksThrottleReasons
    if not read(handle, ctypes.byref(reasons)):
        out["throttle_reasons"] = f"0x{reasons.value:016x}"
    return out


def nvidia() -> dict[str, Any] | None:
    """Newer drivers renamed the throttle field (clocks_event_reasons): retry without it."""
    if not shutil.which("nvidia-smi"):
        return None
    for n in (len(_NV_FIELDS), len(_NV_FIELDS) - 1):
        out = _run(
            [
                "nvidia-smi",
                f"--query-gpu={','.join(_NV_FIELDS[:n])}",
                "--format=csv,noheader,nounits",
                "-i",
                physical_index("CUDA_VISIBLE_DEVICES"),
            ]
        )
        if out and out.strip():
            values = out.strip().splitlines()[0].split(",")
            return {"tool": "nvidia-smi", **{k: _number(v) for k, v in zip(_NV_KEYS, values)}}
    return None


def bdf(props: Any) -> str | None:
    """ "0000:0c:00.0" from a device's properties (torch's pci_domain_id / pci_bus_id / pci_device_id),
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
            key = (
                "sm_clock_mhz"
                if "gfx" in name and "clk" in name
                else "temperature_c"
                if "hotspot" in name or "edge" in name
                else "power_w"
                if "socket_power" in name
                else None
            )
            if key and key not in found:
                found[key] = _number(str(node["value"]))
        for k, v in node.items():
            _lift(v, found, f"{path}.{k}" if path else str(k))


def read(device: str) -> dict[str, Any] | None:
    if device == "cpu":
        return None
    return nvml() or nvidia() or amd()

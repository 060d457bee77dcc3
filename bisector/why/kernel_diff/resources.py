"""Registers, spills, stack and shared memory of a compiled kernel, from the tools that know them.

Triton's `.json` metadata has the launch shape (warps, stages, CTAs) and the dynamic shared memory,
not the registers: the driver reports those when the kernel is loaded, which a report made later
cannot ask. On NVIDIA they come from the cubin through `cuobjdump --dump-resource-usage` and from
`ptxas -v` on the PTX (spill stores and loads); both are run once, when the artifacts are kept next
to the report, and their output is kept as text, so an offline re-make reads the same numbers
without the tools. On AMD the `.amdgcn` text carries them (VGPR, AGPR, SGPR, scratch, LDS).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["find_tool", "run_cuobjdump", "run_ptxas", "parse_cuobjdump", "parse_ptxas", "parse_amdgcn"]

TOOL_TIMEOUT_S = 120.0


def _triton_bin() -> Path | None:
    """The NVIDIA tools Triton's wheel bundles, found without importing Triton."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "backends" / "nvidia" / "bin"
        if path.is_dir():
            return path
    return None


def find_tool(name: str) -> Path | None:
    """`name` from $TRITON_<NAME>_PATH, Triton's wheel, then $PATH (None: not at hand)."""
    env = os.environ.get(f"TRITON_{name.upper().replace('-', '_')}_PATH")
    if env and Path(env).is_file():
        return Path(env)
    bundled = _triton_bin()
    if bundled and (bundled / name).is_file():
        return bundled / name
    found = shutil.which(name)
    return Path(found) if found else None


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout + proc.stderr if proc.returncode == 0 else None


def run_cuobjdump(cubin: Path) -> str | None:
    """`cuobjdump --dump-resource-usage` of a cubin, or None without the tool."""
    tool = find_tool("cuobjdump")
    return _run([str(tool), "--dump-resource-usage", str(cubin)]) if tool else None


def run_ptxas(ptx: Path, arch: str) -> str | None:
    """`ptxas -v` of a PTX file for `arch` (e.g. "sm_90a"), or None. The newest ptxas at hand is
    tried first: a PTX ISA version newer than a ptxas's is refused by it."""
    for name in ("ptxas-blackwell", "ptxas"):
        tool = find_tool(name)
        if tool is None:
            continue
        out = _run([str(tool), "-v", f"--gpu-name={arch}", str(ptx), "-o", os.devnull])
        if out is not None:
            return out
    return None


def parse_cuobjdump(text: str, name: str) -> dict[str, int]:
    """REG, STACK, SHARED, LOCAL of function `name` in `cuobjdump --dump-resource-usage` output."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == f"Function {name}:" and i + 1 < len(lines):
            fields = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", lines[i + 1]))
            out = {
                "registers": fields.get("REG"),
                "stack bytes": fields.get("STACK"),
                "static shared bytes": fields.get("SHARED"),
                "local bytes": fields.get("LOCAL"),
            }
            return {k: int(v) for k, v in out.items() if v is not None}
    return {}


def parse_ptxas(text: str) -> dict[str, int]:
    """Registers, barriers, stack frame and spill bytes from `ptxas -v` output (one entry function)."""
    out: dict[str, int] = {}
    patterns = {
        "registers": r"Used (\d+) registers",
        "barriers": r"used (\d+) barriers",
        "stack frame bytes": r"(\d+) bytes stack frame",
        "spill store bytes": r"(\d+) bytes spill stores",
        "spill load bytes": r"(\d+) bytes spill loads",
    }
    for key, pattern in patterns.items():
        m = re.search(pattern, text)
        if m:
            out[key] = int(m.group(1))
    return out


_AMD_FIELDS = {
    "vgprs": (r"\.vgpr_count:\s+(\d+)", r";\s*NumVgprs:\s+(\d+)"),
    "agprs": (r"\.agpr_count:\s+(\d+)", r";\s*NumAgprs:\s+(\d+)"),
    "sgprs": (r"\.sgpr_count:\s+(\d+)", r";\s*NumSgprs:\s+(\d+)"),
    "vgpr spills": (r"\.vgpr_spill_count:\s+(\d+)",),
    "sgpr spills": (r"\.sgpr_spill_count:\s+(\d+)",),
    "scratch bytes": (r"\.private_segment_fixed_size:\s+(\d+)", r";\s*ScratchSize:\s+(\d+)"),
    "LDS bytes": (r"\.group_segment_fixed_size:\s+(\d+)", r";\s*LDSByteSize:\s+(\d+)"),
    "occupancy": (r";\s*Occupancy:\s+(\d+)",),
}


def parse_amdgcn(text: str) -> dict[str, int]:
    """VGPR, AGPR, SGPR counts, spills, scratch and LDS bytes from an `.amdgcn` file's metadata
    (the `amdhsa` YAML block, else the assembler's `; NumVgprs:` comments)."""
    out: dict[str, int] = {}
    for key, patterns in _AMD_FIELDS.items():
        for pattern in patterns:
            m = re.search(pattern, text)
            if m:
                out[key] = int(m.group(1))
                break
    return out

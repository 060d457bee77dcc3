"""Instruction histograms by class, from a kernel's PTX (NVIDIA) or AMDGCN assembly (AMD). Pure.

What a kernel engineer reads first when a step is in the compiled code: how wide the global loads
are, whether the copies became asynchronous (cp.async, TMA), which matrix instructions remain,
whether a softmax's exp went from `ex2.approx` to a precise (double-precision) evaluation, how many
barriers, `s_setprio` and AGPR moves there are. Counts are static (instructions in the text, not
executed ones): a loop body counts once, so a changed count means a changed program.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["histogram", "ptx_class", "amdgcn_class"]

_BITS = {
    "b8": 8,
    "u8": 8,
    "s8": 8,
    "b16": 16,
    "u16": 16,
    "s16": 16,
    "f16": 16,
    "bf16": 16,
    "b32": 32,
    "u32": 32,
    "s32": 32,
    "f32": 32,
    "b64": 64,
    "u64": 64,
    "s64": 64,
    "f64": 64,
    "b128": 128,
}
_APPROX = ("ex2", "lg2", "rcp", "sqrt", "rsqrt", "sin", "cos", "tanh", "div")
_F64_MATH = ("add", "sub", "mul", "fma", "div", "rcp", "sqrt", "max", "min", "neg", "abs", "mad", "setp", "selp")


def _width(parts: list[str]) -> int | None:
    """Bits moved by one ld/st: vector count times element bits (ld.global.v4.b32: 128)."""
    vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
    bits = next((_BITS[p] for p in reversed(parts) if p in _BITS), None)
    return vec * bits if bits else None


def ptx_class(op: str) -> str | None:
    """The histogram row of one PTX opcode (e.g. "ld.global.v4.b32"), or None for rows not kept
    (integer arithmetic, moves, branches: they shift with every change and say little)."""
    parts = op.split(".")
    head = parts[0]
    if head in ("ld", "st") and len(parts) > 1 and parts[1] in ("global", "shared"):
        kind = "load" if head == "ld" else "store"
        width = _width(parts)
        return f"{parts[1]} {kind} {width}-bit" if width else f"{parts[1]} {kind}"
    if head in ("ldmatrix", "stmatrix"):
        return head
    if op.startswith("cp.async.bulk.tensor"):
        return "TMA copy (cp.async.bulk.tensor)"
    if op.startswith("cp.async.bulk"):
        return "bulk async copy (cp.async.bulk)"
    if op.startswith("cp.async.wait") or op.startswith("cp.async.commit"):
        return "cp.async commit/wait"
    if op.startswith("cp.async"):
        return "cp.async copy"
    if op.startswith("wgmma.mma_async"):
        shape = next((p for p in parts if re.fullmatch(r"m\d+n\d+k\d+", p)), "")
        return f"wgmma {shape}".strip()
    if op.startswith("wgmma."):
        return "wgmma fence/commit/wait"
    if head == "mma":
        shape = next((p for p in parts if re.fullmatch(r"m\d+n\d+k\d+", p)), "")
        return f"mma {shape}".strip()
    if head in _APPROX and ("approx" in parts or "full" in parts):
        return f"{head}.approx (approximate)"
    if head in ("div", "sqrt", "rcp") and any(p.startswith("rn") for p in parts[1:2]) and "f32" in parts:
        return f"{head}.rn.f32 (precise)"
    if head in ("fma", "mad") and "f32" in parts:
        return "fma f32"
    if head == "fma" and ("f16x2" in parts or "bf16x2" in parts):
        return "fma f16x2/bf16x2"
    if "f64" in parts and head in _F64_MATH:
        return "f64 arithmetic (precise)" if head != "fma" else "fma f64 (precise)"
    if head in ("div", "rem") and any(p in ("s32", "u32", "s64", "u64") for p in parts):
        return "integer div/rem"
    if head == "cvt" and "f64" in parts:
        return "f64 conversion"
    if head in ("bar", "barrier"):
        return "barrier (bar.sync)"
    if head == "mbarrier":
        return "mbarrier"
    if head == "fence":
        return "fence"
    if head == "shfl":
        return "warp shuffle"
    return None


def amdgcn_class(op: str) -> str | None:
    """The histogram row of one AMDGCN opcode (e.g. "global_load_dwordx4"), or None."""
    m = re.fullmatch(r"(global|buffer|flat)_(load|store)_(dword|short|ubyte|byte|b)(x?\d*)(.*)", op)
    if m:
        space, kind, unit, count, _ = m.groups()
        if unit == "b":
            bits = int(count) if count.isdigit() else 32
        else:
            bits = {"dword": 32, "short": 16, "ubyte": 8, "byte": 8}[unit] * (
                int(count[1:]) if count.startswith("x") else 1
            )
        return f"{space} {kind} {bits}-bit"
    m = re.fullmatch(r"ds_(read|write|load|store)_?(b|u|i)?(\d+)?.*", op)
    if m:
        kind = "load" if m.group(1) in ("read", "load") else "store"
        return f"LDS {kind} {m.group(3)}-bit" if m.group(3) else f"LDS {kind}"
    if op.startswith("v_mfma") or op.startswith("v_smfmac"):
        return f"mfma {op.removeprefix('v_')}"
    if op.startswith("v_accvgpr"):
        return "AGPR moves (v_accvgpr_*)"
    if op in ("v_exp_f32", "v_exp_f16", "v_log_f32", "v_rcp_f32", "v_rsq_f32", "v_sqrt_f32", "v_sin_f32", "v_cos_f32"):
        return f"{op} (approximate)"
    if op.endswith("_f64") and op.startswith("v_"):
        return "fma f64 (precise)" if "fma" in op else "f64 arithmetic (precise)"
    if (
        op in ("v_fma_f32", "v_fmac_f32", "v_fmac_f32_e32", "v_fma_mix_f32", "v_mad_f32", "v_mac_f32")
        or op.startswith("v_pk_fma_f32")
        or op.startswith("v_fmac_f32")
    ):
        return "fma f32"
    if op.startswith("s_barrier"):
        return "barrier (s_barrier)"
    if op.startswith("s_setprio"):
        return "s_setprio"
    if op.startswith("s_waitcnt"):
        return "s_waitcnt"
    return None


def _ptx_ops(text: str) -> list[str]:
    ops = []
    for raw in text.splitlines():
        line = raw.split("//", 1)[0]
        for stmt in line.split(";"):
            stmt = stmt.strip().lstrip("{}").strip()
            if not stmt or stmt.startswith(".") or stmt.endswith(":") or stmt in ("{", "}"):
                continue
            if stmt.startswith("@"):
                stmt = stmt.split(None, 1)[1] if " " in stmt or "\t" in stmt else ""
            op = stmt.split(None, 1)[0] if stmt else ""
            if op and re.fullmatch(r"[a-z][A-Za-z0-9_.:]*", op):
                ops.append(op)
    return ops


def _amdgcn_ops(text: str) -> list[str]:
    ops = []
    in_code = True
    for raw in text.splitlines():
        line = raw.split(";", 1)[0].split("//", 1)[0].strip()
        if line.startswith(".amdgpu_metadata") or line.startswith(".end_amdgpu_metadata"):
            in_code = line.startswith(".end")
            continue
        if not in_code or not line or line.startswith(".") or line.endswith(":"):
            continue
        op = line.split(None, 1)[0]
        if re.fullmatch(r"[sv]_[a-z0-9_]+|(global|buffer|flat|ds|scratch)_[a-z0-9_]+", op):
            ops.append(op)
    return ops


def histogram(text: str, kind: str) -> dict[str, int]:
    """Rows -> static counts for `kind` "ptx" or "amdgcn"; "instructions" counts every one."""
    ops = _ptx_ops(text) if kind == "ptx" else _amdgcn_ops(text)
    classify = ptx_class if kind == "ptx" else amdgcn_class
    counts: Counter[str] = Counter()
    for op in ops:
        row = classify(op)
        if row:
            counts[row] += 1
    counts["instructions"] = len(ops)
    return dict(counts)

"""The facts of a compiled kernel that explain its speed, as they moved across a step. Pure.

What a kernel engineer looks for first: spills and stack (local memory traffic), registers and
shared memory and the occupancy they allow, the launch shape, the width and number of global and
shared loads and stores, asynchronous copies (cp.async, TMA), the matrix instructions and their
shapes, approximate against exact math, and the instruction count. Everything else in Triton's
metadata (debug, arch, target, versions, supported dtypes...) is the same build to build or says
nothing about speed: it is folded away (`FOLDED`), and shown only where it differs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from bisector.why.kernel_diff.diff import KernelSide

__all__ = ["moved", "headline", "occupancy", "FOLDED", "RESOURCES"]

# resources in the order they explain speed, with their unit
RESOURCES = (
    ("spill store bytes", "B"),
    ("spill load bytes", "B"),
    ("stack frame bytes", "B"),
    ("stack bytes", "B"),
    ("local bytes", "B"),
    ("registers", ""),
    ("vgpr spills", ""),
    ("sgpr spills", ""),
    ("scratch bytes", "B"),
    ("vgprs", ""),
    ("agprs", ""),
    ("sgprs", ""),
    ("shared memory bytes", "B"),
    ("static shared bytes", "B"),
    ("LDS bytes", "B"),
    ("tensor memory bytes", "B"),
    ("occupancy (CTAs/SM, est.)", ""),
    ("occupancy", ""),
    ("num_warps", ""),
    ("num_stages", ""),
    ("num_ctas", ""),
    ("maxnreg", ""),
)
# instruction classes (bisector/why/kernel_diff/isa.py rows) that explain speed, by prefix
_SPEED_ROWS = (
    "global load",
    "global store",
    "shared load",
    "shared store",
    "buffer load",
    "buffer store",
    "LDS load",
    "LDS store",
    "ldmatrix",
    "stmatrix",
    "cp.async copy",
    "TMA copy",
    "bulk async copy",
    "wgmma m",
    "mma m",
    "mfma",
    "ex2.approx",
    "lg2.approx",
    "rcp.approx",
    "sqrt.approx",
    "rsqrt.approx",
    "div.approx",
    "tanh.approx",
    "sin.approx",
    "cos.approx",
    "v_exp",
    "v_log",
    "v_rcp",
    "v_rsq",
    "v_sqrt",
    "f64 arithmetic",
    "fma f64",
    "f64 conversion",
    "div.rn.f32",
    "sqrt.rn.f32",
    "rcp.rn.f32",
    "instructions",
)
# Triton metadata that never explains a speed change: folded into one line when it differs at all
FOLDED = frozenset(
    {
        "debug",
        "arch",
        "target",
        "backend_name",
        "triton_version",
        "supported_fp8_dtypes",
        "deprecated_fp8_dot_operand_dtypes",
        "default_dot_input_precision",
        "allowed_dot_input_precisions",
        "max_num_imprecise_acc_default",
        "ptx_version",
        "ptx_options",
        "ir_override",
        "warp_size",
        "sanitize_overflow",
        "instrumentation_mode",
        "fpsan_homomorphic_casts",
        "launch_cooperative_grid",
        "global_scratch_align",
        "profile_scratch_size",
        "profile_scratch_align",
        "tensordesc_meta",
        "enable_reflect_ftz",
        "sched4reg",
        "clc",
        "min_shared_mem",
        "launch_pdl",
        "cluster_dims",
    }
)

# per-SM limits by compute capability: registers, shared memory bytes, warps, CTAs (CUDA's tables)
_SM_LIMITS = {
    80: (65536, 167936, 64, 32),
    86: (65536, 102400, 48, 16),
    87: (65536, 167936, 48, 16),
    89: (65536, 102400, 48, 24),
    90: (65536, 233472, 64, 32),
    100: (65536, 233472, 64, 32),
    120: (65536, 102400, 48, 32),
}
_RESERVED_SMEM = 1024  # shared memory the driver reserves per CTA (sm_80 on)


def _arch(meta: Mapping[str, object]) -> int | None:
    target = meta.get("target")
    if isinstance(target, Mapping) and target.get("backend") == "cuda" and isinstance(target.get("arch"), int):
        return int(target["arch"])
    m = re.fullmatch(r"sm_?(\d+)a?", str(meta.get("arch", "")))
    return int(m.group(1)) if m else None


def _count(value: object) -> int:
    """A figure of the compiler's metadata: a number, or its text; absent (None, 0, "") as 0."""
    return int(value) if isinstance(value, int | float | str) and value else 0


def occupancy(meta: Mapping[str, object]) -> int | None:
    """CTAs per SM that the registers, shared memory and warps allow (NVIDIA; None where a figure
    is missing): registers are allocated per warp in units of 256, shared memory per CTA with the
    driver's 1 KiB. An estimate: it knows nothing of the grid or of a carveout set at launch."""
    arch, regs, warps = _arch(meta), meta.get("registers"), meta.get("num_warps")
    if arch is None or not isinstance(regs, int) or not isinstance(warps, int) or warps <= 0:
        return None
    limits = _SM_LIMITS.get(arch)
    if limits is None:
        return None
    sm_regs, sm_smem, sm_warps, sm_ctas = limits
    per_warp = math.ceil(max(regs, 1) * 32 / 256) * 256
    by_regs = (sm_regs // per_warp) // warps
    smem = _count(meta.get("shared memory bytes")) + _count(meta.get("static shared bytes"))
    by_smem = sm_smem // (smem + _RESERVED_SMEM)
    return max(0, min(by_regs, by_smem, sm_warps // warps, sm_ctas))


def _with_occupancy(side: KernelSide | None) -> dict[str, object]:
    meta = dict(side.metadata) if side else {}
    occ = occupancy(meta)
    if occ is not None:
        meta["occupancy (CTAs/SM, est.)"] = occ
    return meta


def _is_speed_row(row: str) -> bool:
    return row.startswith(_SPEED_ROWS)


def moved(before: KernelSide | None, after: KernelSide | None) -> list[tuple[str, object, object, str]]:
    """(fact, parent, culprit, unit) for every speed fact that differs, in the order they explain
    speed: resources first, then the instruction classes, the instruction count last."""
    b, a = _with_occupancy(before), _with_occupancy(after)
    out = [
        (key, b.get(key), a.get(key), unit)
        for key, unit in RESOURCES
        if (key in b or key in a) and b.get(key) != a.get(key)
    ]
    hb = dict(before.histogram) if before else {}
    ha = dict(after.histogram) if after else {}
    rows = [r for r in sorted(set(hb) | set(ha)) if _is_speed_row(r) and r != "instructions"]
    rows.sort(key=lambda r: -abs(math.log((ha.get(r, 0) + 1) / (hb.get(r, 0) + 1))))
    out += [(r, hb.get(r, 0), ha.get(r, 0), "") for r in rows if hb.get(r, 0) != ha.get(r, 0)]
    if hb.get("instructions", 0) != ha.get("instructions", 0):
        out.append(("instructions", hb.get("instructions", 0), ha.get("instructions", 0), ""))
    return out


def _value(v: object, unit: str) -> str:
    return "—" if v is None else f"{v}{' ' + unit if unit else ''}"


def headline(before: KernelSide | None, after: KernelSide | None, limit: int = 10) -> str:
    """The facts that moved, in one line: "spill store bytes 0 → 172 B, registers 246 → 255, ..."."""
    facts = moved(before, after)
    text = ", ".join(f"{k} {_value(b, '')} → {_value(a, u)}" for k, b, a, u in facts[:limit])
    return text + (f", and {len(facts) - limit} more" if len(facts) > limit else "")

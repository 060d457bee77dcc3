"""The cause line from stored kernel artifacts of real commits: flash-attention's Triton rotary
kernel across d836a6bf ("Tune rotary kernel to use 2 warps if rotary_dim <= 64", +12.6% on a
rotary_dim=64 shape) and dc8fd708 ("[Rotary] Block over seqlen and nheads dimension", +68.9% on the
interleaved shape), as the lent H100 compiled them (Triton 3.6, sm_90) for three shapes: three
variants of one kernel per commit.

The fixture is a description of those artifacts, not a copy: per variant the `.json` fields the
kernel diff reads, the registers ptxas reported, the TTIR entry's arguments and the block shape of
each load and store, and the PTX's global and shared load/store counts by width. The diff lines are
the few parameter lines of the culprits' hunks that the cause reads."""

from __future__ import annotations

import json
from pathlib import Path

from bisector.why.cause import cause_of
from bisector.why.kernel_diff.collect import KERNELS_DIR, compare_dirs

ARGS = (
    "OUT",
    "X",
    "COS",
    "SIN",
    "SEQLEN_OFFSETS",
    "seqlen",
    "{dim}",
    "seqlen_ro",
    "stride_out_batch",
    "stride_out_seqlen",
    "stride_out_nheads",
    "stride_x_batch",
    "stride_x_seqlen",
    "stride_x_nheads",
)
LD, ST = "ld.global", "st.global"


def variant(
    warps: int,
    shared: int,
    registers: int,
    tiles: str,
    ptx: dict[str, int],
    *,
    dim: str = "rotary_dim",
    axes: str = "yz",
) -> dict:
    return {
        "warps": warps,
        "shared": shared,
        "registers": registers,
        "tiles": tiles.split(),
        "ptx": ptx,
        "dim": dim,
        "axes": axes,
    }


# tiles: "l:" load, "s:" store, each `tensor<...x!tt.ptr<bf16>>`'s block shape, in program order
PARENT_OF_D836 = {  # 9f2d2ae3b843: 4 warps everywhere, grid (seqlen, batch, heads)
    "interleaved": variant(
        4,
        1024,
        32,
        "l:4x128 l:4x128 l:4x128 l:4x128 s:4x128",
        {f"{LD}.b16": 12, f"{LD}.v2.b32": 1, "ld.shared.b16": 8, f"{ST}.v2.b32": 1, "st.shared.b16": 8},
    ),
    "rotary64": variant(4, 0, 18, "l:8x32 l:8x32 l:8x32 l:8x32 s:8x32 s:8x32", {f"{LD}.b32": 4, f"{ST}.b32": 2}),
    "rotary128": variant(4, 0, 27, "l:8x64 l:8x64 l:8x64 l:8x64 s:8x64 s:8x64", {f"{LD}.v2.b32": 4, f"{ST}.v2.b32": 2}),
}
D836 = {  # d836a6bf09bf (and its descendant 9b5ae42f899c, dc8fd708's parent: the same artifacts)
    **{k: {**v, "axes": "zy"} for k, v in PARENT_OF_D836.items()},
    "rotary64": variant(
        2, 0, 27, "l:8x32 l:8x32 l:8x32 l:8x32 s:8x32 s:8x32", {f"{LD}.v2.b32": 4, f"{ST}.v2.b32": 2}, axes="zy"
    ),
}
DC8F = {  # dc8fd708575a: `rotary_dim` gone from the arguments, `nheads` in its place, (heads, seqlen) blocks
    "interleaved": variant(
        4,
        1024,
        30,
        "l:8x64 l:8x64 l:2x8x128 s:2x8x128",
        {
            f"{LD}.v2.b32": 2,
            f"{LD}.v4.b32": 2,
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16": 2,
            f"{ST}.v4.b32": 2,
            "stmatrix.sync.aligned.m8n8.x2.shared.b16": 2,
        },
        dim="nheads",
    ),
    "rotary64": variant(
        4,
        0,
        23,
        "l:8x32 l:8x32 l:2x8x32 l:2x8x32 s:2x8x32 s:2x8x32",
        {f"{LD}.b32": 2, f"{LD}.v2.b32": 2, f"{ST}.v2.b32": 2},
        dim="nheads",
    ),
    "rotary128": variant(
        4,
        0,
        32,
        "l:8x64 l:8x64 l:2x8x64 l:2x8x64 s:2x8x64 s:2x8x64",
        {f"{LD}.v2.b32": 2, f"{LD}.v4.b32": 2, f"{ST}.v4.b32": 2},
        dim="nheads",
    ),
}
D836_DIFF = """-    pid_batch = tl.program_id(axis=1)
-    pid_head = tl.program_id(axis=2)
+    pid_head = tl.program_id(axis=1)
+    pid_batch = tl.program_id(axis=2)
"""
DC8F_DIFF = """-    rotary_dim,
+    nheads,
-    BLOCK_K: tl.constexpr,
+    ROTARY_DIM: tl.constexpr,
-    BLOCK_M = 4 if interleaved else (8 if rotary_dim <= 128 else 4)
+    BLOCK_M = 8 if rotary_dim <= 128 else 4
"""


def _ttir(v: dict) -> str:
    args = ", ".join(
        f"%{a.format(dim=v['dim'])}: {'!tt.ptr<bf16>' if a.isupper() and a != 'SEQLEN_OFFSETS' else 'i32'}"
        " {tt.divisibility = 16 : i32}"
        for a in ARGS
    )
    batch, head = v["axes"]
    body = [
        "    %pid_m = tt.get_program_id x : i32",
        f"    %pid_batch = tt.get_program_id {batch} : i32",
        f"    %pid_head = tt.get_program_id {head} : i32",
    ]
    for i, t in enumerate(v["tiles"]):
        kind, shape = t.split(":")
        body.append(
            f"    %v{i} = tt.load %p{i} : tensor<{shape}x!tt.ptr<bf16>>"
            if kind == "l"
            else f"    tt.store %p{i}, %v{i} : tensor<{shape}x!tt.ptr<bf16>>"
        )
    return "\n".join(
        [
            "module {",
            f"  tt.func public @rotary_kernel({args}) attributes {{noinline = false}} {{",
            *body,
            "    tt.return",
            "  }",
            "}",
            "",
        ]
    )


def _ptx(v: dict) -> str:
    lines = [".version 8.7", ".target sm_90a", ".visible .entry rotary_kernel()", "{"]
    for op, n in v["ptx"].items():
        lines += [f"\t{op} \t{{ %r{i} }}, [ %rd{i} + 0 ];" for i in range(n)]
    return "\n".join([*lines, "\tret;", "}", ""])


def write(out: Path, sha: str, variants: dict[str, dict]) -> None:
    for name, v in variants.items():
        d = out / KERNELS_DIR / sha / "triton_cache_dir" / name.upper()
        d.mkdir(parents=True)
        (d / "rotary_kernel.json").write_text(
            json.dumps(
                {
                    "name": "rotary_kernel",
                    "num_warps": v["warps"],
                    "num_stages": 3,
                    "num_ctas": 1,
                    "shared": v["shared"],
                }
            )
        )
        (d / "rotary_kernel.ttir").write_text(_ttir(v))
        (d / "rotary_kernel.ptx").write_text(_ptx(v))
        (d / "rotary_kernel.ptxas.txt").write_text(
            "ptxas info    : Compiling entry function 'rotary_kernel' for 'sm_90a'\n"
            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
            f"ptxas info    : Used {v['registers']} registers\n"
        )


def test_a_runtime_argument_made_constexpr_widens_the_interleaved_variants_loads(tmp_path: Path) -> None:
    write(tmp_path, "9b5ae42f899c", D836)
    write(tmp_path, "dc8fd708575a", DC8F)
    step = compare_dirs(tmp_path, "9b5ae42f899c", "dc8fd708575a")
    assert sorted(d.tile for d in step.kernels) == ["4x128 -> 2x8x128", "8x32 -> 2x8x32", "8x64 -> 2x8x64"]
    c = cause_of(step, DC8F_DIFF)
    assert c.kind == "specialization" and c.kernel == "rotary_kernel"
    # the interleaved variant leads: its 16-bit loads are gone (upstream's comment on the commit: "otherwise
    # the compiler doesn't know that the mask is constant every 8 elements, and it will generate LDG.16")
    assert c.sentence == (
        "`ROTARY_DIM` became a constexpr (was runtime `rotary_dim`), so its global loads widened: "
        "16-bit global loads 12 -> 0, 128-bit global loads 0 -> 2, 128-bit global stores 0 -> 2, "
        "16-bit shared loads 8 -> 0 (`rotary_kernel`, 4x128 -> 2x8x128 tiles); "
        "8x64 -> 2x8x64 tiles: 128-bit global loads 0 -> 2, 128-bit global stores 0 -> 2, 64-bit global stores 2 -> 0; "
        # the commit also dropped the 2-warp launch option for rotary_dim <= 64
        "8x32 -> 2x8x32 tiles: num_warps 2 -> 4: 32-bit global loads 0 -> 2, 64-bit global loads 4 -> 2, "
        "registers 27 -> 23."
    )
    assert "BLOCK_M" not in c.sentence  # a conditional's first branch is not the constant's value


def test_a_launch_option_on_one_variant_and_the_others_said_as_unmoved(tmp_path: Path) -> None:
    write(tmp_path, "9f2d2ae3b843", PARENT_OF_D836)
    write(tmp_path, "d836a6bf09bf", D836)
    c = cause_of(compare_dirs(tmp_path, "9f2d2ae3b843", "d836a6bf09bf"), D836_DIFF)
    assert c.kind == "launch"
    assert c.sentence == (
        "num_warps 4 -> 2: 32-bit global loads 4 -> 0, 64-bit global loads 0 -> 4, 32-bit global stores 2 -> 0, "
        "64-bit global stores 0 -> 2 (`rotary_kernel`, 8x32 tiles); 2 other variants (4x128, 8x64 tiles): "
        "nothing that explains speed moved."
    )

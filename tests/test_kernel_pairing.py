"""Kernels paired across signature changes and re-specializations, only what moved shown, and the
kernels of a resumed run compiled again. Built from the real sm_90 fixtures (tests/fixtures/kernels/),
copied and edited the way such changes edit Triton's artifacts: an argument added to the TTIR entry,
a divisibility hint gone, other launch options in the `.json` metadata."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

from bisector.report.kernel_section import kernel_lines, section
from bisector.why.kernel_diff import artifacts, speed
from bisector.why.kernel_diff.collect import KERNELS_DIR, step_kernels
from bisector.why.kernel_diff.diff import diff_kernels, readable
from tests.test_kernels import FIXTURES, INDEX, _data, _jit_from_fixture, fixture_step

GEMM = INDEX["145"]


def _variant(src: Path, dest: Path, *, add_arg: bool = False, drop_div: str = "", meta: dict | None = None) -> Path:
    """A copy of one kernel's kept directory, edited: an i32 argument `page_stride` added after the
    last one, the divisibility hint of argument `drop_div` removed, `.json` keys replaced."""
    shutil.copytree(src, dest)
    for level in ("ttir", "ttgir"):
        path = next(dest.glob(f"*.{level}.gz"))
        text = gzip.decompress(path.read_bytes()).decode()
        if add_arg:
            text = text.replace(
                '%stride_cm: i32 {tt.divisibility = 16 : i32} loc("stride_cm"(#loc))',
                '%stride_cm: i32 {tt.divisibility = 16 : i32} loc("stride_cm"(#loc)), '
                '%page_stride: i32 loc("page_stride"(#loc))',
                1,
            )
            assert "%page_stride" in text
        if drop_div:
            text = text.replace(f"%{drop_div}: i32 {{tt.divisibility = 16 : i32}}", f"%{drop_div}: i32", 1)
        path.write_bytes(gzip.compress(text.encode()))
    if meta:
        path = next(dest.glob("*.json.gz"))
        data = json.loads(gzip.decompress(path.read_bytes()))
        path.write_bytes(gzip.compress(json.dumps({**data, **meta}).encode()))
    return dest


def _gemm_dir(sha: str) -> Path:
    return next(k.directory for k in artifacts.find_kernels(FIXTURES / sha[:12]) if k.name == "_matmul_kernel")


def test_an_added_argument_pairs_the_kernel_and_says_so(tmp_path: Path) -> None:
    _variant(_gemm_dir(GEMM["parent"]), tmp_path / "a" / "H1")
    _variant(_gemm_dir(GEMM["culprit"]), tmp_path / "b" / "H2", add_arg=True)
    (d,) = diff_kernels(artifacts.find_kernels(tmp_path / "a"), artifacts.find_kernels(tmp_path / "b"))
    assert d.name == "_matmul_kernel" and d.status == "signature changed"
    assert d.arg_changes == ("added `page_stride: i32`",)
    assert d.signature.endswith("i32, i32 -> *bf16, *bf16, *bf16, i32, i32, i32, i32, i32, i32, i32")
    text = "\n".join(kernel_lines(d))
    assert "signature changed: added `page_stride: i32`" in text and "added**" not in text and "removed" not in text
    assert text.startswith("- `_matmul_kernel`: registers 220 → 208, shared memory bytes 147456 → 98304 B")


def test_variants_are_paired_by_their_specialization_and_the_closest_one_is_chosen(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    # the parent compiled two variants: 8 warps with K divisible by 16, 4 warps and 2 stages with K not
    _variant(_gemm_dir(GEMM["parent"]), before / "A8")
    _variant(_gemm_dir(GEMM["parent"]), before / "B4", drop_div="K", meta={"num_warps": 4, "num_stages": 2})
    # the culprit adds an argument to both, in the other directory order, and K is divisible again in the 4-warp one
    _variant(_gemm_dir(GEMM["culprit"]), after / "A4", add_arg=True, meta={"num_warps": 4, "num_stages": 2})
    _variant(_gemm_dir(GEMM["culprit"]), after / "B8", add_arg=True)
    diffs = diff_kernels(artifacts.find_kernels(before), artifacts.find_kernels(after))
    assert len(diffs) == 2 and {d.status for d in diffs} == {"signature changed"}
    warps = {(d.before.metadata["num_warps"], d.after.metadata["num_warps"]): d for d in diffs}
    assert set(warps) == {(8, 8), (4, 4)}
    assert warps[(8, 8)].respecialized == ()
    assert warps[(4, 4)].respecialized == ("`K`: not specialized -> divisible by 16",)
    assert all(d.variants == 2 and d.arg_changes == ("added `page_stride: i32`",) for d in diffs)
    # the culprit compiles only the 4-warp, 2-stage variant (K divisible): the closest is the parent's
    # 4-warp one (one key differs), not the 8-warp one (two keys); the other is a variant no longer compiled
    shutil.rmtree(after / "B8")
    diffs = diff_kernels(artifacts.find_kernels(before), artifacts.find_kernels(after))
    by = {d.status: d for d in diffs}
    assert set(by) == {"signature changed", "variant removed"}
    assert by["signature changed"].before.metadata["num_warps"] == 4
    assert by["variant removed"].before.metadata["num_warps"] == 8


def test_no_row_whose_parent_and_culprit_are_equal(tmp_path: Path) -> None:
    """Every step of the fixtures: each table row differs, no build metadata that never explains
    speed is a row, and the first line of each kernel carries the facts that moved."""
    for pr in INDEX:
        shutil.rmtree(tmp_path / KERNELS_DIR, ignore_errors=True)
        shutil.copytree(FIXTURES, tmp_path / KERNELS_DIR)
        step = fixture_step(pr)
        (sk,) = step_kernels(tmp_path / "work", tmp_path, [step], ["TRITON_CACHE_DIR"])
        md = "\n".join(section(_data(sk, [step])))
        rows = [ln for ln in md.splitlines() if ln.startswith("  | ") and not ln.startswith("  |---")]
        body = [r.split("|")[1:-1] for r in rows if "parent | culprit" not in r]
        # a kernel whose every moved fact fits its first line has no table (the line carries them)
        assert body or all("→" in ln for ln in md.splitlines() if ln.startswith("- `")), pr
        for cells in body:
            assert cells[1].strip() != cells[2].strip(), (pr, cells)
            assert cells[0].strip() not in speed.FOLDED, (pr, cells)
        assert "triton_version" not in md and "supported_fp8_dtypes" not in md and "**" not in md.split("###")[1]
        heads = [ln for ln in md.splitlines() if ln.startswith("- `")]
        assert heads and all("→" in h for h in heads), heads


def test_occupancy_is_estimated_where_the_resources_are_known() -> None:
    meta = {
        "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
        "num_warps": 4,
        "registers": 128,
        "shared memory bytes": 49152,
    }
    # registers: 128 x 32 = 4096 per warp, 16 warps per SM, 4 CTAs; shared memory: 228 KiB / 49 KiB: 4 CTAs
    assert speed.occupancy(meta) == 4
    assert speed.occupancy({**meta, "registers": 255, "shared memory bytes": 0}) == 2  # 8192 per warp: 8 warps
    assert speed.occupancy({**meta, "shared memory bytes": 147456}) == 1
    assert speed.occupancy({"num_warps": 4, "registers": 128}) is None  # no arch, no estimate


def test_ir_diffs_leave_ssa_numbering_out() -> None:
    a = "%0 = arith.addi %arg3, %c8_i32_1 : i32\n%x_12 = arith.muli %0, %0 : i32"
    b = "%7 = arith.addi %arg4, %c8_i32 : i32\n%x_3 = arith.muli %7, %7 : i32"
    assert readable(a, "ttgir") == readable(b, "ttgir") and "%c8_i32" in readable(a, "ttgir")
    assert readable("add.s32 %r12, %r7, %r9;\n$L__BB0_3:", "ptx") == readable(
        "add.s32 %r2, %r1, %r4;\n$L__BB0_9:", "ptx"
    )


def test_a_resumed_run_without_artifacts_compiles_them_again(tmp_path: Path) -> None:
    """The store has the step but its JIT dirs are gone and the report kept nothing: the step's
    commits are compiled again (here by restoring what their compile leaves), once each, and compared;
    where the copies exist, or the recompile fails, it is said and nothing is compiled needlessly."""
    work, out = tmp_path / "work", tmp_path / "report"
    step = fixture_step()
    asked: list[str] = []

    def recompile(sha: str) -> str:
        asked.append(sha)
        _jit_from_fixture(work, sha)
        return ""

    (sk,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"], recompile)
    assert asked == [GEMM["parent"], GEMM["culprit"]]
    assert sk.changed[0].name == "_matmul_kernel" and "compiled again for this report" in sk.note
    shutil.rmtree(work)
    asked.clear()
    (again,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"], recompile)
    assert asked == [] and again.changed == sk.changed  # kept beside the report: nothing recompiled
    shutil.rmtree(out)
    (failed,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"], lambda sha: "the commit did not build again")
    assert not failed.kernels and failed.note.count("could not be compiled again") == 2
    assert re.search(r"did not build again", section(_data(failed, [step]))[-2])

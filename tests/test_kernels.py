"""What changed in the compiled kernel, from real Triton artifacts of the demo's planted steps.

The fixtures (tests/fixtures/kernels/) are the demo's own Triton kernels at the parent and the
culprit of four planted steps, compiled ahead of time for sm_90 on a CPU machine by
`python -m studies.kernel_fixtures` (Triton's compiler, ptxas and cuobjdump from its wheel), and
kept by bisector.why.kernel_diff.artifacts.keep as a run keeps them next to its report. They were not
captured on an H200.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from bisector.model import Commit, Step
from bisector.publish.messages import culprit_body
from bisector.report import markdown
from bisector.report.data import ReportData
from bisector.triggers import outcome_plan as plan_mod
from bisector.why.kernel_diff import artifacts, isa, resources
from bisector.why.kernel_diff.collect import KERNELS_DIR, compare_dirs, step_kernels
from bisector.why.kernel_diff.diff import KernelDiff, diff_kernels, normalize

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"
INDEX = json.loads((FIXTURES / "index.json").read_text())["steps"]


def step_diff(pr: int) -> dict[str, KernelDiff]:
    st = INDEX[str(pr)]
    before = artifacts.find_kernels(FIXTURES / st["parent"][:12])
    after = artifacts.find_kernels(FIXTURES / st["culprit"][:12])
    return {d.name: d for d in diff_kernels(before, after)}


def fixture_step(pr: str = "145") -> Step:
    """A fixtures' verified step as the search reports it (#145: num_stages 3 -> 2)."""
    st = INDEX[pr]
    return Step(
        st["culprit"],
        st["parent"],
        ("gemm/m8192",),
        {"gemm/m8192": -30.0},
        {"gemm/m8192": (-31, -29)},
        {"gemm/m8192": 1e-6},
        pr=int(pr),
    )


def changed_rows(d: KernelDiff) -> dict[str, tuple[int, int]]:
    return {k: (b, a) for k, b, a in d.histogram_rows() if b != a}


def meta(d: KernelDiff) -> dict[str, tuple[object, object]]:
    return {k: (b, a) for k, b, a in d.metadata_rows()}


def test_num_stages_step_shows_the_stage_count_and_the_shared_memory() -> None:
    diffs = step_diff(145)
    gemm = diffs["_matmul_kernel"]
    assert gemm.status == "changed" and gemm.first_level == "ttgir"  # TTIR is the same: stages are a TTGIR pass
    assert meta(gemm)["num_stages"] == (3, 2)
    assert meta(gemm)["shared memory bytes"] == (147456, 98304)  # three 48 KiB A+B buffers -> two
    assert meta(gemm)["num_warps"] == (8, 8)
    assert changed_rows(gemm)["cp.async copy"] == (36, 24)  # one stage of copies in flight fewer
    assert {"a", "b"} <= set(gemm.changed_values)  # the shared-memory buffers: memdesc<3x...> -> <2x...>
    assert "memdesc<3x128x64xbf16" in gemm.ir_diff and "memdesc<2x128x64xbf16" in gemm.ir_diff
    # The attention kernel, compiled in the same JIT caches from another worktree (other paths and
    # line numbers in its locations), is the same code.
    assert diffs["_fwd_kernel"].status == "unchanged" and not diffs["_fwd_kernel"].levels_changed
    assert next(iter(gemm.histogram_rows()))[0] == "cp.async copy"  # the rows that changed come first


def test_group_m_and_remap_steps_show_what_moved() -> None:
    gemm = step_diff(131)["_matmul_kernel"]
    assert gemm.status == "changed" and gemm.first_level == "ttir"
    assert {"per_group", "first_m", "group_rows"} <= set(gemm.changed_values)  # the grouped program order
    assert meta(gemm)["num_stages"] == (3, 3) and meta(gemm)["shared memory bytes"] == (147456, 147456)
    assert "%c8_i32 = arith.constant 8" in gemm.ir_diff
    assert step_diff(131)["_fwd_kernel"].status == "unchanged"

    fa = step_diff(115)["_fwd_kernel"]
    assert fa.status == "changed" and fa.first_level == "ttir"
    assert set(fa.changed_values) == {"start_m", "off_hz"}  # only the program-id mapping moved
    assert "arith.divsi %pid, %NUM_M_BLOCKS" in fa.ir_diff
    assert abs(fa.histogram_rows()[0][2] - fa.histogram_rows()[0][1]) <= 2  # the same instruction mix
    assert step_diff(115)["_matmul_kernel"].status == "unchanged"


def test_fast_math_step_shows_precise_exp_replacing_ex2_approx() -> None:
    fa = step_diff(122)["_fwd_kernel"]
    rows = changed_rows(fa)
    assert rows["ex2.approx (approximate)"][0] > 0 and rows["ex2.approx (approximate)"][1] == 0
    assert rows["f64 arithmetic (precise)"][0] == 0 and rows["f64 arithmetic (precise)"][1] > 100
    assert rows["fma f64 (precise)"][0] == 0 and rows["f64 conversion"][1] > 0
    assert set(fa.changed_values) == {"p", "alpha"}  # the two exp2 of the online softmax
    assert "tensor<128x64xf64>" in fa.ir_diff
    regs = meta(fa)["registers"]
    assert regs[1] > regs[0]  # from ptxas -v / cuobjdump, kept as text beside the artifacts
    assert meta(fa)["spill store bytes"] == (0, 0)


def test_locations_and_debug_info_never_count_as_a_change(tmp_path: Path) -> None:
    st = INDEX["145"]
    src = FIXTURES / st["parent"][:12]
    moved = tmp_path / "moved"
    shutil.copytree(src, moved)
    for gz in moved.rglob("*.ttir.gz"):  # another worktree and two lines further down
        text = gzip.decompress(gz.read_bytes()).decode()
        text = text.replace("/tmp/bisector-kernel-fixtures/", "/elsewhere/w/").replace(":22:", ":24:")
        gz.write_bytes(gzip.compress(text.encode()))
    diffs = diff_kernels(artifacts.find_kernels(src), artifacts.find_kernels(moved))
    assert {d.status for d in diffs} == {"unchanged"}
    ptx = '\t.file\t1 "/a/b.py"\n\t.loc\t1 22 3\n$L__tmp0:\n\tld.global.v4.b32 {%r1,%r2,%r3,%r4}, [%rd1];\n'
    assert normalize(ptx, "ptx").split() == ["ld.global.v4.b32", "{%r1,%r2,%r3,%r4},", "[%rd1];"]


def test_added_removed_and_signature_changed_kernels_are_said_so(tmp_path: Path) -> None:
    gemm145 = FIXTURES / INDEX["145"]["parent"][:12]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    kernels = artifacts.find_kernels(gemm145)
    fa = next(k for k in kernels if k.name == "_fwd_kernel")
    mm = next(k for k in kernels if k.name == "_matmul_kernel")
    shutil.copytree(fa.directory, tmp_path / "a" / "fa")
    shutil.copytree(mm.directory, tmp_path / "b" / "mm")
    diffs = diff_kernels(artifacts.find_kernels(tmp_path / "a"), artifacts.find_kernels(tmp_path / "b"))
    assert sorted((d.name, d.status) for d in diffs) == [("_fwd_kernel", "removed"), ("_matmul_kernel", "added")]
    # The same name with another argument list: paired, and said so.
    shutil.copytree(mm.directory, tmp_path / "a" / "mm")
    ttir = tmp_path / "a" / "mm" / "_matmul_kernel.ttir.gz"
    text = gzip.decompress(ttir.read_bytes()).decode().replace("%K: i32", "%K: i64", 1)
    ttir.write_bytes(gzip.compress(text.encode()))
    d = {
        x.name: x for x in diff_kernels(artifacts.find_kernels(tmp_path / "a"), artifacts.find_kernels(tmp_path / "b"))
    }["_matmul_kernel"]
    assert d.status == "signature changed" and "i64" in d.signature.split("->")[0]


def test_instruction_classes() -> None:
    ptx = """
    @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    ld.global.L1::evict_last.b16 %rs1, [%rd2];
    st.global.v2.b32 [%rd3], {%r5, %r6};
    cp.async.cg.shared.global [ %r7 + 0 ], [ %rd4 + 0 ], 0x10, %r8;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r9], [%rd5, {%r1, %r2}], [%r3];
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd6, %rd7, 1, 1, 1, 0, 1;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f5,%f6,%f7,%f8};
    ex2.approx.ftz.f32 %f9, %f10;  // comment
    fma.rn.f64 %fd1, %fd2, %fd3, %fd4;
    add.rn.f64 %fd5, %fd1, %fd2;
    div.rn.f32 %f11, %f12, %f13;
    bar.sync 0;
    """  # noqa: E501 - PTX as ptxas prints it, one instruction a line
    h = isa.histogram(ptx, "ptx")
    assert h["global load 128-bit"] == 1 and h["global load 16-bit"] == 1 and h["global store 64-bit"] == 1
    assert h["cp.async copy"] == 1 and h["TMA copy (cp.async.bulk.tensor)"] == 1
    assert h["wgmma m64n128k16"] == 1 and h["mma m16n8k16"] == 1
    assert h["ex2.approx (approximate)"] == 1 and h["fma f64 (precise)"] == 1
    assert h["f64 arithmetic (precise)"] == 1 and h["div.rn.f32 (precise)"] == 1
    assert h["barrier (bar.sync)"] == 1 and h["instructions"] == 12
    # AMDGCN, a hand-written sample of the instruction forms (no AMD artifact was captured)
    amd = """
    global_load_dwordx4 v[0:3], v4, s[0:1]
    buffer_load_dword v5, v6, s[4:7], 0 offen
    ds_read_b128 v[8:11], v12
    v_mfma_f32_32x32x16_bf16 a[0:15], v[0:3], v[4:7], a[0:15]
    v_accvgpr_read_b32 v20, a0
    v_exp_f32_e32 v21, v22
    v_fma_f64 v[24:25], v[26:27], v[28:29], v[30:31]
    s_setprio 2
    s_barrier
    """
    a = isa.histogram(amd, "amdgcn")
    assert a["global load 128-bit"] == 1 and a["buffer load 32-bit"] == 1 and a["LDS load 128-bit"] == 1
    assert a["mfma mfma_f32_32x32x16_bf16"] == 1 and a["AGPR moves (v_accvgpr_*)"] == 1
    assert a["fma f64 (precise)"] == 1 and a["s_setprio"] == 1 and a["barrier (s_barrier)"] == 1


def test_resource_parsers() -> None:
    st = INDEX["145"]
    k = next(k for k in artifacts.find_kernels(FIXTURES / st["parent"][:12]) if k.name == "_matmul_kernel")
    cuobj = resources.parse_cuobjdump(k.tool_output(artifacts.CUOBJDUMP) or "", "_matmul_kernel")
    ptxas = resources.parse_ptxas(k.tool_output(artifacts.PTXAS) or "")
    assert cuobj["registers"] == ptxas["registers"] > 0 and ptxas["spill store bytes"] == 0
    assert resources.parse_cuobjdump(k.tool_output(artifacts.CUOBJDUMP) or "", "_fwd_kernel") == {}
    amd = (
        "\t.amdhsa_next_free_vgpr 256\n  .agpr_count: 128\n  .sgpr_count: 94\n  .vgpr_count: 256\n"
        "  .vgpr_spill_count: 3\n  .private_segment_fixed_size: 48\n  .group_segment_fixed_size: 65536\n"
    )
    assert resources.parse_amdgcn(amd) == {
        "vgprs": 256,
        "agprs": 128,
        "sgprs": 94,
        "vgpr spills": 3,
        "scratch bytes": 48,
        "LDS bytes": 65536,
    }


def _jit_from_fixture(work: Path, sha: str) -> None:
    """A commit's JIT dir as a trial leaves it (plain files), from the kept fixture."""
    for gz in (FIXTURES / sha[:12]).rglob("*"):
        if gz.is_dir():
            continue
        rel = gz.relative_to(FIXTURES / sha[:12])
        dest = work / "jit" / sha / rel.parent / rel.name.removesuffix(".gz")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(gzip.decompress(gz.read_bytes()) if gz.suffix == ".gz" else gz.read_bytes())


def test_kept_next_to_the_report_and_read_there_once_the_jit_caches_are_gone(tmp_path: Path) -> None:
    st = INDEX["145"]
    work, out = tmp_path / "work", tmp_path / "report"
    for sha in (st["parent"], st["culprit"]):
        _jit_from_fixture(work, sha)
    step = fixture_step()
    (first,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"])
    kept = out / KERNELS_DIR / st["parent"][:12]
    assert any(kept.rglob("_matmul_kernel.ttgir.gz")) and not any(kept.rglob("*.ttgir"))
    assert any(kept.rglob("_matmul_kernel.ptxas.txt"))  # the tool output travels with the copy
    shutil.rmtree(work)  # the next run of these commits empties their JIT dirs; an offline re-make reads the copy
    (again,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"])
    assert again == first and again.changed[0].name == "_matmul_kernel"
    assert (out / again.changed[0].ir_diff_path).read_text().startswith("--- parent.ttgir")
    # No JIT cache configured (the CPU flavour), or none kept: said, not guessed.
    (none,) = step_kernels(work, out, [step], [])
    assert not none.kernels and "jit_cache_env" in none.note
    shutil.rmtree(out)
    (gone,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"])
    assert not gone.kernels and "no compiled artifacts" in gone.note


def _data(sk, steps=()) -> ReportData:
    st = INDEX["145"]
    c0 = Commit(st["parent"], "2026-07-01", "a", "docs", 143)
    c1 = Commit(st["culprit"], "2026-07-02", "b", "GEMM: num_stages 3 -> 2 to save shared memory", 145)
    return ReportData(
        title="t",
        config_name="h200-demo",
        upstream="u",
        branch="main",
        good=c0,
        bad=c1,
        device="cuda",
        control="torch_cuda",
        machine={},
        protocol={},
        shapes=("gemm/m8192",),
        range_commits=(c0, c1),
        rows=(),
        steps=tuple(steps),
        kernels=(sk,),
    )


def test_report_and_pr_comment_show_it(tmp_path: Path) -> None:
    st = INDEX["145"]
    shutil.copytree(FIXTURES, tmp_path / KERNELS_DIR)
    sk = compare_dirs(tmp_path, st["parent"], st["culprit"])
    step = fixture_step()
    data = _data(sk, [step])
    md = markdown.render(data)
    section = md.split("## What changed in the compiled kernel", 1)[1]
    # the first line says it; the folded table does not say it again (the PR comment's keeps it, below)
    assert "| num_stages | 3 | 2 |" not in section and "**" not in section.split("### ", 1)[1].split("\n", 1)[1]
    assert "| shared memory bytes |" not in section and "| cp.async commit/wait | 8 | 6 | -25% |" in section
    assert "- `_matmul_kernel`: registers 220 → 208, shared memory bytes 147456 → 98304 B, num_stages 3 → 2" in section
    assert "<details><summary>metadata, instructions and IR that differ" in section and "TTGIR diff" in section
    assert "Unchanged: `_fwd_kernel`." in section
    plan = plan_mod.build(data, "r1", "ada/demolib", md)
    body = culprit_body(plan, plan.culprits[0])
    folded = body.split("<details><summary>What changed in the compiled kernel</summary>", 1)[1]
    assert "| num_stages | 3 | 2 |" in folded.split("</details>", 1)[0]


@pytest.mark.parametrize("pr", sorted(INDEX))
def test_fixtures_are_what_the_script_writes(pr: str) -> None:
    """Small, and said to be compiled ahead of time, not captured."""
    index = json.loads((FIXTURES / "index.json").read_text())
    assert "not captured on an H200" in index["compiled"]
    total = sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file())
    assert total < 400 * 1024
    for sha in (INDEX[pr]["parent"], INDEX[pr]["culprit"]):
        names = sorted(k.name for k in artifacts.find_kernels(FIXTURES / sha[:12]))
        assert names == ["_fwd_kernel", "_matmul_kernel"]


def test_one_reason_for_every_step_is_said_once(tmp_path: Path) -> None:
    st = INDEX["145"]
    steps = [
        fixture_step(),
        Step(
            st["parent"],
            st["culprit"],
            ("gemm/m8192",),
            {"gemm/m8192": 9.0},
            {"gemm/m8192": (8, 10)},
            {"gemm/m8192": 1e-6},
        ),
    ]
    found = step_kernels(tmp_path / "work", tmp_path / "report", steps, [])  # the CPU flavour keeps no JIT cache
    assert len(found) == 2 and not any(k.kernels for k in found)
    md = markdown.render(replace(_data(found[0]), kernels=found))
    assert md.count("jit_cache_env") == 1 and "Nothing to compare for any step" in md

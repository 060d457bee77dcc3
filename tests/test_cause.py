"""The cause in one line, from stored compiled kernels: the real sm_90 artifacts of the demo's steps
(tests/fixtures/kernels/, compiled by Triton ahead of time), and copies of them edited the way a
lost divisibility edits Triton's TTIR (tests/test_kernel_pairing.py's `_variant`). Root causes (a
launch option, a specialization, a constant) lead and are ranked by the symptoms they explain;
where nothing that explains speed moved, the sentence says "unclear"."""

from __future__ import annotations

from pathlib import Path

from bisector.why.cause import cause_of
from bisector.why.kernel_diff import artifacts
from bisector.why.kernel_diff.diff import StepKernels, diff_kernels
from tests.test_kernel_pairing import _gemm_dir, _variant
from tests.test_kernels import FIXTURES, INDEX

NOT_SPECIALIZED = """-@triton.jit(do_not_specialize=["M"])
+@triton.jit(do_not_specialize=["M", "stride_am"])
"""


def step(pr: str) -> StepKernels:
    st = INDEX[pr]
    return StepKernels(
        st["culprit"],
        st["parent"],
        diff_kernels(
            artifacts.find_kernels(FIXTURES / st["parent"][:12]), artifacts.find_kernels(FIXTURES / st["culprit"][:12])
        ),
    )


def edited(tmp_path: Path, parent: str, culprit: str, drop_div: str = "") -> StepKernels:
    _variant(_gemm_dir(parent), tmp_path / "a" / "H1")
    _variant(_gemm_dir(culprit), tmp_path / "b" / "H2", drop_div=drop_div)
    return StepKernels(
        culprit, parent, diff_kernels(artifacts.find_kernels(tmp_path / "a"), artifacts.find_kernels(tmp_path / "b"))
    )


def test_a_launch_option_leads_with_what_it_moved() -> None:
    c = cause_of(step("145"))
    assert c.kind == "launch" and c.kernel == "_matmul_kernel"
    assert c.sentence == "num_stages 3 -> 2: cp.async 36 -> 24, shared memory 147456 -> 98304 B, registers 220 -> 208."
    assert [k.kind for k in c.ranked] == ["launch", "async", "shared", "registers"]


def test_exact_math_where_approximate_math_was() -> None:
    c = cause_of(step("122"))
    assert c.kind == "math"
    assert c.sentence.startswith("`_fwd_kernel` computes exactly where it used approximate math: ")
    assert "ex2.approx 34 -> 0" in c.sentence and "f64 arithmetic 0 -> 340" in c.sentence


def test_unclear_rather_than_a_guess() -> None:
    c = cause_of(step("115"))
    assert c.kind == "unclear" and c.sentence.startswith("unclear: `_fwd_kernel` compiled differently")
    assert cause_of(None).sentence.startswith("unclear: no compiled kernel changed")
    assert (
        cause_of(StepKernels("a", "b", note="no JIT artifacts were kept")).sentence
        == "unclear: no JIT artifacts were kept."
    )
    # a constant the hunks change is said, with what did (not) move
    c = cause_of(step("131"), "-    GROUP_M=8,\n+    GROUP_M=1,\n")
    assert c.kind == "constexpr"
    assert c.sentence == "`GROUP_M` 8 -> 1; no resource, width, copy or matrix instruction count of the kernel moved."


def test_an_argument_passed_unspecialized(tmp_path: Path) -> None:
    st = INDEX["145"]
    c = cause_of(edited(tmp_path, st["parent"], st["parent"], drop_div="stride_am"), NOT_SPECIALIZED)
    assert c.kind == "specialization"
    assert c.sentence.startswith("`stride_am` is passed unspecialized (in `do_not_specialize`)")
    assert c.sentence.endswith("no resource, width, copy or matrix instruction count of the kernel moved.")


def test_the_root_that_explains_more_of_what_moved_ranks_first(tmp_path: Path) -> None:
    """A divisibility lost and num_stages lowered in one step: the shared memory and registers that
    moved are the launch option's doing, so it leads; the specialization is ranked second."""
    st = INDEX["145"]
    c = cause_of(edited(tmp_path, st["parent"], st["culprit"], drop_div="stride_am"), NOT_SPECIALIZED)
    assert [k.kind for k in c.ranked[:2]] == ["launch", "specialization"]
    assert c.sentence.startswith("num_stages 3 -> 2: cp.async 36 -> 24")


def test_the_report_opens_each_steps_why_with_its_cause_and_the_rest_of_the_commit() -> None:
    from bisector.model import Commit
    from bisector.report import markdown
    from bisector.why.cause import for_steps
    from bisector.why.culprit_hunks import HunkFinding
    from tests.report_fixtures import one_commit_report

    sk = step("145")
    finding = HunkFinding(
        sk.step_commit,
        16,
        ("lib/kernel.py @@ -5,10 +5,11 @@ lines +11",),
        True,
        (),
        diff="-    num_stages=3,\n+    num_stages=2,\n",
        n_plumbing=11,
        n_behaviour=1,
        n_pieces=3,
        found_hunks=1,
        pieces_in_found=2,
        aside=("tests/test_x.py", "benchmark/bench_y.py"),
        n_aside=3,
    )
    causes = for_steps((sk,), (finding,), lambda sha: "")
    c = Commit(sk.step_commit, "2026-07-02", "b", "GEMM: num_stages 3 -> 2", 145)
    data = one_commit_report(c, hunks=(finding,), kernels=(sk,), causes=causes)
    text = markdown.render(data).split("## The cause of each step, in one line", 1)[1]
    assert "num_stages 3 -> 2: cp.async 36 -> 24, shared memory 147456 -> 98304 B, registers 220 -> 208." in text
    assert "carried by: `lib/kernel.py` @@-5 +11" in text
    assert (
        "the rest: threading: 11 hunks, applied as base; not loaded by any trial: tests/test_x.py, "
        "benchmark/bench_y.py (3 hunks set aside)"
    ) in text
    assert finding.summary.endswith("; not loaded by any trial: tests/test_x.py, benchmark/bench_y.py")

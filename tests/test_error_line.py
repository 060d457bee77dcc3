"""Every "does not run" reason is one line naming the error (bisector/runner/error_line.py), made
where a commit's or a patched build's measurement says why it has no samples (bisector/measure/probe.py):
the texts below are what trials on a real range recorded (`<Type>: <str(exc)>`, benches/trial.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bisector.measure.probe import StoreProbe
from bisector.model import ProbeStatus, TrialStatus
from bisector.runner.error_line import error_line
from tests.test_probe import TWO, Runner, probe

CUDA = (
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
ACCELERATOR = (
    "AcceleratorError: CUDA error: an illegal memory access was encountered\n"  # torch 2.11
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
    "group__CUDART__TYPES.html for more information.\n" + CUDA.split("\n", 1)[1]
)
TRITON = (
    "CompilationError: at 12:22:\n"
    "    OUT,  # Pointers to matrices\n    X,\n    COS,\n"
    "    pid_m = tl.program_id(axis=0)\n    pid_head = tl.program_id(axis=1)\n"
    "    pid_batch = tl.program_id(axis=2)\n    rotary_dim_half = rotary_dim // 2\n"
    "                      ^\nNameError('rotary_dim is not defined')"
)
TRACEBACK = (
    'Traceback (most recent call last):\n  File "/w/benches/trial.py", line 400, in run\n'
    '    out = fn(*args)\n  File "/w/flash_attn/ops/triton/rotary.py", line 210, in apply_rotary\n'
    "    rotary_kernel[grid](\n"
    "triton.compiler.errors.CompilationError: at 40:31:\n"
    "        mask = (rh[:, None, None] < nheads) & (rm[None, :, None] < seqlen)\n"
    "                                    ^\nNameError('nheads is not defined')\n"
)


def test_each_error_is_its_one_meaningful_line() -> None:
    assert error_line(CUDA) == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert error_line(ACCELERATOR) == "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert error_line(TRITON) == "CompilationError: NameError('rotary_dim is not defined') (at 12:22)"
    assert (
        error_line(TRACEBACK)
        == "triton.compiler.errors.CompilationError: NameError('nheads is not defined') (at 40:31)"
    )
    assert (
        error_line("TypeError: dynamic_func() missing 1 required positional argument: 'BLOCK_M'")
        == "TypeError: dynamic_func() missing 1 required positional argument: 'BLOCK_M'"
    )
    assert (
        error_line("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'BLOCK_H'\n")
        == "KeyError: 'BLOCK_H'"
    )
    assert error_line("") == ""
    long = error_line("ValueError: " + "x" * 1000)
    assert long.startswith("ValueError: xxx") and long.endswith("...") and len("does not run: " + long) <= 200


class Failing(Runner):
    """A real probe's runner whose trials fail with a real error: one commit on every shape, another on
    the attention shape only (the other runs)."""

    def __call__(self, build, suite, shapes, *, first, seed):
        got = super().__call__(build, suite, shapes, first=first, seed=seed)
        error = {"cuda": CUDA, "triton": TRITON}.get(build.sha)
        return [
            replace(r, status=TrialStatus.CRASH, error=error, log_tail=TRACEBACK)
            if error and (build.sha == "cuda" or r.shape == "fa/s64")
            else r
            for r in got
        ]


def test_a_measurement_that_does_not_run_says_so_in_one_line(tmp_path: Path) -> None:
    """The reasons a probe makes from its trials: what hunk subsets, commits and reverts report."""
    p = probe(tmp_path, Failing(), parallel=1, shapes=TWO)
    whole = p("cuda", 2)
    assert whole.status is ProbeStatus.SKIP
    assert whole.reason == "does not run: RuntimeError: CUDA error: an illegal memory access was encountered"
    part = p("triton", 2)
    assert part.status is ProbeStatus.OK and "gemm/m64" in part.samples
    assert part.reason == "fa/s64 does not run: CompilationError: NameError('rotary_dim is not defined') (at 12:22)"
    # a report re-made offline from the store says the same
    again = StoreProbe("c", TWO, p.store, p.builds, p.executor, offline=True)("cuda", 2)
    assert again.status is ProbeStatus.SKIP and again.reason == whole.reason

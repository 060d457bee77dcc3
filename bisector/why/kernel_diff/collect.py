"""For every verified step: keep the parent's and the culprit's compiled kernels next to the report,
and compare them (bisector/why/kernel_diff/diff.py).

Where the artifacts come from: each commit's first trial compiles into `<work>/jit/<sha>/<var>`
(bisector/runner/env.py), and the next run of that commit empties it. So they are copied into
`<report>/kernels/<sha12>/` as soon as the steps are known (re-copied by every run that finds the
JIT dir holding kernels, so the copy is what the trials last compiled), and the comparison reads
the copies only. An offline re-make (`bisector run --offline`), on this machine or another, reads
the same copies. Where a commit has neither (a run resumed from the store after its JIT dir was
emptied, a report directory made before the kernels were kept), a run that may build and run
trials compiles it again (`recompile`, bisector/why/kernel_diff/regenerate.py); offline it says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from bisector.model import Step
from bisector.runner.env import jit_dir
from bisector.why.kernel_diff import artifacts, autotune
from bisector.why.kernel_diff.artifacts import Kernel
from bisector.why.kernel_diff.diff import KernelDiff, StepKernels, compare, ir_diff, match, ordered

__all__ = ["KERNELS_DIR", "keep_commit", "step_kernels", "compare_dirs"]

KERNELS_DIR = "kernels"


def keep_commit(work: Path, out: Path, sha: str) -> Path:
    """Copy the commit's JIT dir into the report (when it holds kernels); the copy's path."""
    dest = out / KERNELS_DIR / sha[:12]
    src = jit_dir(work, sha)
    if artifacts.find_kernels(src):
        artifacts.keep(src, dest)  # replaces dest whole: the choices are kept after it
        autotune.keep(src, dest)
    return dest


Recompile = Callable[[str], str]  # sha -> "" once its JIT dir holds kernels again, else why not


def _kept(work: Path, out: Path, sha: str, recompile: Recompile | None, said: list[str]) -> None:
    """Keep the commit's kernels; where neither the JIT dir nor the report has any, compile them again."""
    dest = keep_commit(work, out, sha)
    if recompile is None or artifacts.find_kernels(dest):
        return
    why = recompile(sha)
    dest = keep_commit(work, out, sha)
    if why or not artifacts.find_kernels(dest):
        said.append(f"`{sha[:7]}` could not be compiled again for this report: {why or 'no kernel kept'}")
    else:
        said.append(f"`{sha[:7]}`'s kernels were compiled again for this report (its JIT dir was gone)")


def step_kernels(
    work: Path, out: Path, steps: Sequence[Step], jit_cache_env: Sequence[str], recompile: Recompile | None = None
) -> tuple[StepKernels, ...]:
    """The kernels across every verified step with one culprit (regressions and improvements);
    `recompile`, when given, refills a commit's JIT dir that is gone and was never kept."""
    found = []
    done: dict[str, list[str]] = {}
    for step in steps:
        if step.candidates or not step.verified:
            continue
        if not jit_cache_env:
            found.append(
                StepKernels(
                    step.commit,
                    step.parent,
                    note=(
                        "the config keeps no JIT cache (`protocol.jit_cache_env` is empty): "
                        "no compiled kernel to compare"
                    ),
                )
            )
            continue
        said: list[str] = []
        for sha in (step.parent, step.commit):
            if sha not in done:  # a commit that is one step's culprit and the next one's parent: once
                done[sha] = []
                _kept(work, out, sha, recompile, done[sha])
            said += done[sha]
        sk = compare_dirs(
            out,
            step.parent,
            step.commit,
            others=artifacts.other_files(jit_dir(work, step.parent))
            + artifacts.other_files(jit_dir(work, step.commit)),
        )
        found.append(replace(sk, note="; ".join([*said, *([sk.note] if sk.note else [])])))
    return tuple(found)


def compare_dirs(out: Path, parent: str, culprit: str, others: int = 0) -> StepKernels:
    """The kept kernels of `parent` and `culprit` under `out`/kernels, compared; each changed
    kernel's whole first-level diff written beside them."""
    before_dir, after_dir = out / KERNELS_DIR / parent[:12], out / KERNELS_DIR / culprit[:12]
    before, after = artifacts.find_kernels(before_dir), artifacts.find_kernels(after_dir)
    choices = autotune.compare(autotune.kept(before_dir), autotune.kept(after_dir))
    if not before and not after:
        note = (
            f"the JIT caches hold {others} files in no format read here (Triton's `<name>.json` beside its IR)"
            if others
            else "no compiled artifacts were kept for the parent or the culprit (their JIT caches are gone "
            "or empty, and the report directory holds no copy)"
        )
        return StepKernels(culprit, parent, note=note, autotune=choices)
    missing = [what for what, ks in (("the parent", before), ("the culprit", after)) if not ks]
    note = f"no compiled artifacts were kept for {' or '.join(missing)}" if missing else ""
    diffs = []
    for i, (b, a, how, variants, changes) in enumerate(match(before, after)):
        diffs.append(_with_file(compare(b, a, how, variants, changes), b, a, out, culprit, i))
    return StepKernels(
        culprit,
        parent,
        ordered(diffs),
        note,
        artifacts=f"{KERNELS_DIR}/{parent[:12]}, {KERNELS_DIR}/{culprit[:12]}",
        autotune=choices,
    )


def _with_file(d: KernelDiff, before: Kernel | None, after: Kernel | None, out: Path, sha: str, i: int) -> KernelDiff:
    """The whole diff of the first differing level, written next to the report."""
    if not d.first_level or before is None or after is None:
        return d
    b, a = before.text(d.first_level), after.text(d.first_level)
    if b is None or a is None:
        return d
    suffix = f"-{i}" if d.variants > 1 else ""
    safe = re.sub(r"[^\w.-]", "_", d.name)
    path = out / KERNELS_DIR / f"{sha[:12]}-{safe}{suffix}.{d.first_level}.diff"
    path.write_text(ir_diff(b, a, d.first_level))
    return replace(d, ir_diff_path=str(path.relative_to(out)))

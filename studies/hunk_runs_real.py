"""Do the hunk search's planned bases and subsets of a real Liger-Kernel culprit run? On the CPU:
the culprit planned as the bot plans it (culprit_hunks._planned, with the import trace its trials
record, taken from the range description), then the parent with the threading base, with each
searched unit on it, with all units but one, and every subset a scripted search builds (the
largest unit carries the step), each run as Liger's LayerNorm forward+backward at a tiny fp32 shape
under TRITON_INTERPRET=1 through the config's adapter and suite, in a fresh process, after its
kernels were compiled for sm_90 (Triton's code generator, no GPU needed) at a tiny bf16 shape.

    python -m studies.hunk_runs_real --git-dir REPO.git SHA [SHA ...]

REPO.git: a copy of Liger-Kernel holding the culprits and their parents (studies/real_repos.py).
The interpreter runs kernels on numpy: `rsqrt` imported from Triton's libdevice is a device stub
there (it returns None), so the run swaps in `tl.math.rsqrt`. A subset the checks refuse is never
run (the bot never builds it). What fails here beyond the checks is semantic (wrong results, an
out-of-bounds store), or CPU-only (`sm_count` bound only on a CUDA or XPU device).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from bisector.model import TrialRecord, TrialStatus
from bisector.why import culprit_hunks, hunk_plumbing, hunks

ROOT = Path(__file__).resolve().parents[1]
RUN = f"""import json, sys
sys.path[:0] = [sys.argv[1], {str(ROOT / "benches/real/liger")!r}, {str(ROOT)!r}]
import torch, triton.language as tl
import liger_calls, liger_kernel.ops.layer_norm as ln
if hasattr(ln, "rsqrt"):
    ln.rsqrt = lambda x: tl.math.rsqrt(x)
suite = liger_calls.LayerNorm()
p = {{"T": 16, "D": 64, "dtype": "fp32", "kind": "layer"}}
inputs = suite.make_inputs(p, "cpu", 0)
got, ref = suite.output(liger_calls.layer_norm(**inputs)), suite.reference(inputs)
atol, rtol = suite.tolerance(p)
print(json.dumps({{"ok": bool(torch.allclose(got, ref, atol=atol, rtol=rtol)), "err": (got - ref).abs().max().item()}}))
"""

# Each launch compiled for an H100 by Triton's code generator instead of run: the interpreter runs a
# kernel as Python, where a name a loop binds is still visible after it; compiled, it is not.
COMPILE = f"""import sys
sys.path[:0] = [sys.argv[1], {str(ROOT / "benches/real/liger")!r}, {str(ROOT)!r}]
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature
target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
def run(self, *args, grid, warmup, **kwargs):
    bind = create_function_from_signature(self.signature, self.params, backend)
    kwargs = {{"debug": False, **kwargs}}
    bound, specialization, options = bind(*args, **kwargs)
    options, signature, constexprs, attrs = self._pack_args(backend, kwargs, bound, specialization, options)
    triton.compile(ASTSource(self, signature, constexprs, attrs), target=target, options=options.__dict__)
JITFunction.run = run
import liger_calls
suite = liger_calls.LayerNorm()
liger_calls.layer_norm(**suite.make_inputs({{"T": 16, "D": 64, "dtype": "bf16", "kind": "layer"}}, "cpu", 0))
"""


@dataclass(frozen=True)
class _At:
    commit: str
    parent: str


class _Session:
    def __init__(self, repo: git.Repo, loaded: list[str]) -> None:
        self.repo, self.loaded = repo, loaded

    def probe(self, **_: object) -> _Session:
        return self

    def stored(self, sha: str) -> list[TrialRecord]:
        return [TrialRecord(sha, "ln/t16k_d4096", TrialStatus.OK, protocol={"imported": self.loaded})]


def runs(repo: git.Repo, parent: str, patch: str) -> str:
    """ "" when the parent with `patch` compiles for sm_90 and runs LayerNorm fwd+bwd right; else why not."""
    with tempfile.TemporaryDirectory() as d:
        tree = Path(d)
        subprocess.run(
            f"git --git-dir {repo.git_dir} archive {parent} src 2>/dev/null | tar -x -C {tree}", shell=True, check=True
        )
        if patch:
            (tree / "p.diff").write_text(patch)
            applied = subprocess.run(["git", "apply", "p.diff"], cwd=tree, capture_output=True, text=True)
            if applied.returncode:
                return "does not apply: " + applied.stderr.strip()[-200:]
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        built = subprocess.run(
            [sys.executable, "-c", COMPILE, str(tree / "src")],
            capture_output=True,
            text=True,
            env={**env, "TRITON_CACHE_DIR": str(tree / "cache")},
            timeout=600,
        )
        if built.returncode:
            tail = (built.stderr.strip() or built.stdout.strip()).splitlines()
            return "does not compile for sm_90: " + (tail[-1][-240:] if tail else "(no output)")
        out = subprocess.run(
            [sys.executable, "-c", RUN, str(tree / "src")],
            capture_output=True,
            text=True,
            env={**env, "TRITON_INTERPRET": "1"},
            timeout=600,
        )
        if out.returncode:
            tail = (out.stderr.strip() or out.stdout.strip()).splitlines()
            return f"exit {out.returncode}: " + (tail[-1][-240:] if tail else "(no output)")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        return "" if got["ok"] else f"wrong result (max error {got['err']:.3g})"


def study(repo: git.Repo, sha: str, loaded: list[str]) -> None:
    planned = culprit_hunks._planned(_Session(repo, loaded), _At(sha, f"{sha}^"))  # type: ignore[arg-type]
    assert planned is not None and planned.plumbed is not None
    plan, old, new = planned.plumbed, planned.old, planned.new
    print(
        f"{sha[:8]}: {planned.n_hunks} hunks, set aside {planned.aside.hunks} ({', '.join(planned.aside.files)}); "
        f"searched {len(planned.parts)} hunks in {len(planned.groups)} groups"
    )
    print(f"  threading base: {len(plan.base)} pieces, {len(plan.pieces)} units; refused: {plan.base_error or 'no'}")
    if plan.base_error:  # what culprit_hunks._whole searches: whole hunks, checked like pieces
        plan = hunk_plumbing.Plan(
            plan.parts, (), tuple(hunk_plumbing.Piece(i, None, h.label) for i, h in enumerate(plan.parts))
        )
    n, failed, refused = len(plan.pieces), [], 0
    fixed = (
        [("base", ())]
        + [(f"unit {i}", (i,)) for i in range(n)]
        + [(f"all but {i}", tuple(j for j in range(n) if j != i)) for i in range(n)]
        + [("all", tuple(range(n)))]
    )
    size = lambda i: len(plan.pieces[i].keep or plan.parts[plan.pieces[i].hunk].body.splitlines())  # noqa: E731
    target = max(range(n), key=size)

    def try_(name: str, subset: tuple[int, ...]) -> bool | None:
        nonlocal refused
        if plan.compile_error(subset, old, new):
            refused += 1
            return None
        error = runs(repo, f"{sha}^", plan.patch(subset))
        print(f"  {name} {[plan.pieces[i].label.split(' @@ ', 1)[1] for i in subset]}: {error or 'runs'}", flush=True)
        if error:
            failed.append(name)
        return None if error else target in subset

    for name, subset in fixed:
        try_(name, subset)
    found = hunks.search(
        n, lambda subsets: [try_("searched", s) for s in subsets], free=lambda s: bool(plan.compile_error(s, old, new))
    )
    print(
        f"  scripted search ({plan.pieces[target].label} carries): found {len(found.found)} units; "
        f"{refused} subsets refused unbuilt, {len(failed)} built that did not run right: {failed}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", type=Path, required=True)
    ap.add_argument("--range", type=Path, default=ROOT / "benches/real/liger/range.toml")
    ap.add_argument("commits", nargs="+")
    args = ap.parse_args(argv)
    from benches.real.ranges import load

    steps = {s.culprit: s for s in load(args.range).steps}
    repo = git.Repo(args.git_dir)
    repo.git.update_environment(GIT_DIR=str(repo.git_dir))
    for sha in args.commits:
        if not shutil.which("git") or sha not in steps:
            print(f"{sha}: not a described step of {args.range}")
            continue
        study(repo, sha, list(steps[sha].loaded))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Compile a real range's kernels for sm_90 without a GPU, at each (library, commit) of a plan, and
count what a memory-bound kernel's speed hangs on in its PTX: global loads and stores by width, and
the warps it launches with. Each launch the adapter makes (on host tensors, shrunk as in
studies/real_interpret.TINY, so strides and divisibility stay the GPU's) is compiled ahead of time
for `GPUTarget("cuda", 90, 32)` with the arguments Triton's binder sees, instead of being run.

    python -m studies.real_compile --repos DIR --plan benches/real/screen-plan.json --lib flash_attn --suites rot

This is a CPU screen, not a measurement: it says where a commit changed the code an H100 would run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from studies.real_interpret import TINY, host_device_calls
from studies.real_screen import at_commit, config_shapes

PTX_OPS = re.compile(r"^\s*(?:@%p\d+\s+)?((?:ld|st)\.global[.\w]*)", re.M)


def capture_launches() -> list[dict]:
    """Replace each Triton launch by an sm_90 compile of it; return what was compiled."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    compiled: list[dict] = []

    def run(self, *args, grid, warmup, **kwargs):
        binder = create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binder(*args, **{"debug": False, **kwargs})
        options, signature, constexprs, attrs = self._pack_args(backend, kwargs, bound, specialization, options)
        k = triton.compile(ASTSource(self, signature, constexprs, attrs), target=target, options=options.__dict__)
        ops = Counter(m.group(1) for m in PTX_OPS.finditer(k.asm["ptx"]))
        compiled.append(
            {
                "kernel": self.fn.__name__,
                "num_warps": k.metadata.num_warps,
                "shared": k.metadata.shared,
                "ptx_global": dict(sorted(ops.items())),
            }
        )

    JITFunction.run = run  # type: ignore[method-assign]
    # an autotuned kernel is compiled at its first config only: the same config at every commit
    # compares the code, not the tuner's pick
    from triton.runtime import autotuner

    tuned_run = autotuner.Autotuner.run

    def first_config(self, *args, **kwargs):
        self.configs = self.configs[:1]
        return tuned_run(self, *args, **kwargs)

    autotuner.Autotuner.run = first_config  # type: ignore[method-assign]
    return compiled


def one(lib: str, src: Path, suites: list[str]) -> list[dict]:
    host_device_calls()
    compiled = capture_launches()
    out = []
    for shape in config_shapes(lib, src, suites):
        params = {k: TINY.get(k, v) for k, v in shape.params.items()}
        if "S" in params:
            params["S"] = 64  # keep the sequence a multiple of the kernels' row blocks
        row = {"lib": lib, "shape": shape.key}
        del compiled[:]
        try:
            shape.subject()(**shape.suite.make_inputs(params, "cpu", 0))
        except Exception as exc:  # noqa: BLE001 - nothing ran, so later host code may trip on garbage
            row["after"] = f"{type(exc).__name__}: {exc}"[:200]
        row["kernels"] = list(compiled)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos", type=Path)
    ap.add_argument("--plan", type=Path)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--suites", nargs="*", default=[])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", metavar="SRC", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.lib, Path(args.one), args.suites)))
        return 0
    plan = [p for p in json.loads(args.plan.read_text()) if p["lib"] == args.lib]
    work = Path(tempfile.mkdtemp(prefix="real-compile-"))
    rows: list[dict] = []
    for i, item in enumerate(plan):
        found = at_commit(
            args.repos,
            item,
            work,
            i,
            ["studies.real_compile", "--lib", args.lib, "--one", "{src}", "--suites", *args.suites],
        )
        if isinstance(found, str):
            found = [{"lib": args.lib, "shape": "*", "after": found[-400:], "kernels": []}]
        for row in found:
            row.update(sha=item["sha"], label=item.get("label", item["sha"][:8]))
            rows.append(row)
            ks = "; ".join(f"{k['kernel']} w{k['num_warps']} {k['ptx_global']}" for k in row["kernels"]) or "-"
            print(f"{row['label']:10} {row['shape']:20} {ks} {row.get('after', '')[:120]}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Check the real ranges' adapters on the CPU, before a GPU screen spends time on them: for each
(library, commit) of a plan, check the commit out of the small upstream copy and, in a fresh process
with `TRITON_INTERPRET=1` (Triton's interpreter runs the kernels on the host), call every shape of the
library's config shrunk to a few rows (`TINY`) and compare the subject's output with the suite's
float32 reference within the suite's tolerance.

    python -m studies.real_interpret --repos DIR --plan benches/real/screen-plan.json [--lib fla]

Prints one line per (commit, shape): ok with the largest error, MISMATCH, or the error that stopped it
(a commit whose kernel does not run under the interpreter is a finding to record, not a failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from studies.real_screen import at_commit, config_shapes

# the sizes that only count rows or batches shrink; feature sizes (D, rotary_dim, V) keep their
# value so the kernel's tiles, masks and constexprs are those the GPU screen compiles
TINY = {"T": 48, "BT": 8, "B": 2, "S": 24, "H": 3}


def host_device_calls() -> None:
    """The launchers ask torch or Triton's driver for the CUDA device around the kernel (`with
    torch.cuda.device(...)`, its SM count, its warp size) and autotuners time their configs with the
    device's benchmarker; on a host without CUDA those answer as one H100 would and every config
    runs once (the first is kept), so the interpreter reaches the kernel. Only this checking process
    is changed; the kernels are not."""
    import contextlib
    import types

    import torch
    from triton.runtime import autotuner

    if torch.cuda.is_available():
        return

    def run_once(kernel_call, quantiles=None, **_):  # the interpreter has no timer: every config ties
        kernel_call()
        return [0.0] * len(quantiles) if quantiles else 0.0

    autotuner.Autotuner.do_bench = property(lambda _self: run_once)  # type: ignore[assignment]
    # newer Triton rejects an autotune key that names no kernel argument; the device's Triton (3.6) drops it
    init = autotuner.Autotuner.__init__

    def init_dropping_unknown_keys(self, fn, arg_names, configs, key, *rest, **kw):
        init(self, fn, arg_names, configs, [k for k in key if k in arg_names], *rest, **kw)

    autotuner.Autotuner.__init__ = init_dropping_unknown_keys  # type: ignore[method-assign]
    # a launcher that asks Triton's driver for the SM count (flash-linear-attention) gets an H100's;
    # the backend stays "cpu", so the library still puts its tensors on the host
    from triton.runtime import driver

    props = {"multiprocessor_count": 132, "max_shared_mem": 232448, "warpSize": 32}
    host = types.SimpleNamespace(
        utils=types.SimpleNamespace(get_device_properties=lambda *_a: props),
        get_current_target=lambda: types.SimpleNamespace(backend="cpu", arch=0, warp_size=32),
    )
    driver.set_active(host)
    # libraries that pick `torch.<device>` by Triton's backend (flash-linear-attention) get torch.cpu
    torch.cpu.device = lambda *_a, **_k: contextlib.nullcontext()  # type: ignore[attr-defined]
    h100 = types.SimpleNamespace(
        name="interpreter (H100 stand-in)",
        multi_processor_count=132,
        warp_size=32,
        major=9,
        minor=0,
        total_memory=80 << 30,
    )
    torch.cuda.device = lambda *_a, **_k: contextlib.nullcontext()  # type: ignore[assignment]
    torch.cuda.get_device_properties = lambda *_a, **_k: h100  # type: ignore[assignment]
    torch.cuda.current_device = lambda: 0  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda *_a, **_k: (9, 0)  # type: ignore[assignment]


def one(lib: str, src: Path) -> list[dict]:
    """In this (fresh, interpreted) process: run every shrunk shape of `lib`'s config at `src`."""
    import torch

    host_device_calls()

    out = []
    for shape in config_shapes(lib, src):
        params = {k: TINY.get(k, v) for k, v in shape.params.items()}
        row = {"lib": lib, "shape": shape.key}
        try:
            inputs = shape.suite.make_inputs(params, "cpu", 0)
            got = shape.suite.output(shape.subject()(**inputs))
            want = shape.suite.reference(inputs).float()
            atol, rtol = shape.suite.tolerance(params)
            row["max_abs_err"] = float((got - want).abs().max())
            row["ok"] = bool(torch.allclose(got, want, atol=atol, rtol=rtol))
        except Exception as exc:  # noqa: BLE001 - a commit that does not run here is a finding too
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos", type=Path)
    ap.add_argument("--plan", type=Path)
    ap.add_argument("--lib", help="only this library's entries of the plan")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", nargs=2, metavar=("LIB", "SRC"), help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], Path(args.one[1]))))
        return 0
    plan = [p for p in json.loads(args.plan.read_text()) if args.lib in (None, p["lib"])]
    work = Path(tempfile.mkdtemp(prefix="real-interpret-"))
    rows: list[dict] = []
    for i, item in enumerate(plan):
        found = at_commit(
            args.repos,
            item,
            work,
            i,
            ["studies.real_interpret", "--one", item["lib"], "{src}"],
            env={"TRITON_INTERPRET": "1"},
            timeout=args.timeout,
        )
        if isinstance(found, str):
            found = [{"lib": item["lib"], "shape": "*", "error": found}]
        for row in found:
            row.update(sha=item["sha"], label=item.get("label", item["sha"][:8]))
            rows.append(row)
            verdict = (
                f"ERROR {row['error'][-200:]}"
                if "error" in row
                else f"{'ok' if row['ok'] else 'MISMATCH'} err {row['max_abs_err']:.3g}"
            )
            print(f"{row['lib']:10} {row['label']:12} {row['shape']:20} {verdict}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One trial: one fresh process, one (commit, suite), every shape of the suite.

    python -m benches.trial SPEC.json OUT.json

Per shape: random inputs from the trial's seed; the subject's first call timed apart (compile);
the subject's output checked against the control's; warm-up; `reps` interleaved subject/control
calls, each after a cache flush. OUT is rewritten after every shape, so a crash keeps what was
measured. The spec and output formats are in docs/CONTRACTS.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import traceback
from pathlib import Path
from typing import Any, Mapping

import torch

from benches import backends, machine, suites, telemetry
from benches.backends.base import Backend, BackendUnavailable
from benches.correctness import compare
from benches.suites.dtypes import TOLERANCES
from benches.timing import Clock, flush_bytes, peak_clock_ratio, tflops

JIT_ENV = ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR", "FLYDSL_RUNTIME_ENABLE_CACHE", "TRITON_INTERPRET")
TRACE_CHARS = 4000


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _cold(path: str | None) -> bool | None:
    """Whether a JIT cache dir was empty when the trial started: the evidence of a cold compile."""
    if not path:
        return None
    p = Path(path)
    return not p.exists() or not any(p.iterdir())


def protocol(spec: Mapping[str, Any], flush: int, clock_kind: str) -> dict[str, Any]:
    env = {k: os.environ[k] for k in JIT_ENV if k in os.environ}
    caches = {k: _cold(os.environ.get(k)) for k in ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR") if k in env}
    return {"reps": spec["reps"], "warmup": spec["warmup"], "seed": spec["seed"], "flush_bytes": flush,
            "timer": clock_kind, "order": "subject,control interleaved", "jit_env": env, "jit_cache_cold": caches,
            "subjects": subject_specs(spec), "control": spec["control"], "device": spec["device"]}


def subject_specs(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Suite -> subject. One process may measure several suites (saves an import of torch per suite)."""
    return dict(spec.get("subjects") or {spec["suite"]: spec["subject"]})


def measure_shape(shape: Mapping[str, Any], index: int, spec: Mapping[str, Any], clock: Clock,
                  subject: Backend, control: Backend | None) -> dict[str, Any]:
    suite = suites.get(shape["suite"])
    params = shape["params"]
    torch_device = "cpu" if spec["device"] == "cpu" else "cuda"
    flops = suite.flops(params)
    result: dict[str, Any] = {"shape": shape["key"], "status": "crash", "flops": flops, "seed": spec["seed"] + index}
    inputs = suite.make_inputs(params, torch_device, spec["seed"] + index)
    subj = subject.prepare(shape["suite"], inputs)
    ctrl = control.prepare(shape["suite"], inputs) if control is not None else None

    out, result["compile_s"] = clock.wall(subj.run)
    got = subj.output(out)
    if ctrl is not None:
        ref, result["control_first_s"] = clock.wall(ctrl.run)
        expected = ctrl.output(ref)
    else:
        expected = suite.reference(inputs)
    atol, rtol = (spec.get("tolerances") or {}).get(shape["suite"]) or TOLERANCES[params.get("dtype", "bf16")]
    check = compare(got, expected, atol, rtol)
    del out, got, expected
    result.update(max_abs_err=check.max_abs_err, max_rel_err=check.max_rel_err, mismatched=check.mismatched,
                  tolerance=[atol, rtol])

    fns = [subj.run] + ([ctrl.run] if ctrl is not None else [])
    for _ in range(spec["warmup"]):
        for fn in fns:
            fn()
    clock.sync()
    times = clock.interleaved(fns, spec["reps"])
    result["subject_ms"] = times[0]
    result["subject_tflops"] = statistics.median(tflops(flops, ms) for ms in times[0])
    if ctrl is not None:
        result["control_ms"] = times[1]
        result["ratios"] = [c / s if s > 0 else float("nan") for s, c in zip(times[0], times[1])]
        result["control_tflops"] = statistics.median(tflops(flops, ms) for ms in times[1])
        result["ratio_all_reps"] = statistics.median(result["ratios"])
        # GPUs throttle under power-bound kernels: keep the repetitions at full clock. On the CPU the
        # median of all repetitions was steadier (ratio CV 1.0-4.5% against 1.8-4.4%, 8+8 trials).
        result["ratio"] = result["ratio_all_reps"] if spec["device"] == "cpu" else peak_clock_ratio(times[0], times[1])
    result["status"] = "ok" if check.ok else "wrong"
    if not check.ok:
        result["error"] = check.describe(atol, rtol)
    return result


def run(spec: Mapping[str, Any], out_path: Path) -> dict[str, Any]:
    for d in reversed(spec.get("source_dirs", [])):
        sys.path.insert(0, d)
    device = spec["device"]
    output: dict[str, Any] = {"sha": spec.get("sha"), "suite": spec.get("suite"), "machine": {},
                              "protocol": {}, "telemetry": {"before": telemetry.read(device)}, "results": []}
    write_json(out_path, output)
    output["machine"] = machine.fingerprint(device)
    clock = Clock(device, flush_bytes(device, int(spec.get("flush_mb", 0))))
    output["protocol"] = protocol(spec, clock.flush_size, clock.kind)
    write_json(out_path, output)
    torch.manual_seed(spec["seed"])
    if device == "cpu":
        # One thread: on a small shared machine, intra-op threads waiting on each other were the
        # largest source of noise (per-repetition spread of +-25% at 2 threads on 2 cores).
        torch.set_num_threads(int(spec.get("cpu_threads", 1)))

    control: Backend | None = None
    subjects: dict[str, Backend | BackendUnavailable] = {}
    setup_error: tuple[str, str] | None = None
    try:
        control = backends.control(spec["control"], device)
    except BackendUnavailable as exc:
        setup_error = ("unavailable", str(exc))

    for index, shape in enumerate(spec["shapes"]):
        suite = shape["suite"]
        if setup_error is None and suite not in subjects:
            try:
                subjects[suite] = backends.subject(subject_specs(spec)[suite], device)
            except BackendUnavailable as exc:
                subjects[suite] = exc
        subject = subjects.get(suite)
        if setup_error is not None:
            result = {"shape": shape["key"], "status": setup_error[0], "error": setup_error[1]}
        elif isinstance(subject, BackendUnavailable):
            result = {"shape": shape["key"], "status": "unavailable", "error": str(subject)}
        else:
            assert subject is not None
            try:
                result = measure_shape(shape, index, spec, clock, subject, control)
            except BackendUnavailable as exc:
                result = {"shape": shape["key"], "status": "unavailable", "error": str(exc)}
            except Exception as exc:  # a broken kernel is a measurement, not a harness failure
                tb = traceback.format_exc()
                print(tb, file=sys.stderr, flush=True)
                result = {"shape": shape["key"], "status": "crash",
                          "error": f"{type(exc).__name__}: {exc}"[:TRACE_CHARS], "traceback": tb[-TRACE_CHARS:]}
        output["results"].append(result)
        write_json(out_path, output)
        print(f"trial: {shape['key']}: {result['status']}", file=sys.stderr, flush=True)
    output["telemetry"]["after"] = telemetry.read(device)
    write_json(out_path, output)
    return output


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m benches.trial SPEC.json OUT.json", file=sys.stderr)
        return 2
    try:
        spec = json.loads(Path(args[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read trial spec {args[0]}: {exc}", file=sys.stderr)
        return 2
    run(spec, Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

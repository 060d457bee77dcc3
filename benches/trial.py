"""One trial: one fresh process, one commit, every shape asked for.

    python -m benches.trial SPEC.json OUT.json        (or started ahead: benches.worker)

Setup first, off the device: the commit's modules, the backends, the device context. Then, with
the device held (the `gate`: the bot lets one trial per device in at a time), per shape: random
inputs from the trial's seed; the subject's first call timed apart (compile); its output checked
against the control's; warm-up; `reps` interleaved subject/control calls, each after a cache
flush. The device is given back before telemetry, the last write and the interpreter's exit.
Every phase is timestamped (`phases`), so the bot can say where a trial's time went and prove
that no two timed sections shared a device. OUT is rewritten after every shape, so a crash keeps
what was measured. The spec and output formats are in docs/CONTRACTS.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

import torch

from benches import backends, machine, suites, telemetry
from benches.backends.base import Backend, BackendUnavailable
from benches.correctness import compare
from benches.suites.dtypes import TOLERANCES
from benches.timing import Clock, flush_bytes, peak_clock_ratio, tflops

JIT_ENV = ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR", "FLYDSL_RUNTIME_ENABLE_CACHE", "TRITON_INTERPRET")
TRACE_CHARS = 4000


class Gate(Protocol):
    """The device, lent by the bot: `acquire` blocks until no other trial's device section runs there."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class OpenGate:
    """A trial run on its own (tests, `python -m benches.trial`): nothing to wait for."""

    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass


class Phases:
    """Wall-clock (epoch) spans of the trial's phases: [name, shape or None, start, end].

    Epoch time, not a monotonic clock, so that spans from different processes on one host can be
    laid side by side (two timed sections on one device must never overlap)."""

    def __init__(self) -> None:
        self.spans: list[list[Any]] = []

    @contextlib.contextmanager
    def __call__(self, name: str, shape: str | None = None) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self.spans.append([name, shape, start, time.time()])


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


def protocol(spec: Mapping[str, Any], flush: int, clock_kind: str, caches: Mapping[str, bool | None]) -> dict[str, Any]:
    env = {k: os.environ[k] for k in JIT_ENV if k in os.environ}
    triton = sys.modules.get("triton")
    used = {"triton_cache_dir": str(triton.knobs.cache.dir)} if triton is not None and hasattr(triton, "knobs") else {}
    return {"reps": spec["reps"], "warmup": spec["warmup"], "seed": spec["seed"], "flush_bytes": flush,
            "timer": clock_kind, "order": "subject,control interleaved", "jit_env": env,
            "jit_cache_cold": dict(caches), "subjects": subject_specs(spec), "control": spec["control"],
            "device": spec["device"], "pid": os.getpid(), **used}


def subject_specs(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Suite -> subject. One process may measure several suites (saves an import of torch per suite)."""
    return dict(spec.get("subjects") or {spec["suite"]: spec["subject"]})


def measure_shape(shape: Mapping[str, Any], index: int, spec: Mapping[str, Any], clock: Clock,
                  subject: Backend, control: Backend | None, phase: Phases) -> dict[str, Any]:
    suite = suites.get(shape["suite"])
    params, key = shape["params"], shape["key"]
    torch_device = "cpu" if spec["device"] == "cpu" else "cuda"
    flops = suite.flops(params)
    result: dict[str, Any] = {"shape": key, "status": "crash", "flops": flops, "seed": spec["seed"] + index}
    with phase("inputs", key):
        inputs = suite.make_inputs(params, torch_device, spec["seed"] + index)
        subj = subject.prepare(shape["suite"], inputs)
        ctrl = control.prepare(shape["suite"], inputs) if control is not None else None
        clock.sync()

    with phase("compile", key):
        out, result["compile_s"] = clock.wall(subj.run)
    with phase("check", key):
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
    with phase("warmup", key):
        for _ in range(spec["warmup"]):
            for fn in fns:
                fn()
        clock.sync()
    with phase("timed", key):
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


def _failure(key: str, exc: BaseException) -> dict[str, Any]:
    """A broken kernel is a measurement, not a harness failure: its shape records the error."""
    if isinstance(exc, BackendUnavailable):
        return {"shape": key, "status": "unavailable", "error": str(exc)}
    tb = "".join(traceback.format_exception(exc))
    return {"shape": key, "status": "crash", "error": f"{type(exc).__name__}: {exc}"[:TRACE_CHARS],
            "traceback": tb[-TRACE_CHARS:]}


def _load_subjects(spec: Mapping[str, Any], device: str) -> dict[str, Backend | BaseException]:
    """Every suite's subject, its modules imported now (off the device): suite -> backend or error."""
    out: dict[str, Backend | BaseException] = {}
    for suite, sub in subject_specs(spec).items():
        if suite not in {s["suite"] for s in spec["shapes"]}:
            continue
        try:
            backend = backends.subject(sub, device)
            load: Callable[[], Any] | None = getattr(backend, "load", None)
            if load is not None:
                load()
            out[suite] = backend
        except Exception as exc:  # the commit under test does not import: its shapes record why
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            out[suite] = exc
    return out


def _open_device(device: str) -> None:
    """Create the device context before queueing for the device: an allocation, no kernel."""
    if device != "cpu" and torch.cuda.is_available():
        torch.empty(1, device="cuda")


def run(spec: Mapping[str, Any], out_path: Path, gate: Gate | None = None) -> dict[str, Any]:
    gate = gate or OpenGate()
    phase = Phases()
    device = spec["device"]
    output: dict[str, Any] = {"sha": spec.get("sha"), "suite": spec.get("suite"), "machine": {},
                              "protocol": {}, "telemetry": {}, "results": [], "phases": phase.spans}
    caches = {k: _cold(os.environ.get(k)) for k in ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR")
              if k in os.environ}
    with phase("setup"):
        for d in reversed(spec.get("source_dirs", [])):
            sys.path.insert(0, d)
        write_json(out_path, output)
        output["telemetry"]["before"] = telemetry.read(device)
        output["machine"] = machine.fingerprint(device)
        torch.manual_seed(spec["seed"])
        if device == "cpu":
            # One thread: on a small shared machine, intra-op threads waiting on each other were the
            # largest source of noise (per-repetition spread of +-25% at 2 threads on 2 cores).
            torch.set_num_threads(int(spec.get("cpu_threads", 1)))
        control: Backend | None = None
        setup_error: dict[str, Any] | None = None
        try:
            control = backends.control(spec["control"], device)
        except BackendUnavailable as exc:
            setup_error = {"status": "unavailable", "error": str(exc)}
        subjects = _load_subjects(spec, device) if setup_error is None else {}
        _open_device(device)
        write_json(out_path, output)

    with phase("queue"):
        gate.acquire()
    try:
        with phase("device"):
            clock = Clock(device, flush_bytes(device, int(spec.get("flush_mb", 0))), spec.get("cpu_clock", "cpu"))
            output["protocol"] = protocol(spec, clock.flush_size, clock.kind, caches)
            for index, shape in enumerate(spec["shapes"]):
                subject = subjects.get(shape["suite"])
                if setup_error is not None:
                    result = {"shape": shape["key"], **setup_error}
                elif isinstance(subject, BaseException):
                    result = _failure(shape["key"], subject)
                else:
                    assert subject is not None
                    try:
                        result = measure_shape(shape, index, spec, clock, subject, control, phase)
                    except Exception as exc:
                        print(traceback.format_exc(), file=sys.stderr, flush=True)
                        result = _failure(shape["key"], exc)
                output["results"].append(result)
                write_json(out_path, output)
                print(f"trial: {shape['key']}: {result['status']}", file=sys.stderr, flush=True)
            del clock
    finally:
        gate.release()
    with phase("telemetry"):
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

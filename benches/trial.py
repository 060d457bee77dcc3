"""One trial: one fresh process, one commit, every shape asked for.

    python -m benches.trial SPEC.json OUT.json        (or started ahead: benches.worker)

Setup first, off the device: the commit's modules, the backends, the device context. Then, with
the device held (the `gate`: the bot lets one trial per device in at a time), per shape: random
inputs from the trial's seed; the subject's first call timed apart (compile), then the control's
(control_first_s: a library's JIT); the subject's output checked against the control's; warm-up;
`reps` interleaved subject/control calls, each after a cache flush. The device is given back before
telemetry, the last write and the interpreter's exit.
Every phase is timestamped (`phases`), so the bot can say where a trial's time went and prove
that no two timed sections shared a device. OUT is rewritten after every shape, so a crash keeps
what was measured. A control that cannot run a shape is the control's failure, never the subject's:
the subject is timed alone and the result says `control_status: unavailable` with the reason.
The spec and output formats are in docs/CONTRACTS.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from benches import allocator, backends, env_preload, first_call, import_trace, layout, machine, suites, telemetry
from benches.backends.base import Backend, BackendUnavailable
from benches.correctness import compare
from benches.kernel_time import CallTimes, KernelTimes
from benches.staging import (  # noqa: F401 - the setup's parts, also named as trial.<name> by their callers
    STAGING_RESERVE,
    TRACE_CHARS,
    WARMING_FLOOR,
    ControlFailed,
    Gate,
    OpenGate,
    Phases,
    Staged,
    _brought_control,
    _control_failure,
    _give_back_warming,
    _guarded,
    _precompiled,
    _stage_all,
    _stageable,
    briefly,
    captured,
    precompile,
    precompile_only,
    stage_shape,
    staging_choice,
    subject_specs,
)
from benches.suites.dtypes import TOLERANCES
from benches.timing import Clock, device_ratio, flush_bytes, tflops
from benches.warm_cache import wants_warm, warm_fields

DEFAULT_TOLERANCE = (1e-2, 1e-2)  # a brought suite's shape with no dtype the defaults know
AUTOTUNE_ENV = "TRITON_CACHE_AUTOTUNING"  # set by the bot where it keeps a commit's autotune choices
JIT_ENV = (
    "TRITON_CACHE_DIR",
    AUTOTUNE_ENV,
    "FLYDSL_RUNTIME_CACHE_DIR",
    "FLYDSL_RUNTIME_ENABLE_CACHE",
    "TRITON_INTERPRET",
)
AUTOTUNE_SUFFIX = ".autotune.json"  # Triton's name for a kernel's kept choices
LATENCY_BATCHES = 5  # latency batches per fn and shape (at most `reps`)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


Report = Callable[[Mapping[str, Any]], None]


def _save(path: Path, data: Mapping[str, Any], report: Report | None) -> None:
    """The output so far: to the bot's channel when there is one (what the bot reads: a file here
    is in a dir code under test may write), and to `path` for whoever reads the trial's dir."""
    if report is not None:
        report(json.loads(json.dumps(data, default=str)))
    try:
        write_json(path, data)
    except OSError:
        if report is None:
            raise


def _cold(path: str | None) -> bool | None:
    """Whether a JIT cache dir was empty when the trial started: the evidence of a cold compile."""
    if not path:
        return None
    p = Path(path)
    return not p.exists() or not any(p.iterdir())


def autotune_choices(cache_dir: str | None) -> int:
    """How many kept autotune choices the commit's Triton cache held (its own earlier trials'): a
    later trial that starts with some reuses them instead of tuning under the lock."""
    if not cache_dir or not os.path.isdir(cache_dir):
        return 0
    return sum(1 for _, _, names in os.walk(cache_dir) for n in names if n.endswith(AUTOTUNE_SUFFIX))


def protocol(spec: Mapping[str, Any], flush: int, clock_kind: str, caches: Mapping[str, bool | None]) -> dict[str, Any]:
    env = {k: os.environ[k] for k in JIT_ENV if k in os.environ}
    triton = sys.modules.get("triton")
    used = {"triton_cache_dir": str(triton.knobs.cache.dir)} if triton is not None and hasattr(triton, "knobs") else {}
    if env.get(AUTOTUNE_ENV) == "1":  # as the trial takes the device, before its compile there
        used["autotune_kept"] = autotune_choices(env.get("TRITON_CACHE_DIR"))
    return {
        "reps": spec["reps"],
        "warmup": spec["warmup"],
        "graph_reads": dict(spec.get("graph_reads", {})),
        "graph_heat_ms": dict(spec.get("graph_heat_ms", {})),
        "settle_ms": dict(spec.get("settle_ms", {})),
        "seed": spec["seed"],
        "flush_bytes": flush,
        "timer": clock_kind,
        "order": "subject,control interleaved",
        "jit_env": env,
        "jit_cache_cold": dict(caches),
        "subjects": subject_specs(spec),
        "control": spec["control"],
        "device": spec["device"],
        "pid": os.getpid(),
        **used,
    }


def tolerance(spec: Mapping[str, Any], name: str, suite: Any, params: Mapping[str, Any]) -> tuple[float, float]:
    """(atol, rtol): the config's for the suite, else the suite's own, else the dtype's default."""
    given = (spec.get("tolerances") or {}).get(name)
    if given:
        return float(given[0]), float(given[1])
    own = getattr(suite, "tolerance", None)
    if callable(own):
        atol, rtol = own(params)
        return float(atol), float(rtol)
    if name not in suites.SUITES and "dtype" not in params:
        return DEFAULT_TOLERANCE
    return TOLERANCES.get(str(params.get("dtype", "bf16")), DEFAULT_TOLERANCE)


def rate(amount: float | None, times: list[float], unit: float) -> float | None:
    """Median amount per second over the repetitions, in `unit`s (1e12: TFLOP/s, 1e9: GB/s)."""
    if not amount or not times:
        return None
    return statistics.median(amount / (ms * 1e-3) / unit if ms > 0 else float("nan") for ms in times)


def settled_first(spec: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """The shapes (with their index in the spec) in the order the device section times them: those
    with a settle first (config.Protocol.settle_ms), the others after, each group in the spec's
    order. First, a short kernel's settle overlaps the trial's compile, check and warm-up instead of
    idling the device after the heavy shapes (the H200 demo paid 200 ms a trial for its decode GEMM)."""
    settle = spec.get("settle_ms", {})
    shapes = list(enumerate(spec["shapes"]))
    return sorted(shapes, key=lambda item: float(settle.get(item[1]["key"], 0.0)) <= 0)


REREADS = 2  # GPU: reads of a shape's repetitions again when one was disturbed
REREAD_SPREAD = 1.3  # a side's slowest repetition this far over its median: a disturbed read


def spread(times: list[list[float]]) -> float:
    """The largest slowest-over-median of a read's sides: ~1.0-1.1 for a steady kernel, up to ~1.2
    for a power-bound GEMM that throttles within the read; a read with another process's kernels
    time-sliced in had calls at 1.4-3x (the 389-commit range's cold start on one H200)."""
    sides = [(max(t), statistics.median(t)) for t in times if t]
    return max((slowest / middle for slowest, middle in sides if middle > 0), default=1.0)


def _read_undisturbed(read: Callable[[], KernelTimes], rereads: int) -> KernelTimes:
    """`read()`, and up to `rereads` reads more while the last was disturbed (`spread` over
    REREAD_SPREAD); the steadiest is kept, the others ride along raw (`set_aside`). On one H200 the
    389-commit range's first trials read 2-3.5% off in their cold start (calls of 20 ms read 37-58 ms
    in two of them), and those pairs doubled: a read costs 0.1-0.4 s, a doubling 2 trials or more."""
    reads = [read()]
    while len(reads) <= rereads and spread(reads[-1].times) > REREAD_SPREAD:
        reads.append(read())
    best = min(reads, key=lambda k: spread(k.times))
    if len(reads) == 1:
        return best
    return replace(best, set_aside=tuple(k.times for k in reads if k is not best))


def _timed(
    fns: list[Callable[[], Any]], spec: Mapping[str, Any], clock: Clock, phase: Phases, key: str, latency: bool
) -> tuple[KernelTimes, CallTimes]:
    """Warm-up, the kernel times of `reps` interleaved repetitions, then the host's time per call and,
    where it matters (`latency`: the suite is decided on it, or the host's time is within reach of
    the kernel's), the latency of back-to-back calls."""
    with phase("warmup", key):
        host = clock.warm(fns, spec["warmup"])
    settle = float(spec.get("settle_ms", {}).get(key, 0.0))
    if settle > 0 and clock.gpu:  # the clock dip a heavy shape before left passes (config.Protocol.settle_ms)
        with phase("settle", key):
            clock.settle(settle)
    with phase("timed", key):
        kernel = _read_undisturbed(
            lambda: clock.kernel(
                fns,
                spec["reps"],
                int(spec.get("graph_reads", {}).get(key, 1)),
                float(spec.get("graph_heat_ms", {}).get(key, 0.0)),
                host,
            ),
            REREADS if clock.gpu else 0,
        )
    with phase("calls", key):
        calls = clock.calls(
            fns, kernel, min(int(spec.get("latency_batches", LATENCY_BATCHES)), spec["reps"]), host, always=latency
        )
    clock.worked()
    return kernel, calls


def measure_shape(
    shape: Mapping[str, Any],
    index: int,
    spec: Mapping[str, Any],
    clock: Clock,
    subject: Backend,
    control: Backend | None,
    phase: Phases,
    control_error: str | None = None,
    staged: Staged | None = None,
    checked: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One shape: the subject's result. The control is the reference it is timed against; when the
    control cannot run (refused, raised, or `control_error` from setup), the subject is timed alone,
    checked against the suite's reference, and the result says so (`control_status`), without a ratio.
    `staged`: inputs and first calls made before the device was taken; `checked`: shape key ->
    tolerance of the shapes whose output at this commit already passed the check in an earlier trial
    (the check is then skipped: once per commit and shape, not once per trial)."""
    name = shape["suite"]
    suite = suites.get(name)
    params, key = shape["params"], shape["key"]
    flops = suite.flops(params)
    nbytes = suite.bytes(params) if callable(getattr(suite, "bytes", None)) else None
    convert = getattr(suite, "output", None) if name not in suites.SUITES else None
    result: dict[str, Any] = {
        "shape": key,
        "status": "crash",
        "flops": flops,
        "bytes": nbytes,
        "seed": spec["seed"] + index,
    }
    if staged is None:
        with phase("inputs", key):
            staged = stage_shape(shape, index, spec, clock.sync, subject, control, control_error)
    result.update(staged.precompile)
    inputs, subj, ctrl, control_error = staged.inputs, staged.subj, staged.ctrl, staged.control_error
    result["input_page_offsets"] = layout.page_offsets(inputs)
    atol, rtol = tolerance(spec, name, suite, params)
    skip_check = checked is not None and list(checked.get(key) or ()) == [atol, rtol]

    with phase("compile", key), first_call.parts() as result["compile_parts"]:
        out, first_s = clock.wall(subj.run)
    result["compile_s"] = first_s + float(staged.precompile.get("precompile_s") or 0.0)
    expected: Any = None
    if ctrl is not None:
        # The control's first call apart, as the subject's: a library's JIT (aiter builds its modules
        # on first use) lands here, in control_first_s, not in the control's timed repetitions.
        with phase("control_compile", key):
            try:
                ref, result["control_first_s"] = clock.wall(ctrl.run)
                expected = None if skip_check else ctrl.output(ref)
                del ref
            except Exception as exc:  # noqa: BLE001 - any failure of the control's is recorded, not raised
                ctrl, control_error = None, _control_failure(exc, clock.sync)
    if skip_check:
        result.update(check="skipped: this commit's output passed in an earlier trial", tolerance=[atol, rtol])
        check = None
        del out
    else:
        with phase("check", key):
            got = subj.output(out)
            if ctrl is None:
                expected = suite.reference(inputs)
            if callable(convert):
                got, expected = convert(got), (convert(expected) if ctrl is not None else expected)
            check = compare(got, expected, atol, rtol)
            del out, got, expected
        result.update(
            check="done",
            max_abs_err=check.max_abs_err,
            max_rel_err=check.max_rel_err,
            mismatched=check.mismatched,
            tolerance=[atol, rtol],
        )

    latency = spec.get("timing", {}).get(name) == "latency"
    try:
        kernel, calls = _timed(
            [subj.run] + ([_guarded(ctrl.run)] if ctrl is not None else []), spec, clock, phase, key, latency
        )
    except ControlFailed as exc:
        ctrl, control_error = None, _control_failure(exc, clock.sync)
        kernel, calls = _timed([subj.run], spec, clock, phase, key, latency)
    if ctrl is not None and ctrl.impl:
        result["control_impl"] = ctrl.impl
    times = kernel.times
    result.update(call_fields(kernel, calls))
    if wants_warm(spec, name):  # the suite asked for the warm-cache time too (benches/warm_cache.py)
        with phase("timed", key):
            result.update(warm_fields(clock, [subj.run] + ([ctrl.run] if ctrl is not None else []), spec["reps"]))
    if control_error is not None:
        result.update(control_status="unavailable", control_error=control_error)
        print(f"trial: {key}: control unavailable: {control_error.splitlines()[0][:300]}", file=sys.stderr, flush=True)
    result["subject_ms"] = times[0]
    result["subject_tflops"] = statistics.median(tflops(flops, ms) for ms in times[0])
    result["subject_gbps"] = rate(nbytes, times[0], 1e9)
    if ctrl is not None:
        result["control_ms"] = times[1]
        result["ratios"] = [c / s if s > 0 else float("nan") for s, c in zip(times[0], times[1])]
        result["control_tflops"] = statistics.median(tflops(flops, ms) for ms in times[1])
        result["control_gbps"] = rate(nbytes, times[1], 1e9)
        result["ratio_all_reps"] = statistics.median(result["ratios"])
        # GPUs throttle under power-bound kernels: keep the repetitions at full clock. On the CPU the
        # median of all repetitions was steadier (ratio CV 1.0-4.5% against 1.8-4.4%, 8+8 trials).
        if spec["device"] == "cpu":
            result["ratio"] = result["ratio_all_reps"]
        else:
            result["ratio"], disturbed = device_ratio(times[0], times[1])
            if disturbed:  # the fastest calls' ratio: the repetitions were slowed one by one
                result["ratio_disturbed"] = True
    result["status"] = "ok" if check is None or check.ok else "wrong"
    if check is not None and not check.ok:
        result["error"] = check.describe(atol, rtol)
    return result


def call_fields(kernel: KernelTimes, calls: CallTimes) -> dict[str, Any]:
    """How the kernel times were taken, and latency and host time per call beside them (raw)."""
    out: dict[str, Any] = {
        "kernel_method": kernel.method,
        "latency_calls": calls.calls,
        **({"latency_start": calls.start} if calls.start else {}),
        "subject_latency_ms": calls.latency_ms[0],
        "subject_host_ms": calls.host_ms[0],
    }
    if kernel.fallback:
        out["kernel_fallback"] = kernel.fallback
    if kernel.heat_calls:
        out["graph_heat_calls"] = kernel.heat_calls
    if kernel.set_aside:  # the disturbed reads the kept one replaced, subject then control, raw
        out["disturbed_reads"] = [list(times) for times in kernel.set_aside]
    if kernel.faults:  # CPU: median minor page faults per timed call, subject then control
        out["timed_faults"] = [statistics.median(f) if f else None for f in kernel.faults]
    if len(calls.latency_ms) > 1:
        out["control_latency_ms"], out["control_host_ms"] = calls.latency_ms[1], calls.host_ms[1]
        pairs = [c / s for s, c in zip(calls.latency_ms[0], calls.latency_ms[1]) if s > 0 and c > 0]
        out["latency_ratio"] = statistics.median(pairs) if pairs else None
    return out


def _failure(key: str, exc: BaseException) -> dict[str, Any]:
    """A broken kernel is a measurement, not a harness failure: its shape records the error."""
    if isinstance(exc, BackendUnavailable):
        return {"shape": key, "status": "unavailable", "error": str(exc)}
    tb = "".join(traceback.format_exception(exc))
    return {
        "shape": key,
        "status": "crash",
        "error": f"{type(exc).__name__}: {exc}"[:TRACE_CHARS],
        "traceback": tb[-TRACE_CHARS:],
    }


def _load_suites(spec: Mapping[str, Any]) -> dict[str, BaseException]:
    """Import the brought suites (`suite_modules`) now, off the device: suite -> error for those that fail."""
    failed: dict[str, BaseException] = {}
    for name, ref in (spec.get("suite_modules") or {}).items():
        try:
            suites.load(name, ref["module"], ref.get("path"))
        except Exception as exc:  # noqa: BLE001 - the suite does not import here: its shapes record why
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            failed[name] = BackendUnavailable("suite", str(exc)) if isinstance(exc, suites.SuiteUnavailable) else exc
    return failed


def _load_subjects(spec: Mapping[str, Any], device: str) -> dict[str, Backend | BaseException]:
    """Every suite's subject, its modules imported now (off the device): suite -> backend or error.
    A pytest subject has no backend: its session runs with the device held."""
    out: dict[str, Backend | BaseException] = dict(_load_suites(spec))
    for suite, sub in subject_specs(spec).items():
        if suite not in {s["suite"] for s in spec["shapes"]} or suite in out or sub.get("adapter") == "pytest":
            continue
        try:
            backend = backends.subject(sub, device)
            load: Callable[[], Any] | None = getattr(backend, "load", None)
            if load is not None:
                load()
            out[suite] = backend
        except Exception as exc:  # noqa: BLE001 - the commit under test does not import: its shapes record why
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            out[suite] = exc
    return out


def _pytest_shapes(
    shape: Mapping[str, Any], spec: Mapping[str, Any], out_path: Path, phase: Phases, timer: str
) -> list[dict[str, Any]]:
    """Every shape of `shape`'s pytest suite, from one session (benches/pytest_bench.py)."""
    from benches import pytest_bench

    name = shape["suite"]
    group = [s for s in spec["shapes"] if s["suite"] == name]
    with phase("pytest", name):
        try:
            return pytest_bench.measure(
                group,
                subject_specs(spec)[name],
                spec["source_dirs"][0],
                out_path.parent,
                spec["reps"],
                spec["warmup"],
                str(spec.get("sha", "")),
                timer,
            )
        except Exception as exc:  # noqa: BLE001 - code under test may raise anything; its shapes record it
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            return [_failure(s["key"], exc) for s in group]


def _checked(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Shape key -> tolerance of the shapes whose output at this commit passed the check in an
    earlier trial: the bot writes that file as it stores each trial, and the trial reads it with the
    device held (the commit's first trial has released it by then)."""
    path = spec.get("checked_path")
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


OOM_RETRIES = 2  # a shape measured again after running out of device memory
OOM_WAIT_S = 2.0


def _measured(
    shape: Mapping[str, Any],
    index: int,
    spec: Mapping[str, Any],
    clock: Clock,
    subject: Backend,
    control: Backend | None,
    phase: Phases,
    control_error: str | None,
    staged: Staged | None,
    checked: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """`measure_shape`, or the failure it raised. A CUDA out-of-memory error is tried again (after
    OOM_WAIT_S, staged afresh) up to OOM_RETRIES times: other trials set up ahead hold device memory,
    and one that staged past the reserve gives it back within seconds (`_stage_all`); a commit that
    needs more than the device has fails every time, as before."""
    for attempt in range(OOM_RETRIES + 1):
        try:
            return measure_shape(shape, index, spec, clock, subject, control, phase, control_error, staged, checked)
        except Exception as exc:  # noqa: BLE001 - code under test may raise anything; the shape records it
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            if not (isinstance(exc, torch.cuda.OutOfMemoryError) and attempt < OOM_RETRIES):
                return _failure(shape["key"], exc)
        # out of the except block: the failed attempt's frames, and the tensors they held, are gone
        staged = None
        with phase("oom_wait", shape["key"]):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            time.sleep(OOM_WAIT_S)
    raise AssertionError("unreachable")


def _add_warming(result: dict[str, Any], how: Mapping[str, Any] | None) -> None:
    """A shape warmed in the setup and staged again under the lock: its first calls were the
    warming's, so its compile counts them (as a precompiled shape's does)."""
    if not how:
        return
    result.update(how)
    if isinstance(result.get("compile_s"), (int, float)):
        result["compile_s"] += float(how.get("precompile_s") or 0.0)


def _cold_at_compile(
    at_start: Mapping[str, bool | None],
    staged: Mapping[str, Staged],
    warmed: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, bool | None]:
    """Whether each JIT cache was empty when this trial compiled: at its start where it compiled
    in its setup (a captured first call), else now, with the device held. A trial set up while its
    commit's first trial still waited for the device (a standby's companion, bisector/measure/warmer.py)
    found the cache empty at its start and compiles only after that first trial filled it."""
    made = [one.precompile for one in staged.values()] + list((warmed or {}).values())
    if any(str(how.get("precompile", "")).replace("warmed, given back: ", "").startswith("captured") for how in made):
        return dict(at_start)
    return {k: v and _cold(os.environ.get(k)) for k, v in at_start.items()}


def _open_device(device: str) -> None:
    """Create the device context before queueing for the device: an allocation, no kernel."""
    if device != "cpu" and torch.cuda.is_available():
        torch.empty(1, device="cuda")


def run(
    spec: Mapping[str, Any], out_path: Path, gate: Gate | None = None, report: Report | None = None
) -> dict[str, Any]:
    """Run the trial of `spec`; its output is written to `out_path` as it grows and, with
    `report`, handed to it each time (benches/worker.py sends it on the bot's socket)."""
    gate = gate or OpenGate()
    phase = Phases()
    device = spec["device"]
    output: dict[str, Any] = {
        "sha": spec.get("sha"),
        "suite": spec.get("suite"),
        "machine": {},
        "protocol": {},
        "telemetry": {},
        "results": [],
        "phases": phase.spans,
    }
    caches = {k: _cold(os.environ.get(k)) for k in ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR") if k in os.environ}
    trace = import_trace.ImportTrace(spec.get("source_dirs", []))  # what this trial imports, from here on
    with phase("setup"):
        _save(out_path, output, report)
        with phase("machine"):  # the parts of a setup, timed: what keeps a trial from the device
            output["telemetry"]["before"] = telemetry.read(device)
            output["machine"] = machine.fingerprint(device)
        torch.manual_seed(spec["seed"])
        if device == "cpu":
            # One thread: on a small shared machine, intra-op threads waiting on each other were the
            # largest source of noise (per-repetition spread of +-25% at 2 threads on 2 cores).
            torch.set_num_threads(int(spec.get("cpu_threads", 1)))
        control: Backend | None = None
        control_error: str | None = None
        try:
            with phase("control_load"):
                if any(s["suite"] in suites.SUITES for s in spec["shapes"]):
                    control = backends.control(spec["control"], device)
        except Exception as exc:  # noqa: BLE001 - the control's: the built-in suites' subjects are timed alone and say why
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            control_error = str(exc) if isinstance(exc, BackendUnavailable) else f"{type(exc).__name__}: {exc}"
        # The checkout goes on sys.path only now: the control's imports resolve to the installed
        # library (and never to a package of the commit under test, e.g. aiter's FlyDSL).
        for d in reversed(spec.get("source_dirs", [])):
            sys.path.insert(0, d)
        with phase("subjects_load"):
            subjects = _load_subjects(spec, device)
        with phase("context"):
            _open_device(device)
        warmed: dict[str, dict[str, Any]] = {}
        staged = _stage_all(spec, subjects, control, control_error, phase, gate, warmed)
        # after every import and input: the malloc regime is the trial's, not its history's
        pinned = allocator.pin() if device == "cpu" else {}
        _save(out_path, output, report)
    if spec.get("precompile_only"):  # a prefetch: compiled cold, never takes the device
        output["protocol"] = {
            "precompile_only": True,
            "jit_cache_cold": dict(caches),
            "device": device,
            "pid": os.getpid(),
        }
        output["results"] = precompile_only(spec, subjects, control, control_error, staged, phase, warmed)
        output["protocol"]["imported"] = trace.look()
        _save(out_path, output, report)
        if staged:  # its inputs and captures unmapped in a brief loan, not beside a timed section at exit
            staged.clear()
            with briefly(gate, phase, name="unmap"):
                torch.cuda.empty_cache()
        return output

    with phase("imports"):  # read before the device is taken: the look after it reads only what is new
        trace.look()
    with phase("queue"):
        only = gate.acquire().get("shapes")
    # the shapes this trial times: all, or those the grant names (each keeps its index, its inputs' seed)
    wanted = set(only) if only is not None else {s["key"] for s in spec["shapes"]}
    try:
        with phase("device"):
            clock = Clock(device, flush_bytes(device, int(spec.get("flush_mb", 0))), spec.get("cpu_clock", "cpu"))
            output["protocol"] = protocol(spec, clock.flush_size, clock.kind, _cold_at_compile(caches, staged, warmed))
            if only is not None:  # set up for more shapes than it was asked to time
                output["protocol"]["granted_shapes"] = list(only)
            if pinned:
                output["protocol"]["malloc_pinned"] = pinned
            peak = machine.device_peak_gbps(device)
            checked = _checked(spec)
            measured: set[str] = set()
            for index, shape in settled_first(spec):
                if shape["key"] in measured or shape["key"] not in wanted:
                    continue
                subject = subjects.get(shape["suite"])
                if isinstance(subject, BaseException):
                    results = [_failure(shape["key"], subject)]
                elif subject_specs(spec)[shape["suite"]].get("adapter") == "pytest":
                    results = _pytest_shapes(shape, spec, out_path, phase, clock.host_timer)
                else:
                    assert subject is not None
                    results = [
                        _measured(
                            shape,
                            index,
                            spec,
                            clock,
                            subject,
                            control,
                            phase,
                            control_error if shape["suite"] in suites.SUITES else None,
                            staged.pop(shape["key"], None),
                            checked,
                        )
                    ]
                    _add_warming(results[0], warmed.get(shape["key"]))
                for result in results:
                    if peak and result.get("subject_gbps") is not None:
                        result["peak_gbps"] = peak
                    measured.add(result["shape"])
                    output["results"].append(result)
                    print(f"trial: {result['shape']}: {result['status']}", file=sys.stderr, flush=True)
                _save(out_path, output, report)
            del clock
            staged.clear()
            if device == "cuda":
                # The trial's memory unmapped while it still holds the device: unmapping slows
                # another process's kernels (studies/results/h200-setup-parts.txt), and the next
                # trial is lent the device only once this process has ended (runner/executor.py).
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    finally:
        gate.release()
    with phase("telemetry"):
        output["telemetry"]["after"] = telemetry.read(device)
    with phase("imports_after"):
        # the checkout's files this process loaded: the hunk search sets the others aside
        output["protocol"]["imported"] = trace.look()
        # what it imported from the environment: the bot's zygote imports it once for later trials
        output["protocol"]["env_imports"] = env_preload.reported(trace.env_modules)
    _save(out_path, output, report)
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

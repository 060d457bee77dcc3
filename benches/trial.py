"""One trial: one fresh process, one commit, every shape asked for.

    python -m benches.trial SPEC.json OUT.json        (or started ahead: benches.worker)

Setup first, off the device: the commit's modules, the backends, the device context. Then, with
the device held (the `gate`: the bot lets one trial per device in at a time), per shape: random
inputs from the trial's seed; the subject's first call timed apart (compile), then the control's
(control_first_s: a library's JIT); the subject's output checked against the control's; warm-up;
`reps` interleaved subject/control calls, each after a cache flush. The device is given back before telemetry, the last write and the interpreter's exit.
Every phase is timestamped (`phases`), so the bot can say where a trial's time went and prove
that no two timed sections shared a device. OUT is rewritten after every shape, so a crash keeps
what was measured. A control that cannot run a shape is the control's failure, never the subject's:
the subject is timed alone and the result says `control_status: unavailable` with the reason.
The spec and output formats are in docs/CONTRACTS.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

import torch

from benches import allocator, backends, import_trace, layout, machine, suites, telemetry
from benches.backends.base import Backend, BackendUnavailable, Prepared, prepared
from benches.correctness import compare
from benches.kernel_time import CallTimes, KernelTimes, rng_kept_on_failure
from benches.suites.dtypes import TOLERANCES
from benches.timing import Clock, device_ratio, flush_bytes, tflops
from benches.warm_cache import warm_fields, wants_warm

DEFAULT_TOLERANCE = (1e-2, 1e-2)  # a brought suite's shape with no dtype the defaults know
JIT_ENV = ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR", "FLYDSL_RUNTIME_ENABLE_CACHE", "TRITON_INTERPRET")
TRACE_CHARS = 4000
LATENCY_BATCHES = 5  # latency batches per fn and shape (at most `reps`)


class Gate(Protocol):
    """The device, lent by the bot: `acquire` blocks until no other trial's device section runs there.
    `brief`: a short loan in the middle of the setup (the inputs drawn), given back while the process
    goes on; the bot lends the device on at once, not when the process has ended. `acquire` returns
    the grant: its `shapes`, when present, are the only ones the device section times (a trial set
    up ahead for all its shapes, asked for a few of them; bisector/measure/warmer.py `take`)."""

    def acquire(self, brief: bool = False) -> Mapping[str, Any]: ...

    def release(self, brief: bool = False) -> None: ...


class OpenGate:
    """A trial run on its own (tests, `python -m benches.trial`): nothing to wait for."""

    def acquire(self, brief: bool = False) -> Mapping[str, Any]:
        return {}

    def release(self, brief: bool = False) -> None:
        pass


@contextlib.contextmanager
def briefly(gate: Gate, phase: "Phases", sync: Callable[[], None] = lambda: torch.cuda.synchronize(),
            name: str = "staging") -> Iterator[None]:
    """The device held for a setup's kernels (its inputs drawn), its work finished before it is given
    back. Why: on the H200 another process's input draws (random fills, kernels time-sliced with the
    timed ones) made attention read 60% slow and a square GEMM 2x slow for as long as they ran; its
    allocations alone 1% (studies/results/h200-setup-overlap.txt, `fill` / `alloc`).
    `name`: the phase the loan is recorded as (queued for as "queue_" + name)."""
    with phase(f"queue_{name}"):
        gate.acquire(brief=True)
    try:
        with phase(name):
            yield
            sync()
    finally:
        gate.release(brief=True)


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


def protocol(spec: Mapping[str, Any], flush: int, clock_kind: str, caches: Mapping[str, bool | None]) -> dict[str, Any]:
    env = {k: os.environ[k] for k in JIT_ENV if k in os.environ}
    triton = sys.modules.get("triton")
    used = {"triton_cache_dir": str(triton.knobs.cache.dir)} if triton is not None and hasattr(triton, "knobs") else {}
    return {"reps": spec["reps"], "warmup": spec["warmup"], "graph_reads": dict(spec.get("graph_reads", {})),
            "graph_heat_ms": dict(spec.get("graph_heat_ms", {})), "settle_ms": dict(spec.get("settle_ms", {})),
            "seed": spec["seed"], "flush_bytes": flush,
            "timer": clock_kind, "order": "subject,control interleaved", "jit_env": env,
            "jit_cache_cold": dict(caches), "subjects": subject_specs(spec), "control": spec["control"],
            "device": spec["device"], "pid": os.getpid(), **used}


def subject_specs(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Suite -> subject. One process may measure several suites (saves an import of torch per suite)."""
    return dict(spec.get("subjects") or {spec["suite"]: spec["subject"]})


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


def _brought_control(name: str, suite: Any, inputs: Mapping[str, Any]) -> Prepared | None:
    """A brought suite's own control (`control(inputs) -> callable`), if it has one."""
    make = getattr(suite, "control", None)
    if not callable(make):
        return None
    return prepared(make(inputs), impl=f"suite {name}: control()")


class ControlFailed(Exception):
    """The control raised while timed: the control's failure, never the subject's."""


def _guarded(run: Callable[[], Any]) -> Callable[[], Any]:
    def guarded() -> Any:
        try:
            return run()
        except Exception as exc:
            raise ControlFailed(f"{type(exc).__name__}: {exc}") from exc
    return guarded


def _control_failure(exc: BaseException, sync: Callable[[], None]) -> str:
    """Why the control failed; the exception again when the device itself no longer answers (a fault
    the subject left behind surfaces in the next call, whoever makes it: that is the subject's crash)."""
    print(traceback.format_exc(), file=sys.stderr, flush=True)
    try:
        sync()
    except Exception:
        raise exc from None
    cause = exc.__cause__ if isinstance(exc, ControlFailed) and exc.__cause__ is not None else exc
    return (str(cause) if isinstance(cause, BackendUnavailable) else f"{type(cause).__name__}: {cause}")[:TRACE_CHARS]


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


def _timed(fns: list[Callable[[], Any]], spec: Mapping[str, Any], clock: Clock, phase: Phases,
           key: str, latency: bool) -> tuple[KernelTimes, CallTimes]:
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
        kernel = _read_undisturbed(lambda: clock.kernel(fns, spec["reps"], int(spec.get("graph_reads", {}).get(key, 1)),
                                                        float(spec.get("graph_heat_ms", {}).get(key, 0.0)), host),
                                   REREADS if clock.gpu else 0)
    with phase("calls", key):
        calls = clock.calls(fns, kernel, min(int(spec.get("latency_batches", LATENCY_BATCHES)), spec["reps"]),
                            host, always=latency)
    clock.worked()
    return kernel, calls


@dataclass(frozen=True)
class Staged:
    """One shape's inputs and prepared calls, made before the device is taken where possible."""

    inputs: Mapping[str, Any]
    subj: Prepared
    ctrl: Prepared | None
    control_error: str | None
    precompile: dict[str, Any] = field(default_factory=dict)  # how the first calls went off the device
    graphs: tuple[Any, ...] = ()  # the precompile's captures, held until the device section (`precompile`)


def stage_shape(shape: Mapping[str, Any], index: int, spec: Mapping[str, Any], clock_sync: Callable[[], None],
                subject: Backend, control: Backend | None, control_error: str | None) -> Staged:
    """Random inputs from the trial's seed and both backends' prepared calls (nothing timed)."""
    name = shape["suite"]
    suite = suites.get(name)
    inputs = suite.make_inputs(shape["params"], "cpu" if spec["device"] == "cpu" else "cuda", spec["seed"] + index)
    subj = subject.prepare(name, inputs)
    ctrl: Prepared | None = None
    try:
        if name in suites.SUITES:
            ctrl = control.prepare(name, inputs) if control is not None else None
        else:
            ctrl = _brought_control(name, suite, inputs)
    except Exception as exc:  # the control's, not the subject's
        control_error = _control_failure(exc, clock_sync)
    clock_sync()
    return Staged(inputs, subj, ctrl, control_error)


def precompile(staged: Staged, pool: Any = None) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The first calls of subject and control, captured into a CUDA graph that is never replayed:
    the JIT compile or cache load, the module load, a library's plan (cuDNN, cuBLAS handles) all
    happen on the host while no kernel runs on the device, so this may overlap another trial's timed
    section (studies/precompile_overlap.py measured the captures themselves not to disturb it). A call that cannot
    be captured (it synchronizes, autotunes, copies from the host) is left to the first call under
    the device lock, as before; the reason is kept.

    Captured with capture_begin/capture_end into `pool` (one for the trial's captures), not
    `torch.cuda.graph`: that context empties the allocator's cache on entry, and each capture then
    unmapped the previous one's outputs while another trial was timed; unmapping slows another
    process's kernels (studies/results/h200-setup-parts.txt), and the trials far off their build's
    median had a precompile overlapping their timed section 2-3x as often as the others (H200
    demo stores; studies/setup_steps.py). The graphs are returned, to be dropped under
    the device lock, where the trial's memory is unmapped."""
    start = time.perf_counter()
    stream = torch.cuda.Stream()
    pool = pool if pool is not None else torch.cuda.graph_pool_handle()
    done, graphs = [], []
    try:
        for who, prep in (("subject", staged.subj), ("control", staged.ctrl)):
            if prep is None:
                continue
            graphs.append(captured(prep.run, stream, pool))
            done.append(who)
        status = "captured"
    except Exception as exc:  # noqa: BLE001 - anything uncapturable runs under the lock instead
        why = str(exc).strip().splitlines()
        status = f"not captured ({', '.join(done) or 'nothing'} done): {type(exc).__name__}: {why[0][:200] if why else ''}"
        torch.cuda.synchronize()  # a context the capture broke raises here: the trial crashes, as it would have
    return {"precompile": status, "precompile_s": round(time.perf_counter() - start, 6)}, tuple(graphs)


def captured(fn: Callable[[], Any], stream: Any, pool: Any) -> Any:
    """`fn` captured into a new graph on `stream` from `pool` (relaxed: a library's lazy setup on
    another stream does not end the capture); its outputs freed back to the pool at once."""
    graph = torch.cuda.CUDAGraph()
    stream.wait_stream(torch.cuda.current_stream())
    with rng_kept_on_failure(), torch.cuda.stream(stream):
        graph.capture_begin(pool=pool, capture_error_mode="relaxed")
        try:
            fn()
        finally:
            graph.capture_end()
    return graph


def measure_shape(shape: Mapping[str, Any], index: int, spec: Mapping[str, Any], clock: Clock,
                  subject: Backend, control: Backend | None, phase: Phases,
                  control_error: str | None = None, staged: Staged | None = None,
                  checked: Mapping[str, Any] | None = None) -> dict[str, Any]:
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
    result: dict[str, Any] = {"shape": key, "status": "crash", "flops": flops, "bytes": nbytes,
                              "seed": spec["seed"] + index}
    if staged is None:
        with phase("inputs", key):
            staged = stage_shape(shape, index, spec, clock.sync, subject, control, control_error)
    result.update(staged.precompile)
    inputs, subj, ctrl, control_error = staged.inputs, staged.subj, staged.ctrl, staged.control_error
    result["input_page_offsets"] = layout.page_offsets(inputs)
    atol, rtol = tolerance(spec, name, suite, params)
    skip_check = checked is not None and list(checked.get(key) or ()) == [atol, rtol]

    with phase("compile", key):
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
            except Exception as exc:
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
        result.update(check="done", max_abs_err=check.max_abs_err, max_rel_err=check.max_rel_err,
                      mismatched=check.mismatched, tolerance=[atol, rtol])

    latency = spec.get("timing", {}).get(name) == "latency"
    try:
        kernel, calls = _timed([subj.run] + ([_guarded(ctrl.run)] if ctrl is not None else []), spec, clock, phase,
                               key, latency)
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
    out: dict[str, Any] = {"kernel_method": kernel.method, "latency_calls": calls.calls,
                           "subject_latency_ms": calls.latency_ms[0], "subject_host_ms": calls.host_ms[0]}
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
    return {"shape": key, "status": "crash", "error": f"{type(exc).__name__}: {exc}"[:TRACE_CHARS],
            "traceback": tb[-TRACE_CHARS:]}


def _load_suites(spec: Mapping[str, Any]) -> dict[str, BaseException]:
    """Import the brought suites (`suite_modules`) now, off the device: suite -> error for those that fail."""
    failed: dict[str, BaseException] = {}
    for name, ref in (spec.get("suite_modules") or {}).items():
        try:
            suites.load(name, ref["module"], ref.get("path"))
        except Exception as exc:  # the suite does not import here: its shapes record why
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
        except Exception as exc:  # the commit under test does not import: its shapes record why
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            out[suite] = exc
    return out


def _pytest_shapes(shape: Mapping[str, Any], spec: Mapping[str, Any], out_path: Path, phase: Phases,
                   timer: str) -> list[dict[str, Any]]:
    """Every shape of `shape`'s pytest suite, from one session (benches/pytest_bench.py)."""
    from benches import pytest_bench

    name = shape["suite"]
    group = [s for s in spec["shapes"] if s["suite"] == name]
    with phase("pytest", name):
        try:
            return pytest_bench.measure(group, subject_specs(spec)[name], spec["source_dirs"][0], out_path.parent,
                                        spec["reps"], spec["warmup"], str(spec.get("sha", "")), timer)
        except Exception as exc:
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            return [_failure(s["key"], exc) for s in group]


def _stageable(spec: Mapping[str, Any], subjects: Mapping[str, Backend | BaseException],
               shape: Mapping[str, Any]) -> Backend | None:
    """The shape's subject when its calls can be made before the device is taken: it imported, and
    it is not a pytest session (that one runs whole, with the device held)."""
    subject = subjects.get(shape["suite"])
    if subject is None or isinstance(subject, BaseException) \
            or subject_specs(spec)[shape["suite"]].get("adapter") == "pytest":
        return None
    return subject


STAGING_RESERVE = 0.3  # share of the device's memory a setup leaves free for the trial that measures


def _stage_all(spec: Mapping[str, Any], subjects: Mapping[str, Backend | BaseException], control: Backend | None,
               control_error: str | None, phase: Phases, gate: Gate) -> dict[str, Staged]:
    """On a GPU, before the trial's device section: every shape's inputs and prepared calls, drawn in
    one brief loan of the device (`briefly`), then the first calls precompiled (`precompile`: captured,
    off the device), so that the device section holds timed work. A shape that fails here is staged
    again under the lock, where its failure is recorded as before.

    Only while the device has `staging_reserve` of its memory free (STAGING_RESERVE): the trials set up
    ahead each hold their staged shapes until their turn, and on one H100 (80 GB) eleven of the H200
    demo's six-shape trials held 6.3 GiB each, so the one measuring ran out of memory, and two real
    commits were skipped as if they did not run. A shape over that line is staged in the device section
    (a "deferred" phase says so), where the trials waiting hold only what they staged before. 30%: the
    measuring trial's own ~8 GiB there, and the captures of setups that passed the line just before."""
    staged: dict[str, Staged] = {}
    if spec["device"] == "cpu" or not spec.get("precompile", True) or not torch.cuda.is_available():
        return staged
    drawn: dict[str, Staged] = {}
    stageable = [(index, shape, subject) for index, shape in enumerate(spec["shapes"])
                 if (subject := _stageable(spec, subjects, shape)) is not None]
    if not stageable:
        return staged
    reserve = float(spec.get("staging_reserve", STAGING_RESERVE))
    with briefly(gate, phase):  # the inputs' kernels never run beside another trial's timed section
        for index, shape, subject in stageable:
            free, total = torch.cuda.mem_get_info()
            if free < reserve * total:  # left to the device section, staged there when its turn comes
                with phase("deferred", shape["key"]):
                    print(f"trial: {shape['key']}: staged under the lock: {free / 2**30:.1f} of {total / 2**30:.1f}"
                          f" GiB free, under the {reserve:.0%} kept for the trial that measures", file=sys.stderr, flush=True)
                continue
            with phase("inputs", shape["key"]):
                try:
                    drawn.setdefault(shape["key"], stage_shape(
                        shape, index, spec, torch.cuda.synchronize, subject, control,
                        control_error if shape["suite"] in suites.SUITES else None))
                except Exception:  # noqa: BLE001 - measured again under the lock, which records the failure
                    print(traceback.format_exc(), file=sys.stderr, flush=True)
                    torch.cuda.synchronize()
    staged = _precompiled(drawn, phase)
    drawn.clear()
    free, total = torch.cuda.mem_get_info()
    if staged and free < reserve * total:
        # setups that passed the line together took the device under it (their captures allocate after
        # the line is read): the last to see that gives its shapes back, to be staged under the lock
        print(f"trial: staged shapes given back: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free after staging",
              file=sys.stderr, flush=True)
        for key in staged:
            with phase("unstaged", key):
                pass
        staged.clear()  # the last references to their inputs and captures: `_precompiled` keeps none
        with briefly(gate, phase, name="unmap"):  # unmapped in a loan, not beside another trial's timed section
            torch.cuda.empty_cache()
    return staged


def _precompiled(drawn: Mapping[str, Staged], phase: Phases) -> dict[str, Staged]:
    """Each drawn shape with its first calls captured (`precompile`), in one graph pool: captures only,
    no kernel runs, the device is not held. A function of its own so that no loop variable outlives it
    holding a shape's tensors, which `_stage_all` may give back."""
    pool = torch.cuda.graph_pool_handle()  # one for every capture: each reuses what the one before freed
    staged: dict[str, Staged] = {}
    for key, one in drawn.items():
        with phase("precompile", key):
            try:
                how, graphs = precompile(one, pool)
                staged[key] = replace(one, precompile=how, graphs=graphs)
            except Exception:  # noqa: BLE001 - measured again under the lock, which records the failure
                print(traceback.format_exc(), file=sys.stderr, flush=True)
                torch.cuda.synchronize()
    return staged


def precompile_only(spec: Mapping[str, Any], subjects: Mapping[str, Backend | BaseException],
                    control: Backend | None, control_error: str | None, staged: Mapping[str, Staged],
                    phase: Phases) -> list[dict[str, Any]]:
    """A prefetch's trial (`"precompile_only": true`, bisector/measure/warmer.py): the commit's cold
    compile into its JIT dir and nothing else; the device is never asked for. On a GPU what
    `_stage_all` captured; on the CPU, where nothing is captured, the first calls themselves."""
    out: list[dict[str, Any]] = []
    for index, shape in enumerate(spec["shapes"]):
        key, subject, stageable = shape["key"], subjects.get(shape["suite"]), _stageable(spec, subjects, shape)
        one = staged.get(key)
        try:
            if one is None and spec["device"] == "cpu" and stageable is not None:
                with phase("precompile", key):
                    one = stage_shape(shape, index, spec, lambda: None, stageable, control,
                                      control_error if shape["suite"] in suites.SUITES else None)
                    start = time.perf_counter()
                    for prep in (one.subj, one.ctrl):
                        if prep is not None:
                            prep.run()
                    one = replace(one, precompile={"precompile": "first calls (cpu)",
                                                   "precompile_s": round(time.perf_counter() - start, 6)})
        except Exception as exc:  # noqa: BLE001 - the real trial records the failure
            out.append({"shape": key, "status": "not precompiled", "error": f"{type(exc).__name__}: {exc}"[:TRACE_CHARS]})
            continue
        if one is None:
            why = subject if isinstance(subject, BaseException) else "nothing staged (pytest, or staging failed)"
            out.append({"shape": key, "status": "not precompiled", "error": str(why)[:TRACE_CHARS]})
        else:
            out.append({"shape": key, "status": "precompiled", **one.precompile,
                        "compile_s": one.precompile.get("precompile_s")})
    return out


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


def _measured(shape: Mapping[str, Any], index: int, spec: Mapping[str, Any], clock: Clock, subject: Backend,
              control: Backend | None, phase: Phases, control_error: str | None, staged: Staged | None,
              checked: Mapping[str, Any] | None) -> dict[str, Any]:
    """`measure_shape`, or the failure it raised. A CUDA out-of-memory error is tried again (after
    OOM_WAIT_S, staged afresh) up to OOM_RETRIES times: other trials set up ahead hold device memory,
    and one that staged past the reserve gives it back within seconds (`_stage_all`); a commit that
    needs more than the device has fails every time, as before."""
    for attempt in range(OOM_RETRIES + 1):
        try:
            return measure_shape(shape, index, spec, clock, subject, control, phase, control_error, staged, checked)
        except Exception as exc:
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


def _cold_at_compile(at_start: Mapping[str, bool | None], staged: Mapping[str, Staged]) -> dict[str, bool | None]:
    """Whether each JIT cache was empty when this trial compiled: at its start where it compiled
    in its setup (a captured first call), else now, with the device held. A trial set up while its
    commit's first trial still waited for the device (a standby's companion, bisector/measure/warmer.py)
    found the cache empty at its start and compiles only after that first trial filled it."""
    if any(str(one.precompile.get("precompile", "")).startswith("captured") for one in staged.values()):
        return dict(at_start)
    return {k: v and _cold(os.environ.get(k)) for k, v in at_start.items()}


def _open_device(device: str) -> None:
    """Create the device context before queueing for the device: an allocation, no kernel."""
    if device != "cpu" and torch.cuda.is_available():
        torch.empty(1, device="cuda")


def run(spec: Mapping[str, Any], out_path: Path, gate: Gate | None = None,
        report: Report | None = None) -> dict[str, Any]:
    """Run the trial of `spec`; its output is written to `out_path` as it grows and, with
    `report`, handed to it each time (benches/worker.py sends it on the bot's socket)."""
    gate = gate or OpenGate()
    phase = Phases()
    device = spec["device"]
    output: dict[str, Any] = {"sha": spec.get("sha"), "suite": spec.get("suite"), "machine": {},
                              "protocol": {}, "telemetry": {}, "results": [], "phases": phase.spans}
    caches = {k: _cold(os.environ.get(k)) for k in ("TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR")
              if k in os.environ}
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
        except Exception as exc:  # the control's: the built-in suites' subjects are timed alone and say why
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
        staged = _stage_all(spec, subjects, control, control_error, phase, gate)
        # after every import and input: the malloc regime is the trial's, not its history's
        pinned = allocator.pin() if device == "cpu" else {}
        _save(out_path, output, report)
    if spec.get("precompile_only"):  # a prefetch: compiled cold, never takes the device
        output["protocol"] = {"precompile_only": True, "jit_cache_cold": dict(caches), "device": device,
                              "pid": os.getpid()}
        output["results"] = precompile_only(spec, subjects, control, control_error, staged, phase)
        output["protocol"]["imported"] = import_trace.loaded_files(spec.get("source_dirs", []))
        _save(out_path, output, report)
        if staged:  # its inputs and captures unmapped in a brief loan, not beside a timed section at exit
            staged.clear()
            with briefly(gate, phase, name="unmap"):
                torch.cuda.empty_cache()
        return output

    with phase("queue"):
        only = gate.acquire().get("shapes")
    # the shapes this trial times: all, or those the grant names (each keeps its index, its inputs' seed)
    wanted = set(only) if only is not None else {s["key"] for s in spec["shapes"]}
    try:
        with phase("device"):
            clock = Clock(device, flush_bytes(device, int(spec.get("flush_mb", 0))), spec.get("cpu_clock", "cpu"))
            output["protocol"] = protocol(spec, clock.flush_size, clock.kind, _cold_at_compile(caches, staged))
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
                    results = [_measured(shape, index, spec, clock, subject, control, phase,
                                         control_error if shape["suite"] in suites.SUITES else None,
                                         staged.pop(shape["key"], None), checked)]
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
        # the checkout's files this process loaded: the hunk search sets the others aside
        output["protocol"]["imported"] = import_trace.loaded_files(spec.get("source_dirs", []))
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

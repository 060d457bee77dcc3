"""A trial's setup before it takes the device: the gate the bot lends the device through, the phase
clock, and each shape's inputs and first calls staged and captured ahead (benches/trial.py runs
them). Staging decides, from the device's free memory, whether a shape is held until the device
section, drawn only to make the process's first calls and given back, or left to the device section.
Runs inside the trial process: imports nothing of the bot.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from benches import first_call, suites
from benches.backends.base import Backend, BackendUnavailable, Prepared, prepared
from benches.kernel_time import rng_kept_on_failure

TRACE_CHARS = 4000


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
def briefly(
    gate: Gate, phase: Phases, sync: Callable[[], None] = lambda: torch.cuda.synchronize(), name: str = "staging"
) -> Iterator[None]:
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


def subject_specs(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Suite -> subject. One process may measure several suites (saves an import of torch per suite)."""
    return dict(spec.get("subjects") or {spec["suite"]: spec["subject"]})


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
    except Exception:  # noqa: BLE001 - anything the sync raises: the first error is the one reported
        raise exc from None
    cause = exc.__cause__ if isinstance(exc, ControlFailed) and exc.__cause__ is not None else exc
    return (str(cause) if isinstance(cause, BackendUnavailable) else f"{type(cause).__name__}: {cause}")[:TRACE_CHARS]


@dataclass(frozen=True)
class Staged:
    """One shape's inputs and prepared calls, made before the device is taken where possible."""

    inputs: Mapping[str, Any]
    subj: Prepared
    ctrl: Prepared | None
    control_error: str | None
    precompile: dict[str, Any] = field(default_factory=dict)  # how the first calls went off the device
    graphs: tuple[Any, ...] = ()  # the precompile's captures, held until the device section (`precompile`)


def stage_shape(
    shape: Mapping[str, Any],
    index: int,
    spec: Mapping[str, Any],
    clock_sync: Callable[[], None],
    subject: Backend,
    control: Backend | None,
    control_error: str | None,
    phase: Phases | None = None,
) -> Staged:
    """Random inputs from the trial's seed and both backends' prepared calls (nothing timed).
    `phase`: where staged in a brief loan, its parts are named ("draw", "prepare", "control_prepare",
    each synced): the loan is device time, 0.09-0.11 s a trial on the real ranges, 2-3x their timed work."""
    name = shape["suite"]
    suite = suites.get(name)

    @contextlib.contextmanager
    def part(what: str) -> Iterator[None]:
        if phase is None:
            yield
            return
        with phase(what, shape["key"]):
            yield
            clock_sync()

    with part("draw"):
        inputs = suite.make_inputs(shape["params"], "cpu" if spec["device"] == "cpu" else "cuda", spec["seed"] + index)
    with part("prepare"):
        subj = subject.prepare(name, inputs)
    ctrl: Prepared | None = None
    with part("control_prepare"):
        try:
            if name in suites.SUITES:
                ctrl = control.prepare(name, inputs) if control is not None else None
            else:
                ctrl = _brought_control(name, suite, inputs)
        except Exception as exc:  # noqa: BLE001 - the control's, not the subject's
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
    named: dict[str, Any] = {}
    try:
        for who, prep in (("subject", staged.subj), ("control", staged.ctrl)):
            if prep is None:
                continue
            with first_call.parts() as named[who]:
                graphs.append(captured(prep.run, stream, pool))
            done.append(who)
        status = "captured"
    except Exception as exc:  # noqa: BLE001 - anything uncapturable runs under the lock instead
        why = str(exc).strip().splitlines()
        status = (
            f"not captured ({', '.join(done) or 'nothing'} done): {type(exc).__name__}: {why[0][:200] if why else ''}"
        )
        torch.cuda.synchronize()  # a context the capture broke raises here: the trial crashes, as it would have
    return {
        "precompile": status,
        "precompile_s": round(time.perf_counter() - start, 6),
        "precompile_parts": named,
    }, tuple(graphs)


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


def _stageable(
    spec: Mapping[str, Any], subjects: Mapping[str, Backend | BaseException], shape: Mapping[str, Any]
) -> Backend | None:
    """The shape's subject when its calls can be made before the device is taken: it imported, and
    it is not a pytest session (that one runs whole, with the device held)."""
    subject = subjects.get(shape["suite"])
    if (
        subject is None
        or isinstance(subject, BaseException)
        or subject_specs(spec)[shape["suite"]].get("adapter") == "pytest"
    ):
        return None
    return subject


STAGING_RESERVE = 0.3  # share of the device's memory a setup leaves free for the trial that measures
# Under the reserve, one shape is still drawn, captured and given back while at least this share is
# free: the process's first-call work (7-11 s on a real library) is then off the device, and what it
# holds meanwhile is one shape's inputs and outputs, not every shape's until its turn.
WARMING_FLOOR = 0.1


def staging_choice(free: int, total: int, reserve: float, floor: float, drawn_any: bool) -> str:
    """How a setup takes its next shape, given the device's free memory: "stage" (drawn and captured,
    held until the device section), "warm" (under the reserve, nothing drawn yet, over the floor:
    drawn and captured for the process's first calls, then given back), or "defer" (to the device section)."""
    if free >= reserve * total:
        return "stage"
    return "warm" if not drawn_any and free >= floor * total else "defer"


def _stage_all(
    spec: Mapping[str, Any],
    subjects: Mapping[str, Backend | BaseException],
    control: Backend | None,
    control_error: str | None,
    phase: Phases,
    gate: Gate,
    warmed: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Staged]:
    """On a GPU, before the trial's device section: every shape's inputs and prepared calls, drawn in
    one brief loan of the device (`briefly`), then the first calls precompiled (`precompile`: captured,
    off the device), so that the device section holds timed work. A shape that fails here is staged
    again under the lock, where its failure is recorded as before.

    Only while the device has `staging_reserve` of its memory free (STAGING_RESERVE): the trials set up
    ahead each hold their staged shapes until their turn, and on one H100 (80 GB) eleven of the H200
    demo's six-shape trials held 6.3 GiB each, so the one measuring ran out of memory, and two real
    commits were skipped as if they did not run. A shape over that line is staged in the device section
    (a "deferred" phase says so), where the trials waiting hold only what they staged before. 30%: the
    measuring trial's own ~8 GiB there, and the captures of setups that passed the line just before.
    Under the line, the first shape is still drawn, captured and given back (`warmed`: shape -> how its
    first calls went) while WARMING_FLOOR of the memory is free: the process's first calls off the device."""
    staged: dict[str, Staged] = {}
    if spec["device"] == "cpu" or not spec.get("precompile", True) or not torch.cuda.is_available():
        return staged
    drawn: dict[str, Staged] = {}
    stageable = [
        (index, shape, subject)
        for index, shape in enumerate(spec["shapes"])
        if (subject := _stageable(spec, subjects, shape)) is not None
    ]
    if not stageable:
        return staged
    reserve = float(spec.get("staging_reserve", STAGING_RESERVE))
    floor = float(spec.get("warming_floor", WARMING_FLOOR))
    warming: str | None = None  # a shape drawn only to warm the process, given back after its capture
    with briefly(gate, phase):  # the inputs' kernels never run beside another trial's timed section
        for index, shape, subject in stageable:
            free, total = torch.cuda.mem_get_info()
            choice = staging_choice(free, total, reserve, floor, bool(drawn) or warming is not None)
            if choice == "warm":
                warming = shape["key"]
            elif choice == "defer":  # left to the device section, staged there when its turn comes
                with phase("deferred", shape["key"]):
                    print(
                        f"trial: {shape['key']}: staged under the lock: {free / 2**30:.1f} of "
                        f"{total / 2**30:.1f} GiB free, under the {reserve:.0%} kept for the trial that "
                        f"measures",
                        file=sys.stderr,
                        flush=True,
                    )
                continue
            with phase("inputs", shape["key"]):
                try:
                    drawn.setdefault(
                        shape["key"],
                        stage_shape(
                            shape,
                            index,
                            spec,
                            torch.cuda.synchronize,
                            subject,
                            control,
                            control_error if shape["suite"] in suites.SUITES else None,
                            phase,
                        ),
                    )
                except Exception:  # noqa: BLE001 - measured again under the lock, which records the failure
                    print(traceback.format_exc(), file=sys.stderr, flush=True)
                    torch.cuda.synchronize()
    staged = _precompiled(drawn, phase)
    drawn.clear()
    if warming is not None:
        how = _give_back_warming(staged, warming, phase, gate)
        if warmed is not None:
            warmed[warming] = how
    free, total = torch.cuda.mem_get_info()
    if staged and free < reserve * total:
        # setups that passed the line together took the device under it (their captures allocate after
        # the line is read): the last to see that gives its shapes back, to be staged under the lock
        print(
            f"trial: staged shapes given back: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free after staging",
            file=sys.stderr,
            flush=True,
        )
        for key in staged:
            with phase("unstaged", key):
                pass
        staged.clear()  # the last references to their inputs and captures: `_precompiled` keeps none
        with briefly(gate, phase, name="unmap"):  # unmapped in a loan, not beside another trial's timed section
            torch.cuda.empty_cache()
    return staged


def _give_back_warming(staged: dict[str, Staged], key: str, phase: Phases, gate: Gate) -> dict[str, Any]:
    """The shape drawn in a setup short of memory only to make the process's first calls: its inputs
    and captures given back at once (unmapped in a brief loan, never beside another trial's timed
    section), its precompile kept for its result (`warmed`). On the real ranges a process's first call
    cost 7-11 s whatever its JIT cache held (the library's own first-call work; a warm cache only
    spares the kernels' compile): made under the lock it held the device 30-240x the trial's timed work."""
    one = staged.pop(key, None)
    if one is None:
        return {}
    how = {**one.precompile, "precompile": f"warmed, given back: {one.precompile.get('precompile', '')}"}
    del one
    with phase("warmed", key):
        pass
    with briefly(gate, phase, name="unmap"):
        torch.cuda.empty_cache()
    return how


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


def precompile_only(
    spec: Mapping[str, Any],
    subjects: Mapping[str, Backend | BaseException],
    control: Backend | None,
    control_error: str | None,
    staged: Mapping[str, Staged],
    phase: Phases,
    warmed: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A prefetch's trial (`"precompile_only": true`, bisector/measure/warmer.py): the commit's cold
    compile into its JIT dir and nothing else; the device is never asked for. On a GPU what
    `_stage_all` captured; on the CPU, where nothing is captured, the first calls themselves."""
    out: list[dict[str, Any]] = []
    for index, shape in enumerate(spec["shapes"]):
        key, subject, stageable = shape["key"], subjects.get(shape["suite"]), _stageable(spec, subjects, shape)
        one = staged.get(key)
        if one is None and (warmed or {}).get(key):  # compiled in the setup, then given back: short of memory
            how = dict((warmed or {})[key])
            out.append({"shape": key, "status": "precompiled", **how, "compile_s": how.get("precompile_s")})
            continue
        try:
            if one is None and spec["device"] == "cpu" and stageable is not None:
                with phase("precompile", key):
                    one = stage_shape(
                        shape,
                        index,
                        spec,
                        lambda: None,
                        stageable,
                        control,
                        control_error if shape["suite"] in suites.SUITES else None,
                    )
                    start = time.perf_counter()
                    for prep in (one.subj, one.ctrl):
                        if prep is not None:
                            prep.run()
                    one = replace(
                        one,
                        precompile={
                            "precompile": "first calls (cpu)",
                            "precompile_s": round(time.perf_counter() - start, 6),
                        },
                    )
        except Exception as exc:  # noqa: BLE001 - the real trial records the failure
            out.append(
                {"shape": key, "status": "not precompiled", "error": f"{type(exc).__name__}: {exc}"[:TRACE_CHARS]}
            )
            continue
        if one is None:
            why = subject if isinstance(subject, BaseException) else "nothing staged (pytest, or staging failed)"
            out.append({"shape": key, "status": "not precompiled", "error": str(why)[:TRACE_CHARS]})
        else:
            out.append(
                {
                    "shape": key,
                    "status": "precompiled",
                    **one.precompile,
                    "compile_s": one.precompile.get("precompile_s"),
                }
            )
    return out

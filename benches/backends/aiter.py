"""aiter as a control (the stable library on ROCm) and as a subject adapter.

Written from ROCm/aiter@e4048607a535ace3a2b51ded31b1c8c2d45c0879 (aiter/ops/mha.py
`flash_attn_func`, aiter/tuned_gemm.py `tgemm.mm` -> `gemm_a16w16`, aiter/ops/gemm_op_a8w8.py
`gemm_a8w8` / `gemm_a8w8_bpreshuffle`, aiter/ops/shuffle.py `shuffle_weight`,
op_tests/test_gemm_a8w8.py for the scale shapes). NOT YET RUN ON AMD HARDWARE. The varlen and
paged attention and the scaled fp8 GEMM controls are in benches/backends/aiter_calls.py.

Conventions read there:
- `flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, ...)` with q, k, v
  as [B, S, H, D]; returns the output (a tuple only when return_lse / return_attn_probs).
- `tgemm.mm(inp, weights)` is F.linear: inp [M, K], weights [N, K] -> [M, N].
- `gemm_a8w8(XQ, WQ, x_scale, w_scale, bias=None, dtype=bf16)`: XQ [M, K], WQ [N, K] fp8,
  x_scale [M, 1], w_scale [N, 1] fp32 (per-token, as `pertoken_quant` returns them).
  `gemm_a8w8_bpreshuffle` takes WQ through `shuffle_weight(WQ, layout=(16, 16))`.
- aiter's fp8 dtype is `aiter.dtypes.fp8` (e4m3fn on gfx950, e4m3fnuz on gfx942).

Control purity: aiter's tuned bf16/fp16 GEMM (`gemm_a16w16`, picked by the lru-cached
`get_GEMM_A16W16_config`) and `gemm_a8w8_bpreshuffle` can dispatch to FlyDSL kernels, and inside a
trial FlyDSL is the commit under test: a control that ran it would move with the subject and hide
its steps. So the control is imported before the checkout is on sys.path, with `flydsl`
unimportable, and every `is_flydsl_available` of aiter's is pinned to False afterwards
(benches/backends/aiter_isolation.py): its lookups skip FlyDSL kernels whatever the subject's
commit holds. As a second line, the control sets AITER_LOG_TUNED_CONFIG=1 (read when aiter is
imported), asks aiter's own lookup which implementation a GEMM gets, keeps aiter's log lines while
each control kernel runs the first time, prints the chosen implementation to the trial log, and
refuses (BackendUnavailable) a control that picked FlyDSL all the same.

fp8 attention: the control calls aiter's per-tensor fp8 entry points, `flash_attn_fp8_pertensor_func`
(dense) and `flash_attn_varlen_fp8_pertensor_func` (varlen), the path aiter's own
op_tests/test_mha_fp8.py and test_mha_varlen_fp8.py measure, with the same unit descales the subject
gets (benches/suites/fp8.py `unit_descales`). `flash_attn_func` would pass no descales (mha.py
hard-codes them to None) and reach CK's no-scale fp8 kernel instead.

The varlen control never imports FlyDSL (benches/backends/aiter_calls.py): `flash_attn_varlen_func`
imports the top-level `flydsl` on every call, and a process holds one module of that name. Pinning
aiter's own FlyDSL instead would not work either way round: imported before the checkout is on
sys.path, it would be what the subject's `import flydsl` returns (the subject would no longer be the
commit under test); imported after, it is the subject's. So the control calls the CK path that
function ends in (`FlashAttnVarlenFunc.apply`), and refuses when this aiter was built without CK.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from benches.backends import aiter_calls, aiter_isolation
from benches.backends.base import (
    BackendUnavailable,
    Prepared,
    from_layout,
    load_entry,
    prepared,
    require_gpu,
    require_module,
    to_layout,
)
from benches.backends.callmap import mapped

GEMM_KINDS = ("a16w16", "a8w8", "a8w8_bpreshuffle")


def gemm_kind(dtype: torch.dtype, options: Mapping[str, Any]) -> str:
    """Which aiter GEMM a dtype maps to; options["gemm_kind"] may pick bpreshuffle for fp8."""
    kind = str(options.get("gemm_kind", "a8w8" if dtype == torch.float8_e4m3fn else "a16w16"))
    if kind not in GEMM_KINDS:
        raise ValueError(f"aiter gemm_kind must be one of {', '.join(GEMM_KINDS)}, got {kind!r}")
    if (kind == "a16w16") == (dtype == torch.float8_e4m3fn):
        raise ValueError(f"aiter gemm_kind {kind!r} does not take {dtype} inputs")
    return kind


def gemm_operands(
    a: torch.Tensor, b: torch.Tensor, kind: str, fp8: torch.dtype | None = None
) -> tuple[torch.Tensor, ...]:
    """Our a [M, K], b [K, N] -> aiter's (inp, weights[N, K][, x_scale, w_scale]).

    Unit scales: the suite's fp8 inputs are already quantized values."""
    inp, weight = a.contiguous(), b.t().contiguous()
    if kind == "a16w16":
        return inp, weight
    if fp8 is not None and inp.dtype != fp8:
        inp, weight = inp.to(fp8), weight.to(fp8)
    x_scale = torch.ones((inp.shape[0], 1), device=a.device, dtype=torch.float32)
    w_scale = torch.ones((weight.shape[0], 1), device=a.device, dtype=torch.float32)
    return inp, weight, x_scale, w_scale


LOG_ENV = "AITER_LOG_TUNED_CONFIG"
# aiter's own words when a FlyDSL kernel is picked: "... libtype is flydsl ..." (tuned GEMM configs)
# and "falling back to flydsl kernel '...'" (untuned bpreshuffle on gfx1250).
_FLYDSL_PICKED = re.compile(r"libtype is flydsl\b|to flydsl kernel", re.IGNORECASE)


def a16w16_choice(tuned_gemm: Any, m: int, n: int, k: int, dtype: torch.dtype) -> Mapping[str, Any] | None:
    """What `gemm_a16w16` will run for an [m, k] x [n, k] GEMM: the same (lru-cached) lookup it makes
    itself, with the arguments it passes for an unshuffled weight, no bias, no scales and the input's
    dtype as output. None if this aiter has no such lookup."""
    lookup = getattr(tuned_gemm, "get_GEMM_A16W16_config", None)
    if lookup is None:
        return None
    return lookup(M=m, N=n, K=k, bias=False, dtype=str(dtype), otype=str(dtype), scaleAB=False, bpreshuffle=False)


def check_pure(what: str, choice: Mapping[str, Any] | None, log_lines: Sequence[str]) -> str:
    """The implementation line for the trial log, or BackendUnavailable when aiter picked FlyDSL."""
    libtype = str(choice.get("libtype", "?")) if choice else "?"
    kernel = str(choice.get("kernelName") or "") if choice else ""
    said = [line for line in log_lines if _FLYDSL_PICKED.search(line)]
    if libtype == "flydsl" or said:
        detail = f"libtype flydsl, kernel {kernel!r}" if libtype == "flydsl" else said[0][:200]
        raise BackendUnavailable(
            "aiter",
            f"the control's {what} dispatches to FlyDSL ({detail}); FlyDSL is the "
            "commit under test in this trial, so it cannot be the control",
        )
    return f"aiter control {what}: libtype {libtype}" + (f", kernel {kernel}" if kernel else "")


class _LogLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def aiter_log() -> Iterator[list[str]]:
    """aiter's log lines while the block runs (its tuned-config choices, when it logs them). The
    choices are INFO records: the logger is opened to INFO meanwhile (AITER_LOG_LEVEL may be higher;
    aiter's own console handler keeps its level)."""
    handler, logger = _LogLines(), logging.getLogger("aiter")
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def pure_control(prep: Prepared, what: str, choice: Mapping[str, Any] | None = None) -> Prepared:
    """`prep` whose first run is checked against aiter's log (and `choice`); later runs go straight."""
    checked: list[str] = []
    run = prep.run

    def first_then_plain() -> Any:
        if checked:
            return run()
        with aiter_log() as lines:
            out = run()
        checked.append(check_pure(what, choice, lines))
        print(checked[0], file=sys.stderr, flush=True)
        return out

    return Prepared(run=first_then_plain, output=prep.output, impl=prep.impl)


class _Aiter:
    name = "aiter"

    def __init__(self, need_gpu: bool = True) -> None:
        if need_gpu:  # False only where a stand-in aiter is tested on the CPU
            require_gpu(self.name, "rocm")
        os.environ.setdefault(LOG_ENV, "1")  # before aiter is imported: it reads the flag then
        self.aiter = self._import()

    def _import(self) -> Any:
        return require_module("aiter", self.name)

    def fp8(self) -> torch.dtype | None:
        return getattr(getattr(self.aiter, "dtypes", None), "fp8", None)

    def shuffle(self, weight: torch.Tensor) -> torch.Tensor:
        return require_module("aiter.ops.shuffle", self.name).shuffle_weight(weight, layout=(16, 16))

    def resolve(self, path: str) -> Any:
        """An attribute path under `aiter` ("ops.mha.FlashAttnVarlenFunc"), or BackendUnavailable."""
        obj: Any = self.aiter
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise BackendUnavailable(self.name, f"this aiter has no {path}")
        return obj

    def prepare_call(self, call: aiter_calls.Call) -> Prepared:
        fn = self.resolve(call.fn)
        if call.autograd:
            if not getattr(self.resolve(call.fn.rsplit(".", 1)[0]), "ENABLE_CK", True):
                raise BackendUnavailable(
                    self.name,
                    "this aiter is built without CK (ENABLE_CK=0): its varlen "
                    "attention would be Triton's, not the CK control",
                )
            args = aiter_calls.varlen_args(fn.forward, call.kwargs)
            return prepared(lambda: fn.apply(*args), call.output, impl=f"aiter {call.what}")
        return prepared(lambda: fn(*call.args, **call.kwargs), call.output, impl=f"aiter {call.what}")


class AiterControl(_Aiter):
    """aiter.flash_attn_func and tuned GEMM / fp8 GEMM in the trial process, imported without the
    subject's FlyDSL and pinned off it (benches/backends/aiter_isolation.py)."""

    def _import(self) -> Any:
        try:
            package, pinned = aiter_isolation.import_control("aiter")
        except ImportError as exc:
            raise BackendUnavailable(self.name, f"cannot import 'aiter': {exc}") from None
        print(
            f"aiter control: imported without FlyDSL; FlyDSL off in {', '.join(pinned) or 'no module'}",
            file=sys.stderr,
            flush=True,
        )
        return package

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        if suite == "fa":
            call = aiter_calls.attention(inputs)
            if call is None:
                return pure_control(_prepare_fa(self.aiter.flash_attn_func, inputs, {}), "flash_attn_func")
            return pure_control(self.prepare_call(call), call.what)
        if suite == "gemm":
            if inputs.get("scaling"):
                call = aiter_calls.scaled_gemm(inputs, self.fp8())
                return pure_control(self.prepare_call(call), call.what)
            if inputs["a"].dim() != 2 or inputs.get("group_sizes") is not None:
                raise BackendUnavailable(self.name, "no batched or grouped GEMM control through aiter here")
            kind = gemm_kind(inputs["a"].dtype, {})
            (m, k), n = inputs["a"].shape, inputs["b"].shape[1]
            what = f"gemm_{kind} M={m} N={n} K={k}"
            if kind == "a16w16":
                tuned = require_module("aiter.tuned_gemm", self.name)
                with aiter_log() as lines:
                    choice = a16w16_choice(tuned, m, n, k, inputs["a"].dtype)
                check_pure(what, choice, lines)  # refuse before anything runs
                return pure_control(_prepare_gemm(tuned.tgemm.mm, inputs, kind, None, None), what, choice)
            return pure_control(_prepare_gemm(self.aiter.gemm_a8w8, inputs, kind, self.fp8(), None), what)
        raise ValueError(f"unknown suite {suite!r}")


class AiterSubject(_Aiter):
    """A kernel of the aiter commit under test, called with aiter's own conventions, or with the
    subject's declared mapping (benches/backends/callmap.py) when it has one."""

    def __init__(
        self,
        entry: str,
        options: Mapping[str, Any] | None = None,
        layout: str = "bshd",
        args: Sequence[str] = (),
        kwargs: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.entry, self.options, self.layout = entry, dict(options or {}), layout
        self.args, self.kwargs = tuple(args), dict(kwargs or {})

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        fn = load_entry(self.entry, self.name)
        opts = {k: v for k, v in self.options.items() if k != "gemm_kind"}
        if self.args or self.kwargs:
            return mapped(fn, suite, inputs, self.layout, self.args, self.kwargs, opts)
        if suite == "fa":
            return _prepare_fa(fn, inputs, opts)
        if suite == "gemm":
            kind = gemm_kind(inputs["a"].dtype, self.options)
            shuffle = self.shuffle if kind == "a8w8_bpreshuffle" else None
            return _prepare_gemm(fn, inputs, kind, self.fp8(), shuffle, **opts)
        raise ValueError(f"unknown suite {suite!r}")


def _prepare_fa(fn: Callable[..., Any], inputs: Mapping[str, Any], opts: Mapping[str, Any]) -> Prepared:
    q, k, v = (to_layout(inputs[n], "bshd") for n in ("q", "k", "v"))
    causal, scale = inputs["causal"], inputs["sm_scale"]
    return prepared(
        lambda: fn(q, k, v, dropout_p=0.0, softmax_scale=scale, causal=causal, **opts),
        lambda o: from_layout(o[0] if isinstance(o, (tuple, list)) else o, "bshd"),
    )


def _prepare_gemm(
    fn: Callable[..., Any],
    inputs: Mapping[str, Any],
    kind: str,
    fp8: torch.dtype | None,
    shuffle: Callable[[torch.Tensor], torch.Tensor] | None,
    **opts: Any,
) -> Prepared:
    ops = gemm_operands(inputs["a"], inputs["b"], kind, fp8)
    if kind == "a16w16":
        inp, weight = ops
        return prepared(lambda: fn(inp, weight, **opts))
    inp, weight, x_scale, w_scale = ops
    if shuffle is not None:
        weight = shuffle(weight)
    out = inputs.get("out_dtype", torch.bfloat16)
    return prepared(lambda: fn(inp, weight, x_scale, w_scale, None, out, **opts))


def unavailable_reason() -> str | None:
    """None when aiter can run here, else why not (for `bisector bench` and the tests)."""
    try:
        AiterControl()
    except BackendUnavailable as exc:
        return str(exc)
    return None

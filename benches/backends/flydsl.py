"""FlyDSL subject adapter: flash attention and the pre-shuffled-B GEMM of the commit under test.

Written from ROCm/FlyDSL@11c4174d82b7491c2d08d5828a254183f2a8b959
(kernels/attention/flash_attn_interface.py `flydsl_flash_attn_func`,
kernels/gemm/preshuffle_gemm.py `compile_preshuffle_gemm`, tests/kernels/test_preshuffle_gemm.py
for the launch arguments, tests/utils.py `shuffle_weight`). NOT YET RUN ON AMD HARDWARE.

Conventions read there (and checked unchanged at cf1db2fe, 494b2cbd, 772f0703, daee90e4, 4521c8cb):
- `flydsl_flash_attn_func(q, k, v, *, causal=True, ...)`: dense q, k, v as [B, S, H, D]; no
  softmax-scale argument (it scales by 1/sqrt(D)); returns the output tensor. fp8 (e4m3fn, gfx950
  only) requires `q_descale`, `k_descale`, `v_descale` as shape-[1] fp32 tensors on q's device.
- `compile_preshuffle_gemm(*, N, K, tile_m, tile_n, tile_k, in_dtype, out_dtype, epilogue,
  waves_per_eu, enable_scheduler, use_async_copy, xcd_swizzle, lds_stage)` (no other keyword: the
  options it may be given are in benches/options.py, checked at config time) returns a
  launcher called as `fn(C, A, B, scale_a, scale_b, bias, M, N, stream)` on flat tensors, with
  B = the [N, K] weight through `shuffle_weight(w, layout=(16, 16))`, 8-bit tensors viewed as
  int8, empty fp32 scales for fp16/bf16 (per-row [M] / [N] scales for fp8), an empty bias when
  epilogue == "none". The first call compiles (into FLYDSL_RUNTIME_CACHE_DIR).
Kernels live in the checkout (`kernels.*`), not in the flydsl wheel: the trial imports them from
the commit's source dir. The shuffle comes from aiter (`aiter.ops.shuffle.shuffle_weight`) when it
is installed, else from the checkout's `tests.utils.shuffle_weight`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from benches import control_limits
from benches import options as adapter_options
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
from benches.suites import fp8

FA_ENTRY = "kernels.attention.flash_attn_interface:flydsl_flash_attn_func"
GEMM_ENTRY = "kernels.gemm.preshuffle_gemm:compile_preshuffle_gemm"
_IN_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8"}


@dataclass(frozen=True)
class GemmPlan:
    """Everything compile_preshuffle_gemm and its launcher need, computed without a GPU."""

    compile_kwargs: dict[str, Any]
    weight: torch.Tensor  # [N, K], contiguous, before the shuffle
    a: torch.Tensor  # [M, K], contiguous
    out_dtype: torch.dtype
    m: int
    n: int


def plan_gemm(
    a: torch.Tensor, b: torch.Tensor, tile: tuple[int, int, int] | None, options: Mapping[str, Any]
) -> GemmPlan:
    in_dtype = _IN_DTYPES.get(a.dtype)
    if in_dtype is None:
        raise BackendUnavailable("flydsl", f"compile_preshuffle_gemm has no {a.dtype} input")
    tile = tuple(options.get("tile", tile) or ())  # type: ignore[assignment]
    if len(tile) != 3:
        raise ValueError("the flydsl GEMM needs a tile [tile_m, tile_n, tile_k] (shape 'tile' or option)")
    (m, k), n = a.shape, b.shape[1]
    if k % tile[2]:
        raise ValueError(f"tile_k={tile[2]} must divide K={k}")
    bad = adapter_options.unknown("flydsl", "gemm", options)
    if bad:
        raise ValueError(
            f"compile_preshuffle_gemm takes no option {bad[0]!r} "
            f"(known: {', '.join(sorted(adapter_options.FLYDSL_GEMM))})"
        )
    out = torch.float16 if a.dtype == torch.float16 else torch.bfloat16
    extra = {key: v for key, v in options.items() if key != "tile"}
    kwargs = dict(
        N=n,
        K=k,
        tile_m=tile[0],
        tile_n=tile[1],
        tile_k=tile[2],
        in_dtype=in_dtype,
        out_dtype="fp16" if out == torch.float16 else "bf16",
        **extra,
    )
    return GemmPlan(compile_kwargs=kwargs, weight=b.t().contiguous(), a=a.contiguous(), out_dtype=out, m=m, n=n)


def launch_args(plan: GemmPlan, b_shuffled: torch.Tensor, c: torch.Tensor) -> tuple[Any, ...]:
    """The launcher's positional arguments but the stream, flat, 8-bit data viewed as int8 (as
    FlyDSL's test); `on_current_stream` appends the stream at each call."""

    def flat(t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous().view(-1)
        return t.view(torch.int8) if t.dtype == torch.float8_e4m3fn else t

    dev = plan.a.device
    if plan.a.dtype == torch.float8_e4m3fn:
        sa = torch.ones(plan.m, device=dev, dtype=torch.float32)
        sb = torch.ones(plan.n, device=dev, dtype=torch.float32)
    else:
        sa = sb = torch.empty(0, device=dev, dtype=torch.float32)
    bias = torch.empty(0, device=dev, dtype=plan.out_dtype)
    return (flat(c), flat(plan.a), flat(b_shuffled), sa, sb, bias, plan.m, plan.n)


def on_current_stream(launch: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    """A call of the launcher on the stream current at each call, as FlyDSL's tests and aiter launch
    it: the kernel-time graph is captured on a side stream, and a launcher bound to the stream of
    the moment it was prepared would run outside the graph (read near zero, or break the capture)."""
    return lambda: launch(*args, torch.cuda.current_stream())


def fa_kwargs(q: torch.Tensor, causal: bool, options: Mapping[str, Any]) -> dict[str, Any]:
    """Keywords for flydsl_flash_attn_func: causal, the kernel options, and for fp8 the shape-[1]
    fp32 q/k/v descales it requires on gfx950 (unit: the suite's fp8 inputs are already the values)."""
    bad = adapter_options.unknown("flydsl", "fa", options)
    if bad:
        raise ValueError(
            f"flydsl_flash_attn_func takes no option {bad[0]!r} (known: {', '.join(sorted(adapter_options.FLYDSL_FA))})"
        )
    kwargs: dict[str, Any] = {"causal": causal, **options}
    if q.dtype == torch.float8_e4m3fn:
        kwargs.update(fp8.unit_descales(q.device))
    return kwargs


def check_sm_scale(sm_scale: float, head_dim: int) -> None:
    if abs(sm_scale * math.sqrt(head_dim) - 1.0) > 1e-6:
        raise BackendUnavailable("flydsl", "flydsl_flash_attn_func only scales by 1/sqrt(D)")


def _shuffler() -> Callable[..., torch.Tensor]:
    for module in ("aiter.ops.shuffle", "tests.utils"):
        try:
            return load_entry(f"{module}:shuffle_weight", "flydsl")
        except (BackendUnavailable, ImportError):
            continue
    raise BackendUnavailable("flydsl", "no shuffle_weight: install aiter or keep tests/utils.py in the checkout")


def unsupported(suite: str, inputs: Mapping[str, Any]) -> str | None:
    """Shapes this adapter does not pass on, by the rules `bisector check-config` applies to the
    config (benches/control_limits.py): dense attention (fp8 at D = 128) and a plain 2-D GEMM."""
    if suite == "fa":
        refused = control_limits.flydsl_attention_refusal(inputs["geometry"])
    elif suite == "gemm":
        a, b = inputs["a"], inputs["b"]
        refused = control_limits.flydsl_gemm_refusal(
            inputs.get("scaling"),
            a.dim() != 2,
            inputs.get("group_sizes") is not None,
            _IN_DTYPES.get(a.dtype, str(a.dtype)),
            _IN_DTYPES.get(b.dtype, str(b.dtype)),
        )
    else:
        return None
    return refused[1] if refused else None


class FlyDSLSubject:
    name = "flydsl"

    def __init__(self, entry: str | None = None, options: Mapping[str, Any] | None = None) -> None:
        self.entry, self.options = entry, dict(options or {})
        require_gpu(self.name, "rocm")
        require_module("flydsl", self.name)

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        why = unsupported(suite, inputs)
        if why:
            raise BackendUnavailable(self.name, why)
        if suite == "fa":
            fn = load_entry(self.entry or FA_ENTRY, self.name)
            q, k, v = (to_layout(inputs[n], "bshd") for n in ("q", "k", "v"))
            check_sm_scale(inputs["sm_scale"], q.shape[-1])
            kwargs = fa_kwargs(q, inputs["causal"], self.options)
            return prepared(lambda: fn(q, k, v, **kwargs), lambda o: from_layout(o, "bshd"))
        if suite == "gemm":
            compile_gemm = load_entry(self.entry or GEMM_ENTRY, self.name)
            plan = plan_gemm(inputs["a"], inputs["b"], inputs.get("tile"), self.options)
            launch = compile_gemm(**plan.compile_kwargs)
            c = torch.empty((plan.m, plan.n), device=plan.a.device, dtype=plan.out_dtype)
            args = launch_args(plan, _shuffler()(plan.weight, layout=(16, 16)), c)
            return prepared(on_current_stream(launch, args), lambda _: c)
        raise ValueError(f"unknown suite {suite!r}")

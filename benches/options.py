"""The options each vendor adapter passes on to the upstream's kernel, by adapter and suite.

Plain data (no torch): the adapters use it to pass only real keywords, and the bot's config
check uses it to reject a misspelt or invented option by name before anything is built (an
option the kernel does not take would make every commit of a bisection raise TypeError).
An adapter that is not listed passes its options through unchecked.
"""

from __future__ import annotations

from collections.abc import Iterable

# FlyDSL, read at ROCm/FlyDSL cf1db2fe..4521c8cb (the signatures did not change in that range).
# `compile_preshuffle_gemm(*, N, K, tile_m, tile_n, tile_k, in_dtype, out_dtype, epilogue,
# waves_per_eu, enable_scheduler, use_async_copy, xcd_swizzle, lds_stage)`: N, K, the tile and the
# dtypes come from the shape; `epilogue` is left at "none" because the launch passes no bias.
FLYDSL_GEMM = frozenset({"tile", "waves_per_eu", "enable_scheduler", "use_async_copy", "xcd_swizzle", "lds_stage"})
# `flydsl_flash_attn_func(q, k, v, *, causal, ..., waves_per_eu, daz, dualwave_swp_lazy_rescale,
# dualwave_swp_setprio, dualwave_swp_enable_stagger, num_kv_splits, ...)`: the kernel build options;
# causal and the fp8 descales come from the shape.
FLYDSL_FA = frozenset(
    {
        "waves_per_eu",
        "daz",
        "dualwave_swp_lazy_rescale",
        "dualwave_swp_setprio",
        "dualwave_swp_enable_stagger",
        "num_kv_splits",
    }
)

KNOWN: dict[str, dict[str, frozenset[str]]] = {
    "flydsl": {"gemm": FLYDSL_GEMM, "fa": FLYDSL_FA},
}


def unknown(adapter: str, suite: str, names: Iterable[str]) -> list[str]:
    """The option names `adapter` does not take for `suite` (none when the adapter is unchecked)."""
    known = KNOWN.get(adapter, {}).get(suite)
    if known is None:
        return []
    return sorted(n for n in names if n not in known)

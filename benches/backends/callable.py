"""Subject adapter for any Python callable named by an entry point ("pkg.mod:fn").

Without a declared mapping (`args` / `kwargs`, benches/backends/callmap.py), the conventions:
attention `fn(q, k, v, causal, sm_scale, **options) -> o` with tensors in `layout` (k, v may have
fewer heads than q, and fewer queries than keys); GEMM `fn(a, b, **options) -> c` with a [M, K] and
b [K, N] ([batch, ..] when batched), `fn(a, b, a_scale, b_scale)` for scaled fp8, `tile=(BM, BN,
BK)` when the shape names one; a brought suite `fn(**inputs, **options)`. Variable-length, paged
and grouped shapes need a mapping. The "torch" adapter is this one: a torch implementation is a
callable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benches import shapes
from benches.backends.base import Prepared, from_layout, load_entry, prepared, to_layout
from benches.backends.callmap import mapped


class CallableSubject:
    def __init__(
        self,
        entry: str,
        layout: str = "bhsd",
        options: Mapping[str, Any] | None = None,
        name: str = "callable",
        args: Sequence[str] = (),
        kwargs: Mapping[str, str] | None = None,
    ) -> None:
        self.name, self.entry, self.layout = name, entry, layout
        self.options = dict(options or {})
        self.args, self.kwargs = tuple(args), dict(kwargs or {})
        self._fn: Any = None

    def fn(self) -> Any:
        if self._fn is None:
            self.check()
            self._fn = load_entry(self.entry, self.name)
        return self._fn

    def load(self) -> None:
        """Import the commit's module now: the trial does it before it queues for the device."""
        self.fn()

    def check(self) -> None:
        """Vendor adapters override this to raise BackendUnavailable before importing."""

    def prepare(self, suite: str, inputs: Mapping[str, Any]) -> Prepared:
        fn, opts, layout = self.fn(), self.options, self.layout
        if self.args or self.kwargs:
            return mapped(fn, suite, inputs, layout, self.args, self.kwargs, opts)
        return default_call(fn, suite, inputs, layout, opts)


def default_call(fn: Any, suite: str, inputs: Mapping[str, Any], layout: str, opts: Mapping[str, Any]) -> Prepared:
    """The conventions above, for a subject that declares no mapping."""
    if suite == "fa":
        g = inputs["geometry"]
        why = shapes.needs_mapping("fa", {"varlen": not (g.dense_q and g.dense_k), "page_size": g.page_size})
        if why:
            raise ValueError(f"{why}: declare the subject's args / kwargs (benches/backends/callmap.py)")
        q, k, v = (to_layout(inputs[n], layout) for n in ("q", "k", "v"))
        causal, scale = inputs["causal"], inputs["sm_scale"]
        return prepared(
            lambda: fn(q, k, v, causal, scale, **opts),
            lambda o: from_layout(o[0] if isinstance(o, (tuple, list)) else o, layout),
        )
    if suite == "gemm":
        if inputs.get("group_sizes") is not None:
            raise ValueError(f"{shapes.needs_mapping('gemm', {'groups': True})}: declare the subject's args / kwargs")
        a, b = inputs["a"], inputs["b"]
        if inputs.get("tile") is not None:
            opts = {**opts, "tile": inputs["tile"]}
        if inputs.get("scaling"):
            sa, sb = inputs["a_scale"], inputs["b_scale"]
            return prepared(lambda: fn(a, b, sa, sb, **opts))
        return prepared(lambda: fn(a, b, **opts))
    return prepared(lambda: fn(**inputs, **opts))

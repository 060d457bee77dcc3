"""Subject adapter for any Python callable named by an entry point ("pkg.mod:fn").

Attention: `fn(q, k, v, causal, sm_scale, **options) -> o` with tensors in `layout`.
GEMM: `fn(a, b, **options) -> c` with a [M, K] and b [K, N]; `tile=(BM, BN, BK)` is passed
when the shape names one. The "torch" adapter is this one: a torch implementation is a callable.
"""

from __future__ import annotations

from typing import Any, Mapping

from benches.backends.base import Prepared, from_layout, load_entry, prepared, to_layout


class CallableSubject:
    def __init__(self, entry: str, layout: str = "bhsd", options: Mapping[str, Any] | None = None,
                 name: str = "callable") -> None:
        self.name, self.entry, self.layout = name, entry, layout
        self.options = dict(options or {})
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
        if suite == "fa":
            q, k, v = (to_layout(inputs[n], layout) for n in ("q", "k", "v"))
            causal, scale = inputs["causal"], inputs["sm_scale"]
            return prepared(lambda: fn(q, k, v, causal, scale, **opts),
                            lambda o: from_layout(o[0] if isinstance(o, (tuple, list)) else o, layout))
        if suite == "gemm":
            a, b = inputs["a"], inputs["b"]
            if inputs.get("tile") is not None:
                opts = {**opts, "tile": inputs["tile"]}
            return prepared(lambda: fn(a, b, **opts))
        raise ValueError(f"unknown suite {suite!r}")

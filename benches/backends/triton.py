"""Subject adapter for Triton kernels: the callable convention, on a GPU, with triton importable.

The first call compiles into TRITON_CACHE_DIR (set per commit by the runner), which is what the
trial records as compile time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from benches.backends.base import BackendUnavailable, require_gpu, require_module
from benches.backends.callable import CallableSubject


class TritonSubject(CallableSubject):
    def __init__(
        self,
        entry: str,
        layout: str = "bhsd",
        options: Mapping[str, Any] | None = None,
        device: str = "cuda",
        args: Sequence[str] = (),
        kwargs: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(entry, layout, options, name="triton", args=args, kwargs=kwargs)
        self.device = device

    def load(self) -> None:
        """The commit's module, and Triton's own runtime helpers: on first use Triton compiles them
        (a C compiler run) into the commit's cold cache. Done here, off the device, it overlaps other
        trials' device time instead of lengthening the first kernel call; the kernel's own compile
        stays in that call, timed as compile_s."""
        super().load()
        if self.device != "cpu":
            try:
                import triton

                triton.runtime.driver.active.utils  # noqa: B018 - instantiating the driver compiles them
            except Exception:  # noqa: BLE001 - the first kernel call reports any real problem
                pass

    def check(self) -> None:
        require_module("triton", self.name)
        if self.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendUnavailable(self.name, "Triton kernels need a GPU (or TRITON_INTERPRET=1 on CPU)")
        if self.device != "cpu":
            require_gpu(self.name)

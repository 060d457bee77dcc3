"""Which shapes' data fits in the device's L2: there a warm caller and the cold protocol disagree.

Why: every kernel time here is taken cold (the L2 flushed before each call). A shape whose inputs
and output fit in the L2 runs faster for a caller that calls it again at once: a skinny bf16 GEMM
(64x7168x2048, B 29 MB) read 9-12 us warm and 16.2-16.7 us cold on an H100 (50 MiB L2), and a step
can exist warm and not cold. The report says so per shape, with the L2 the device reported
(`torch.cuda.get_device_properties(...).L2_cache_size`, in the trial's machine record), and whether
the suite was timed warm too (`[suites.NAME] cache = "warm"`, bisector/config/warm_cache_key.py). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from benches import shapes as shape_rules
from bisector.model import Shape

MiB = float(1 << 20)
DATA_BYTES: Mapping[str, Callable[[Mapping[str, object]], float]] = {
    "gemm": shape_rules.gemm_bytes,
    "fa": shape_rules.attention_bytes,
}


def l2_bytes(machine: Mapping[str, object]) -> int | None:
    value = machine.get("l2_cache")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def cache_fit_lines(shapes: Sequence[Shape], machine: Mapping[str, object], caches: Mapping[str, str]) -> list[str]:
    """One line per shape whose data (inputs read once, output written once) fits in the L2."""
    l2 = l2_bytes(machine)
    if l2 is None:
        return []
    device = str(machine.get("device_name") or "the device")
    out = []
    for shape in shapes:
        size = DATA_BYTES.get(shape.suite)
        try:
            data = size(dict(shape.params)) if size is not None else None
        except (KeyError, ValueError, TypeError):
            data = None
        if data is None or data > l2:
            continue
        head = (
            f"{shape.key}: its data ({data / MiB:.1f} MiB, inputs and output) fits in the {l2 / MiB:.0f} MiB L2 "
            f"of {device}: timed cold (the L2 flushed before every call)"
        )
        out.append(
            head
            + (
                ", and warm (the L2 left warm between calls) as a shape of its own"
                if caches.get(shape.suite) == "warm"
                else f"; a caller that calls it again at once reads it warm (`[suites.{shape.suite}] cache = "
                '"warm"` tests that too)'
            )
        )
    return out

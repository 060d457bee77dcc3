"""A suite's kernels timed again with the cache left warm (`[suites.NAME] cache = "warm"`).

Why: the cold time (a flush before every call) is what a caller streaming its data from memory
sees; a caller that runs the same small GEMM again at once finds its operands in the L2, and a
skinny GEMM was 1.3-1.9x faster so on an H100 (a step can exist warm and not cold). The warm read
is the cold protocol (benches/timing.py, Clock.kernel) with the flush left out, subject and control
in turn; its ratio is what the search tests as the shape's warm view (bisector/search/samples.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benches.timing import Clock


def wants_warm(spec: Mapping[str, Any], suite: str) -> bool:
    return spec.get("cache", {}).get(suite) == "warm"


def warm_fields(clock: Clock, fns: Sequence[Callable[[], Any]], reps: int) -> dict[str, Any]:
    """The trial's warm figures: ms per call of the subject (and the control), and their ratio
    (control / subject, the median over the repetitions, as the cold ratio)."""
    times = clock.kernel(list(fns), reps, flush=False).times
    out: dict[str, Any] = {"warm_subject_ms": list(times[0])}
    if len(times) > 1:
        out["warm_control_ms"] = list(times[1])
        pairs = [c / s for s, c in zip(times[0], times[1]) if s > 0 and c > 0]
        if pairs:
            out["warm_ratio"] = statistics.median(pairs)
    return out

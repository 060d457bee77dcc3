"""`[suites.NAME] cache`: whether a suite's kernels are timed with the cache left warm too.

Why: the cold protocol flushes the L2 before every call, which is what a decode step that streams
its weights sees; a skinny GEMM whose operands fit in L2 and is called again at once runs 1.3-1.9x
faster warm (H100, 64x7168x2048), and a step can exist warm and not cold. "cold" (the default):
kernel time after a flush only. "warm": the same, and the kernel time again with no flush between
calls, tested for steps as a shape of its own (`model.WARM_KEY`, "gemm/decode:warm"); a step seen
only there is reported as seen only warm. A pytest-benchmark suite has no flush to leave out.
"""

from __future__ import annotations

from collections.abc import Mapping

from bisector.config.reader import Section
from bisector.config.subjects import Subject
from bisector.errors import ConfigError

CACHES = ("cold", "warm")


def parse_caches(top: Section, names: tuple[str, ...], subjects: Mapping[str, Subject]) -> dict[str, str]:
    """Suite -> "warm" for the suites that ask for it (a suite not named is cold)."""
    out = {}
    suites = top.data.get("suites", {})
    for name in names:
        raw = suites.get(name, {}) if isinstance(suites, Mapping) else {}
        if not isinstance(raw, Mapping) or "cache" not in raw:
            continue
        value = raw["cache"]
        key = f"suites.{name}.cache"
        if value not in CACHES:
            raise ConfigError(top.path, key, f"must be one of {', '.join(CACHES)}, got {value!r}")
        if value == "warm" and name in subjects and subjects[name].adapter == "pytest":
            raise ConfigError(
                top.path, key, f"suite {name} is timed by pytest-benchmark, which has no flush to leave out: only cold"
            )
        if value == "warm":
            out[name] = value
    return out

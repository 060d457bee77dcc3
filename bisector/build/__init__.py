"""Per-commit builds: worktrees, recipes (none | pip | command), a crash-safe cache, prefetch."""

from bisector.build.builder import Builder, patch_hash, toolchain_fingerprint
from bisector.build.prefetch import Prefetcher, bisection_candidates

__all__ = ["Builder", "Prefetcher", "bisection_candidates", "patch_hash", "toolchain_fingerprint"]

"""What a report says about *why* a step happened (issue #14), as frozen data for the renderers:
the compiled kernels' diff across each step, the hunks that had to travel together, and how the
reverts of steps on the same shapes combine on the tip. Computed by bisector/kernels/,
bisector/hunk_groups.py and bisector/interactions.py; read by bisector/report/why.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

# ---- what changed in the compiled kernel ------------------------------------------------------


@dataclass(frozen=True)
class KernelSide:
    """One commit's variant of a kernel: its metadata (launch shape, memory, registers) and its
    instruction histogram (static counts per class)."""

    metadata: Mapping[str, object]
    histogram: Mapping[str, int]
    isa: str = ""  # "ptx" | "amdgcn" | "" (no assembly kept)


@dataclass(frozen=True)
class KernelDiff:
    """A kernel across one step, matched by name between the parent and the culprit, its compiled
    variants paired by specialization."""

    name: str
    signature: str  # argument types of the parent's (else the culprit's) TTIR entry
    status: str  # "changed", "unchanged", "signature changed", "added", "removed", "variant added", "variant removed"
    before: KernelSide | None = None  # the parent's
    after: KernelSide | None = None  # the culprit's
    first_level: str = ""  # the first IR level that differs ("ttir", "ttgir", "llir", "ptx", "amdgcn")
    levels_changed: tuple[str, ...] = ()
    ir_diff: str = ""  # a short unified diff of `first_level` (locations and debug info left out)
    ir_diff_path: str = ""  # the whole diff, next to the report
    variants: int = 1  # compiled variants of this name and signature (specializations)
    changed_values: tuple[str, ...] = ()  # TTIR/TTGIR values whose defining operation changed
    arg_changes: tuple[str, ...] = ()  # arguments added, removed or retyped ("added `page: i32`")
    respecialized: tuple[str, ...] = ()  # how the paired variants' specializations differ

    def metadata_rows(self) -> list[tuple[str, object, object]]:
        """(field, parent, culprit) for every metadata field either side has, changed ones first."""
        b = dict(self.before.metadata) if self.before else {}
        a = dict(self.after.metadata) if self.after else {}
        keys = list(dict.fromkeys([*b, *a]))
        rows = [(k, b.get(k), a.get(k)) for k in keys]
        return sorted(rows, key=lambda r: r[1] == r[2])  # stable: changed first, in field order

    def histogram_rows(self) -> list[tuple[str, int, int]]:
        """(class, parent, culprit) counts, the rows that changed first (largest relative change first)."""
        b = dict(self.before.histogram) if self.before else {}
        a = dict(self.after.histogram) if self.after else {}
        rows = [(k, b.get(k, 0), a.get(k, 0)) for k in sorted(set(b) | set(a))]

        def order(row: tuple[str, int, int]) -> tuple[bool, float, str]:
            _, x, y = row
            return (x == y, -abs(math.log((y + 1) / (x + 1))), row[0])

        return sorted(rows, key=order)


@dataclass(frozen=True)
class StepKernels:
    """The compiled kernels across one verified step (parent -> culprit)."""

    step_commit: str
    parent: str
    kernels: tuple[KernelDiff, ...] = ()  # every kernel either side compiled, changed ones first
    note: str = ""  # why there is nothing to compare (no artifacts kept, a format not read)
    artifacts: str = ""  # where the kept artifacts are, relative to the report

    @property
    def changed(self) -> tuple[KernelDiff, ...]:
        return tuple(k for k in self.kernels if k.status != "unchanged")


# ---- hunks that must travel together ------------------------------------------------------------


@dataclass(frozen=True)
class HunkGroup:
    """Hunks of one commit that are applied together or not at all, and why."""

    members: tuple[int, ...]  # indices into the commit's hunks
    reasons: tuple[str, ...]  # e.g. "`_fwd_kernel` (demolib/triton_fa.py): parameters + FAST_EXP"


# ---- steps that interact ------------------------------------------------------------------------


@dataclass(frozen=True)
class ComboResult:
    """The tip with some reverts applied (none: the tip itself), measured side by side with the rest."""

    reverted: tuple[str, ...]  # culprit SHAs whose reverts are applied
    tflops: Mapping[str, float] = field(default_factory=dict)  # per shape, median subject TFLOP/s
    gain_pct: Mapping[str, float] = field(default_factory=dict)  # per shape, metric change against the tip
    ci95: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    error: str = ""  # did not apply, build or run


@dataclass(frozen=True)
class PairEffect:
    """How two steps combine on one shape, from the reverts measured on the tip.

    `alone_pct`: reverting `a` with `b` still in; `with_other_pct`: reverting `a` once `b` is
    reverted (the gain of both minus the gain of `b`, in log terms). `interaction_pct` is
    gain(a and b) - gain(a) - gain(b) in log terms, with its 95% interval."""

    a: str
    b: str
    shape: str
    alone_pct: float
    with_other_pct: float
    other_alone_pct: float
    other_with_pct: float
    interaction_pct: float
    ci95: tuple[float, float]
    verdict: str  # "add" | "overlap" | "hide" | "unclear"


@dataclass(frozen=True)
class Interaction:
    """Steps whose shapes overlap, their reverts measured on the tip in every combination."""

    steps: tuple[str, ...]  # culprit SHAs, oldest first
    shapes: tuple[str, ...]  # the shapes two or more of them move
    combos: tuple[ComboResult, ...] = ()  # the tip first, then every combination
    pairs: tuple[PairEffect, ...] = ()
    trials: int = 0  # side-by-side trials of each combination
    note: str = ""  # e.g. more than three steps: only the three largest were combined

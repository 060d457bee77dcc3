"""The compiled kernels of two commits, matched and compared: metadata, histograms, the first IR
level that differs and a short diff of it. Pure except for reading the artifacts.

Kernels are matched by name: an argument added, removed or retyped is said as such
(bisector/why/kernel_diff/signature.py), and the compiled variants of one name are paired by their
specialization (identical code first, then the closest specialization, then the most similar
TTGIR); only a name one commit lacks is added or removed. Every level is compared with locations
and debug information left out: each commit is built in its own worktree, so paths and line
numbers differ even where the code does not. The diffs shown also leave out the numbering of SSA
values and registers (`%12`, `%arg3`, `%cst_4`, `%r57`), which one inserted line shifts everywhere.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bisector.why.kernel_diff import artifacts, isa, resources
from bisector.why.kernel_diff import signature as sigs
from bisector.why.kernel_diff.artifacts import LEVELS, Kernel
from bisector.why.kernel_diff.autotune import ChoiceChange

__all__ = [
    "normalize",
    "readable",
    "ir_diff",
    "signature",
    "side",
    "compare",
    "match",
    "diff_kernels",
    "ordered",
    "unified",
    "changed_values",
    "SHORT_DIFF_LINES",
]

SHORT_DIFF_LINES = 40  # lines of the first differing level shown in the report (the file has all)
# json metadata always shown, in this order (NVIDIA, then AMD), under these names
_META = (
    ("num_warps", "num_warps"),
    ("num_stages", "num_stages"),
    ("num_ctas", "num_ctas"),
    ("shared", "shared memory bytes"),
    ("tmem_size", "tensor memory bytes"),
    ("maxnreg", "maxnreg"),
    ("cluster_dims", "cluster_dims"),
    ("enable_fp_fusion", "enable_fp_fusion"),
    ("waves_per_eu", "waves_per_eu"),
    ("matrix_instr_nonkdim", "matrix_instr_nonkdim"),
    ("kpack", "kpack"),
)
# json metadata never compared: differs between any two builds, says nothing about the code
_VOLATILE = {"hash", "name", "extern_libs", "child_paths"}


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
    tile: str = ""  # the variant's largest load/store block, "4x128 -> 2x8x128" where the step changed it

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
    autotune: tuple[ChoiceChange, ...] = ()  # the autotuner's choices either side kept, changed first

    @property
    def choices_changed(self) -> tuple[ChoiceChange, ...]:
        return tuple(c for c in self.autotune if c.changed)

    @property
    def changed(self) -> tuple[KernelDiff, ...]:
        return tuple(k for k in self.kernels if k.status != "unchanged")


def normalize(text: str, level: str) -> str:
    """A level's text without what differs between two builds of the same code."""
    if level in ("ttir", "ttgir"):
        return sigs.strip_locs(text)
    if level == "llir":
        keep = []
        for ln in text.splitlines():
            if (
                ln.startswith("!")
                or ln.startswith("; ModuleID")
                or ln.startswith("source_filename")
                or "@llvm.dbg." in ln
                or ln.lstrip().startswith("#dbg_")
            ):
                continue
            keep.append(re.sub(r",\s*!dbg !\d+", "", ln))
        return "\n".join(keep)
    if level in ("ptx", "amdgcn"):
        keep = []
        for ln in text.splitlines():
            s = ln.strip()
            if re.match(r"\.section\s+\.?debug", s):
                break  # debug sections close the file
            if s.startswith((".loc", ".file", "//", ";")) or re.fullmatch(r"[$.]L(__)?tmp\d+:", s):
                continue
            keep.append(ln.split("//", 1)[0].rstrip() if level == "ptx" else ln.split(";", 1)[0].rstrip())
        return "\n".join(keep)
    return text


# SSA and register numbering: `%12`, `%arg3`, `%cst_4` / `%c8_i32_2` (MLIR), `%r57`, `%rd3` (PTX),
# and branch labels, each reduced to its name without the number
_NUMBERING = {
    "ttir": ((r"%\d+\b", "%_"), (r"%arg\d+\b", "%arg"), (r"(%[A-Za-z_][\w$.]*?)_\d+\b", r"\1"), (r"\^bb\d+", "^bb")),
    "llir": ((r"%\d+\b", "%_"), (r"(%[A-Za-z_.][\w$.]*?)\d+\b", r"\1"), (r"\b(\d+):(?=\s*(;|$))", "_:")),
    "ptx": ((r"%([a-z]+)\d+\b", r"%\1"), (r"\$L__BB\d+_\d+", "$L__BB")),
    "amdgcn": ((r"\.LBB\d+_\d+", ".LBB"),),
}
_NUMBERING["ttgir"] = _NUMBERING["ttir"]


def readable(text: str, level: str) -> str:
    """A level's text for a diff a person reads: `normalize`d, and without SSA and register numbers."""
    text = normalize(text, level)
    for pattern, repl in _NUMBERING.get(level, ()):
        text = re.sub(pattern, repl, text)
    return text


def ir_diff(before: str, after: str, level: str, limit: int | None = None) -> str:
    """The diff of one level without renumbering noise; the plain diff where only numbering moved."""
    text = unified(readable(before, level), readable(after, level), level, limit)
    return text or unified(normalize(before, level), normalize(after, level), level, limit)


def signature(kernel: Kernel) -> str:
    """The entry's argument types with their attributes, from the TTIR (else the PTX parameters)."""
    text = sigs.entry_text(kernel)
    if text is not None:
        return " ".join(re.sub(r"%[\w.$-]+:\s*", "", text).split())
    ptx = kernel.text("ptx")
    if ptx:
        return ", ".join(re.findall(r"\.param\s+(\.[\w.]+(?:\s+\.[\w.]+)*)\s+\w+_param_\d+", ptx))
    return ""


def side(kernel: Kernel) -> KernelSide:
    """A kernel's metadata (json, tools, assembly) and instruction histogram."""
    meta: dict[str, object] = {}
    for key, label in _META:
        if key in kernel.metadata:
            meta[label] = kernel.metadata[key]
    for key in sorted(kernel.metadata):
        if key not in dict(_META) and key not in _VOLATILE:
            meta[key] = kernel.metadata[key]
    ptxas = kernel.tool_output(artifacts.PTXAS)
    cuobj = kernel.tool_output(artifacts.CUOBJDUMP)
    if cuobj:
        meta.update(resources.parse_cuobjdump(cuobj, kernel.name))
    if ptxas:
        meta.update(resources.parse_ptxas(ptxas))  # registers agree with cuobjdump; ptxas adds spills
    text, kind = kernel.text("ptx"), "ptx"
    if text is None:
        text, kind = kernel.text("amdgcn"), "amdgcn"
    if text is None:
        return KernelSide(meta, {}, "")
    if kind == "amdgcn":
        meta.update(resources.parse_amdgcn(text))
    return KernelSide(meta, isa.histogram(text, kind), kind)


def _short_types(sig: str) -> str:
    """For the reader: the types only (`!tt.ptr<bf16> {tt.divisibility = 16 : i32}` -> `*bf16`)."""
    sig = re.sub(r"\s*\{[^}]*\}", "", sig)
    return re.sub(r"!tt\.ptr<([^>]+)>", r"*\1", sig)


def compare(
    before: Kernel | None, after: Kernel | None, status: str, variants: int = 1, arg_changes: tuple[str, ...] = ()
) -> KernelDiff:
    """One kernel across a step; `status` says how the two were matched (or that one is missing);
    `arg_changes` are the kernel's arguments added, removed or retyped (over all its variants)."""
    name = (before or after).name  # type: ignore[union-attr]
    sig = _short_types(signature(before or after))  # type: ignore[arg-type]
    if before is not None and after is not None and arg_changes:
        sig, status = f"{sig} -> {_short_types(signature(after))}", "signature changed"
    tile = sigs.tile_text(before, after)
    if before is None or after is None:
        return KernelDiff(
            name,
            sig,
            status,
            side(before) if before else None,
            side(after) if after else None,
            variants=variants,
            arg_changes=arg_changes,
            tile=tile,
        )
    changed, first, short = [], "", ""
    values: tuple[str, ...] = ()
    for level in LEVELS:
        a, b = before.text(level), after.text(level)
        if a is None or b is None:
            continue
        na, nb = normalize(a, level), normalize(b, level)
        if na != nb:
            changed.append(level)
            if not first:
                first = level
                short = ir_diff(a, b, level, SHORT_DIFF_LINES)
                values = changed_values(na, nb) if level in ("ttir", "ttgir") else ()
    s_before, s_after = side(before), side(after)
    if not changed and s_before.metadata != s_after.metadata:
        changed.append("metadata")
    kind = status if status != "matched" else ("changed" if changed else "unchanged")
    return KernelDiff(
        name,
        sig,
        kind,
        s_before,
        s_after,
        first,
        tuple(changed),
        short,
        variants=variants,
        changed_values=values,
        arg_changes=arg_changes,
        respecialized=sigs.respecialized(before, after, arg_changes),
        tile=tile,
    )


_DEF = re.compile(r"^\s*%([A-Za-z_][\w$.]*?)(?:_\d+)?(?::\d+)?\s*=\s*(.*)$")


def changed_values(a: str, b: str, limit: int = 12) -> tuple[str, ...]:
    """MLIR values whose defining operation differs between two texts, by the name Triton gives them
    (the Python variable: `off_hz`, `per_group`, `a`), with the numbering of SSA names left out, so
    that a value renumbered by an earlier change does not count. Unnamed values are left out."""

    def defs(text: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for line in text.splitlines():
            m = _DEF.match(line)
            if m and not m.group(1).isdigit():
                out[m.group(1)].append(re.sub(r"(%[A-Za-z_][\w$.]*?)_\d+\b", r"\1", m.group(2)))
        return out

    da, db = defs(a), defs(b)
    order = list(dict.fromkeys([*db, *da]))
    changed = [name for name in order if sorted(da.get(name, [])) != sorted(db.get(name, []))]
    return tuple(changed[:limit]) + (("...",) if len(changed) > limit else ())


def unified(a: str, b: str, level: str, limit: int | None = None) -> str:
    """A unified diff (2 lines of context) of one level, cut to `limit` lines with a note."""
    lines = list(
        difflib.unified_diff(a.splitlines(), b.splitlines(), f"parent.{level}", f"culprit.{level}", n=2, lineterm="")
    )
    if limit is not None and len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines) + ("\n" if lines else "")


def _pairs(
    before: list[Kernel], after: list[Kernel], changes: Sequence[str] = ()
) -> list[tuple[Kernel | None, Kernel | None]]:
    """Variants of one name paired: identical ones first, then by the closest specialization, then by
    the most alike tiles (the block widths a shape fixes: `signature.tile_overlap`), the most similar
    TTGIR deciding between equally close ones."""

    def key(k: Kernel) -> str:
        return "\n".join(normalize(k.text(lv) or "", lv) for lv in k.levels())

    def code(k: Kernel) -> str:
        return normalize(k.text("ttgir") or k.text("ttir") or "", "ttgir")

    left, right = list(before), list(after)
    pairs: list[tuple[Kernel | None, Kernel | None]] = []
    for b in list(left):
        same = next((a for a in right if key(a) == key(b)), None)
        if same is not None:
            pairs.append((b, same))
            left.remove(b)
            right.remove(same)
    # every remaining (before, after) by specialization distance, then dissimilarity: closest first
    ranked = sorted(
        (
            (
                sigs.distance(b, a, changes),
                -sigs.tile_overlap(b, a),
                -difflib.SequenceMatcher(None, code(b), code(a)).quick_ratio(),
                i,
                j,
            )
            for i, b in enumerate(left)
            for j, a in enumerate(right)
        )
    )
    used_b: set[int] = set()
    used_a: set[int] = set()
    for *_, i, j in ranked:
        if i not in used_b and j not in used_a:
            pairs.append((left[i], right[j]))
            used_b.add(i)
            used_a.add(j)
    pairs += [(b, None) for i, b in enumerate(left) if i not in used_b]
    pairs += [(None, a) for j, a in enumerate(right) if j not in used_a]
    return pairs


Match = tuple[Kernel | None, Kernel | None, str, int, tuple[str, ...]]  # before, after, how, variants, arg changes


def match(before: Sequence[Kernel], after: Sequence[Kernel]) -> list[Match]:
    """Every kernel of either commit, paired by name; its variants paired by specialization. A
    variant left without a partner is a "variant added" or "variant removed"; a name only one
    commit has is "added" or "removed"."""
    out: list[Match] = []
    for name in dict.fromkeys([k.name for k in before] + [k.name for k in after]):
        b = [k for k in before if k.name == name]
        a = [k for k in after if k.name == name]
        if not b or not a:
            out += [(k, None, "removed", len(b), ()) for k in b] + [(None, k, "added", len(a), ()) for k in a]
            continue
        changes = sigs.arg_changes(b, a)
        pairs = _pairs(b, a, changes)
        variants = max(len(b), len(a))
        out += [
            (x, y, "matched" if x and y else ("variant removed" if x else "variant added"), variants, changes)
            for x, y in pairs
        ]
    return out


_RANK = {
    "changed": 0,
    "signature changed": 0,
    "added": 1,
    "removed": 1,
    "variant added": 1,
    "variant removed": 1,
    "unchanged": 2,
}


def diff_kernels(before: Sequence[Kernel], after: Sequence[Kernel]) -> tuple[KernelDiff, ...]:
    """Every kernel of either commit, compared: changed (and signature-changed) first, then added,
    removed, and unchanged ones last."""
    return ordered([compare(*m) for m in match(before, after)])


def ordered(diffs: Sequence[KernelDiff]) -> tuple[KernelDiff, ...]:
    return tuple(sorted(diffs, key=lambda d: (_RANK.get(d.status, 3), d.name)))

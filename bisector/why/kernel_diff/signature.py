"""A compiled kernel's arguments and specialization, and how two commits' differ. Pure except for
reading the artifacts.

Triton compiles one variant per specialization of a kernel: the constexpr values, the integer
arguments equal to 1 (folded away, no longer an argument), the divisibility by 16 of pointers and
integers (`tt.divisibility` on the argument), and the launch options (warps, stages, CTAs). The
`.json` metadata of Triton 3 holds the options; older Triton (and a JIT hook that records them)
also wrote `signature` and `constants`, read here when present. The arguments themselves come from
the TTIR entry, where each one keeps its Python name.

A step that adds an argument to a kernel changes its signature, not its identity: kernels are
matched by name, the argument change is said as such, and the variants are paired by how close
their specializations are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bisector.why.kernel_diff.artifacts import Kernel

__all__ = [
    "LAUNCH_OPTIONS",
    "Arg",
    "args",
    "entry_text",
    "arg_changes",
    "specialization",
    "distance",
    "respecialized",
    "short_type",
    "tiles",
    "tile_overlap",
    "tile_text",
]

# the launch options that make a variant (autotuner configs), as the json names them
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# keys older Triton (or a JIT hook) wrote with the constexpr values of the variant
_CONSTANT_KEYS = ("constants", "constexprs")


@dataclass(frozen=True)
class Arg:
    """One entry argument: its Python name, its type and its specialization attributes."""

    name: str
    type: str  # "!tt.ptr<bf16>", "i32", "f32"
    attrs: str = ""  # "tt.divisibility = 16 : i32" (empty: not specialized)


def short_type(t: str) -> str:
    """`!tt.ptr<bf16>` -> `*bf16`, for the reader."""
    return re.sub(r"!tt\.ptr<([^>]+)>", r"*\1", t)


def strip_locs(text: str) -> str:
    """MLIR without `loc(...)` annotations (nested parentheses) and without `#locN = ...` lines."""
    lines = [ln for ln in text.splitlines() if not re.match(r"\s*#loc\d*\s*=", ln)]
    text = "\n".join(lines)
    out, i = [], 0
    for m in re.finditer(r"\s?\bloc\(", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        out.append(text[i : m.start()])
        i = j
    out.append(text[i:])
    return "".join(out)


def _split_top(text: str) -> list[str]:
    """`text` split at commas outside (), <>, {} and []."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += {"(": 1, "<": 1, "{": 1, "[": 1, ")": -1, ">": -1, "}": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


def entry_text(kernel: Kernel) -> str | None:
    """The text between the parentheses of the TTIR (else TTGIR) entry, locations left out."""
    ttir = kernel.text("ttir") or kernel.text("ttgir")
    if not ttir:
        return None
    text = strip_locs(ttir)
    start = text.find(f"@{kernel.name}(")
    if start < 0:
        return None
    i = j = start + len(kernel.name) + 2
    depth = 1
    while j < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1]


def _json_args(kernel: Kernel) -> tuple[Arg, ...]:
    """The json's `signature` ({name or index: type}) when a Triton that writes one made it."""
    sig = kernel.metadata.get("signature")
    if not isinstance(sig, Mapping):
        return ()
    return tuple(Arg(str(k), str(v)) for k, v in sig.items() if str(v) != "constexpr")


def args(kernel: Kernel) -> tuple[Arg, ...]:
    """The entry's arguments from the TTIR (named as in Python), else the json's signature, else
    the PTX parameters (named by position)."""
    text = entry_text(kernel)
    if text is not None:
        out = []
        for i, part in enumerate(_split_top(text)):
            m = re.match(r"\s*%([\w.$-]+)\s*:\s*(.*)$", part, re.S)
            if not m:
                continue
            rest = " ".join(m.group(2).split())
            attrs = re.search(r"\{(.*)\}\s*$", rest)
            typ = rest[: attrs.start()].strip() if attrs else rest
            name = m.group(1) if not re.fullmatch(r"arg\d+", m.group(1)) else f"#{i}"
            out.append(Arg(name, typ, attrs.group(1).strip() if attrs else ""))
        return tuple(out)
    found = _json_args(kernel)
    if found:
        return found
    ptx = kernel.text("ptx") or ""
    params = re.findall(r"\.param\s+(\.[\w.]+(?:\s+\.[\w.]+)*)\s+\w+_param_(\d+)", ptx)
    return tuple(Arg(f"#{n}", t) for t, n in params)


def _union(variants: Iterable[Kernel]) -> dict[str, str]:
    """name -> type over every variant of one side (a variant may lack an argument specialized to 1)."""
    out: dict[str, str] = {}
    for k in variants:
        for a in args(k):
            out.setdefault(a.name, a.type)
    return out


def arg_changes(before: Sequence[Kernel], after: Sequence[Kernel]) -> tuple[str, ...]:
    """The arguments added, removed or retyped between every variant of a kernel in the parent and
    in the culprit, e.g. ("added `page_stride: i32`", "retyped `K`: i32 -> i64")."""
    b, a = _union(before), _union(after)
    out = [f"added `{n}: {short_type(t)}`" for n, t in a.items() if n not in b]
    out += [f"removed `{n}: {short_type(t)}`" for n, t in b.items() if n not in a]
    out += [f"retyped `{n}`: {short_type(b[n])} -> {short_type(t)}" for n, t in a.items() if n in b and b[n] != t]
    return tuple(out)


def _attr_text(attrs: str) -> str:
    m = re.search(r"tt\.divisibility\s*=\s*(\d+)", attrs)
    return f"divisible by {m.group(1)}" if m else (attrs or "not specialized")


def specialization(kernel: Kernel) -> dict[str, str]:
    """What makes this variant: each argument's attributes (or "absent": specialized to a constant),
    the json's constexpr values when it has them, and the launch options."""
    out = {f"`{a.name}`": _attr_text(a.attrs) for a in args(kernel)}
    for key in _CONSTANT_KEYS:
        consts = kernel.metadata.get(key)
        if isinstance(consts, Mapping):
            out.update({f"`{k}`": f"= {v}" for k, v in consts.items()})
    for key in LAUNCH_OPTIONS:
        if kernel.metadata.get(key) is not None:
            out[key] = str(kernel.metadata[key])
    return out


def _comparable(b: Mapping[str, str], a: Mapping[str, str], changed_args: Sequence[str]) -> list[str]:
    """Keys where two specializations differ, leaving out the arguments the step added or removed."""
    skip = {
        f"`{m.group(1)}`"
        for c in changed_args
        if c.startswith(("added", "removed"))
        for m in [re.search(r"`([^`:]+)", c)]
        if m
    }
    keys = [k for k in dict.fromkeys([*b, *a]) if k not in skip]
    return [k for k in keys if b.get(k, "absent") != a.get(k, "absent")]


def distance(before: Kernel, after: Kernel, changed_args: Sequence[str] = ()) -> int:
    """How many specialization keys differ between two variants (0: the same specialization)."""
    return len(_comparable(specialization(before), specialization(after), changed_args))


def respecialized(before: Kernel, after: Kernel, changed_args: Sequence[str] = ()) -> tuple[str, ...]:
    """What differs in the specialization of two paired variants, e.g. "`K`: divisible by 16 -> absent"."""
    b, a = specialization(before), specialization(after)
    return tuple(
        f"{k}: {b.get(k, 'absent')} -> {a.get(k, 'absent')}"
        for k in _comparable(b, a, changed_args)
        if k.startswith("`")
    )  # the launch options are the metadata's rows


_TILE = re.compile(r"\btt\.(?:load|store)\b[^\n]*?:\s*tensor<((?:\d+x)+)!tt\.ptr<")


def tiles(kernel: Kernel) -> tuple[tuple[int, ...], ...]:
    """The block shape of each tensor load and store in the TTIR (else TTGIR), in program order: what
    a program instance moves. Triton 3 keeps no constexpr values in its metadata; the tiles are where
    they show (`BLOCK_M`, `BLOCK_K`), so they tell the variants of one kernel apart across a commit
    that renames or retypes their arguments."""
    text = kernel.text("ttir") or kernel.text("ttgir") or ""
    return tuple(tuple(int(n) for n in m.group(1).rstrip("x").split("x")) for m in _TILE.finditer(text))


def tile_overlap(before: Kernel, after: Kernel) -> float:
    """How alike two variants' tiles are, 0 to 1: the innermost (contiguous) dimension of each load
    and store counted, the share the two have in common. The innermost dimension is the head or
    block width a shape fixes; the outer ones are the blocking over rows a commit may change."""

    def inner(k: Kernel) -> dict[int, int]:
        out: dict[int, int] = {}
        for t in tiles(k):
            out[t[-1]] = out.get(t[-1], 0) + 1
        return out

    b, a = inner(before), inner(after)
    total = max(sum(b.values()), sum(a.values()))
    return sum(min(n, a.get(d, 0)) for d, n in b.items()) / total if total else 0.0


def _largest(kernel: Kernel) -> str:
    found = tiles(kernel)
    if not found:
        return ""
    big = max(found, key=lambda t: (math.prod(t), len(t)))
    return "x".join(map(str, big))


def tile_text(before: Kernel | None, after: Kernel | None) -> str:
    """The largest tile of a variant, across the step where it changed: "4x128 -> 2x8x128", "8x32"."""
    b, a = (_largest(k) if k is not None else "" for k in (before, after))
    return a if b == a or not b else b if not a else f"{b} -> {a}"

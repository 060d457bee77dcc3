"""Hunks that must travel together: a changed signature with the hunks that use its new names.

On a real upstream, 6 of 10 subsets of a culprit's hunks failed to import or compile
(`missing 1 required positional argument: 'k_page_stride'`, `got multiple values for argument
'BLOCK_M'`, a Triton CompilationError): a `def` whose parameters changed went without its call
sites. Such a subset says nothing about where the step is, and it costs a build and a trial. So
before the search splits a commit, hunks are grouped, and the search (bisector/why/hunks.py) splits
groups, never a group:

- Python files are read with `ast` at the parent and at the culprit. A function (a `@triton.jit`
  kernel is one) whose parameter list changed, a module- or class-level name that was added or
  removed (a function, class, assignment or import), and a class whose `__slots__` changed are
  each a *change*: the hunks that touch its header (or, for a name, its statement) are its
  anchors, and its names are the function's name and the parameters added or removed (or the
  name, or the slots added or removed).
- Every hunk, in any file, whose changed lines use one of those names as a word is grouped with
  the anchors. Other files are matched by name only: a C++ or CUDA call site of a renamed kernel
  argument moves with it.

Grouping too much costs resolution, never correctness; the report says which groups were formed
and why. Pure: file texts in, groups out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bisector.why.hunks import Hunk

__all__ = ["group", "changed_lines"]

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Source = Callable[[str], "str | None"]  # path -> the file's text at one commit, None if absent


@dataclass(frozen=True)
class HunkGroup:
    """Hunks of one commit that are applied together or not at all, and why."""

    members: tuple[int, ...]  # indices into the commit's hunks
    reasons: tuple[str, ...]  # e.g. "`_fwd_kernel` (demolib/triton_fa.py): parameters + FAST_EXP"


def changed_lines(h: Hunk) -> tuple[set[int], set[int], set[str]]:
    """Old-side line numbers removed, new-side line numbers added, and the words on those lines."""
    m = _HEADER.match(h.header)
    if m is None:
        return set(), set(), set(_WORD.findall(h.body))
    old, new = int(m.group(1)), int(m.group(3))
    removed, added, words = set(), set(), set()
    for line in h.body.splitlines():
        if line.startswith("\\"):
            continue
        tag, text = line[:1], line[1:]
        if tag == "-":
            removed.add(old)
            words.update(_WORD.findall(text))
            old += 1
        elif tag == "+":
            added.add(new)
            words.update(_WORD.findall(text))
            new += 1
        else:
            old += 1
            new += 1
    return removed, added, words


@dataclass(frozen=True)
class _Def:
    """A name bound at module or class level: its parameters or slots, and the lines to watch."""

    name: str
    qualname: str
    kind: str  # "function" | "class" | "name"
    params: tuple[str, ...] | None  # a function's parameter names with their kinds
    slots: tuple[str, ...] | None
    header: tuple[int, int]  # lines of the signature (decorators to the line before the body)
    slot_lines: tuple[int, int] | None


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = node.args
    out = [f"pos:{x.arg}" for x in a.posonlyargs] + [f"arg:{x.arg}" for x in a.args]
    out += [f"*{a.vararg.arg}"] if a.vararg else []
    out += [f"kw:{x.arg}" for x in a.kwonlyargs] + ([f"**{a.kwarg.arg}"] if a.kwarg else [])
    n_def = len(a.defaults)
    positional = a.posonlyargs + a.args
    out += [f"default:{x.arg}" for x in positional[len(positional) - n_def :]] if n_def else []
    out += [f"default:{x.arg}" for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    return tuple(out)


def _slots(node: ast.ClassDef) -> tuple[tuple[str, ...] | None, tuple[int, int] | None]:
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets):
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError:
                value = ()
            names = (value,) if isinstance(value, str) else tuple(str(v) for v in value)
            return names, (stmt.lineno, stmt.end_lineno or stmt.lineno)
    return None, None


def _defs(text: str | None) -> dict[str, _Def] | None:
    """Module- and class-level bindings of a Python file; None when it does not parse (or is absent)."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    out: dict[str, _Def] = {}

    def walk(body: Sequence[ast.stmt], prefix: str) -> None:
        for node in body:
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            end = node.end_lineno or node.lineno
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                header_end = max(node.lineno, node.body[0].lineno - 1)
                out[prefix + node.name] = _Def(
                    node.name, prefix + node.name, "function", _params(node), None, (start, header_end), None
                )
            elif isinstance(node, ast.ClassDef):
                slots, lines = _slots(node)
                header_end = max(node.lineno, node.body[0].lineno - 1)
                out[prefix + node.name] = _Def(
                    node.name, prefix + node.name, "class", None, slots, (start, header_end), lines
                )
                walk(node.body, prefix + node.name + ".")
            else:
                for name in _bound(node):
                    out.setdefault(prefix + name, _Def(name, prefix + name, "name", None, None, (start, end), None))

    walk(tree.body, "")
    return out


def _bound(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    return []


def _touches(span: tuple[int, int] | None, lines: set[int]) -> bool:
    return span is not None and any(span[0] <= ln <= span[1] for ln in lines)


def _changes(
    path: str,
    old: dict[str, _Def] | None,
    new: dict[str, _Def] | None,
    hunk_lines: Sequence[tuple[int, set[int], set[int]]],
) -> list[tuple[set[int], set[str], str]]:
    """(anchor hunks, names their users name, why) for each change in one Python file."""
    old, new = old or {}, new or {}
    out = []
    for qual in dict.fromkeys([*old, *new]):
        before, after = old.get(qual), new.get(qual)

        def anchors(old_span: tuple[int, int] | None, new_span: tuple[int, int] | None) -> set[int]:
            return {i for i, rem, add in hunk_lines if _touches(old_span, rem) or _touches(new_span, add)}

        if before is None or after is None:
            d = before or after
            assert d is not None
            span = (d.header[0], d.header[1]) if d.kind != "name" else d.header
            whole = anchors(span if before else None, span if after else None)
            if whole:
                what = "added" if after else "removed"
                out.append((whole, {d.name}, f"`{d.qualname}` ({path}) {what}"))
            continue
        if before.params is not None and after.params is not None and before.params != after.params:
            names_b = {p.split(":")[-1].lstrip("*") for p in before.params}
            names_a = {p.split(":")[-1].lstrip("*") for p in after.params}
            plus, minus = sorted(names_a - names_b), sorted(names_b - names_a)
            what = ", ".join([*(f"+{n}" for n in plus), *(f"-{n}" for n in minus)]) or "defaults or order"
            out.append(
                (
                    anchors(before.header, after.header),
                    {after.name, *plus, *minus},
                    f"`{after.qualname}` ({path}): parameters {what}",
                )
            )
        if before.slots != after.slots and (before.slots or after.slots):
            sb, sa = set(before.slots or ()), set(after.slots or ())
            what = ", ".join([*(f"+{n}" for n in sorted(sa - sb)), *(f"-{n}" for n in sorted(sb - sa))])
            out.append(
                (
                    anchors(before.slot_lines, after.slot_lines),
                    (sa ^ sb) or {after.name},
                    f"`{after.qualname}.__slots__` ({path}): {what or 'reordered'}",
                )
            )
    return out


def group(parts: Sequence[Hunk], old: Source, new: Source) -> tuple[HunkGroup, ...]:
    """The commit's hunks as groups to search over, in commit order: every hunk in exactly one group;
    a group of more than one hunk says why (one reason per change that joined it)."""
    parent = list(range(len(parts)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    lines = [changed_lines(h) for h in parts]
    reasons: list[tuple[set[int], str]] = []
    for path in dict.fromkeys(h.path for h in parts):
        if not path.endswith((".py", ".pyi")):
            continue
        in_file = [(i, lines[i][0], lines[i][1]) for i, h in enumerate(parts) if h.path == path]
        for anchors, names, why in _changes(path, _defs(old(path)), _defs(new(path)), in_file):
            users = {i for i, (_, _, words) in enumerate(lines) if i not in anchors and words & names}
            members = anchors | users
            if len(members) < 2:
                continue
            labels = "; ".join(parts[i].label for i in sorted(users)) or "its other hunks"
            reasons.append(
                (members, f"{why}, with the hunks that use {', '.join(sorted(names))}: {labels}" if users else why)
            )
            first = min(members)
            for i in members:
                parent[find(i)] = find(first)
    groups: dict[int, list[int]] = {}
    for i in range(len(parts)):
        groups.setdefault(find(i), []).append(i)
    out = []
    for grouped in sorted(groups.values(), key=lambda m: m[0]):
        whys = tuple(r for m, r in reasons if set(m) <= set(grouped))
        out.append(HunkGroup(tuple(grouped), whys))
    return tuple(out)

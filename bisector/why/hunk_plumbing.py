"""Plumbing apart from the change: a culprit that threads a new name through every caller.

On a real upstream a culprit added one integer argument to an attention kernel: the argument went
through a slots tuple, a constructor, five call sites and two kernel signatures (plumbing), and three
hunks changed behaviour (an index cast, the address arithmetic, the argument kept out of
specialization). Grouping (bisector/hunk_groups.py) rightly tied every use of the new name to its
signature, so all 15 hunks became one group and the search had nothing to split.

Here each hunk is cut into its statements (a change block of a hunk, split where the parent's and
the culprit's statements pair up), and each piece is read with `ast`: applied alone to the parent,
a piece whose only difference is a new name threaded through (a parameter, an argument passed, a
keyword, a `__slots__` entry, an assignment to or import of the new name, a new definition) is
*plumbing*: with the new value equal to what the old code used, behaviour is unchanged. The plumbing
is applied to the parent as a base, and the search runs over the other pieces on top of it. The plan
is checked before it is searched (`hunk_checks.plan` makes it), and a subset whose patched Python
files do not compile, whose calls would not bind or that reads a name nothing binds is skipped
before it is built (bisector/why/hunk_calls.py).

Pure: file texts in, pieces and patches out.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bisector.why import hunk_calls
from bisector.why.hunks import Hunk, patch_of

_Line = tuple[int, tuple[int, int] | None]  # a body line and the statement (first, last line) it is in
_Param = tuple[ast.arg, ast.expr | None]  # a parameter and its default

__all__ = ["Piece", "Plan", "pieces_of", "apply_text", "new_names", "is_plumbing"]

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Source = Callable[[str], "str | None"]  # path -> the file's text at one commit, None if absent

#: grouping "puts most hunks into one group" when its largest group holds more than this share
MOST = 0.5


@dataclass(frozen=True)
class Piece:
    """Some change lines of one hunk (`keep`: indices into its body's lines; None: the whole hunk)."""

    hunk: int
    keep: tuple[int, ...] | None
    label: str
    plumbing: bool = False


@dataclass(frozen=True)
class Plan:
    """The plumbing base and the pieces to search over, with what they came from."""

    parts: tuple[Hunk, ...]
    base: tuple[Piece, ...]
    pieces: tuple[Piece, ...]  # behaviour-changing: the search's units
    unsplit: tuple[str, ...] = ()  # hunks or files kept whole, and why: their statements do not parse apart
    base_error: str = ""  # why the base alone would not compile or bind ("" when it does)

    @property
    def plumbing_hunks(self) -> tuple[int, ...]:
        """Hunks that are all plumbing (no piece of theirs is searched)."""
        searched = {p.hunk for p in self.pieces}
        return tuple(sorted({p.hunk for p in self.base} - searched))

    @property
    def behaviour_hunks(self) -> tuple[int, ...]:
        return tuple(sorted({p.hunk for p in self.pieces}))

    def chosen(self, subset: Sequence[int]) -> tuple[Piece, ...]:
        return (*self.base, *(self.pieces[i] for i in subset))

    def hunks_of(self, subset: Sequence[int]) -> tuple[Hunk, ...]:
        """The base and the chosen pieces as hunks of the parent, one per hunk touched, in commit order."""
        keep: dict[int, set[int] | None] = {}
        for p in self.chosen(subset):
            if p.keep is None or keep.get(p.hunk, set()) is None:
                keep[p.hunk] = None
            else:
                keep.setdefault(p.hunk, set()).update(p.keep)  # type: ignore[union-attr]
        return tuple(self.parts[i] if k is None else partial(self.parts[i], k) for i, k in sorted(keep.items()))

    def patch(self, subset: Sequence[int]) -> str:
        return patch_of(self.hunks_of(subset))

    def compile_error(self, subset: Sequence[int], old: Source, new: Source | None = None) -> str:
        """Why the parent with the base and `subset` applied is not valid Python ("" when it is):
        a touched file that does not compile, or (given the culprit's files, `new`) a call in the
        commit's Python files that would not bind (bisector/why/hunk_calls.py)."""
        chosen = self.hunks_of(subset)
        patched = {}
        for path in dict.fromkeys(h.path for h in self.parts):
            if not path.endswith(".py") or any(not h.header for h in self.parts if h.path == path):
                continue
            text = old(path)
            if text is None:
                continue
            patched[path] = apply_text(text, [h for h in chosen if h.path == path])
            if not any(h.path == path for h in chosen):
                continue
            try:
                compile(patched[path], path, "exec")
            except (SyntaxError, ValueError) as e:
                return f"does not compile: {path}:{getattr(e, 'lineno', '?')}: {getattr(e, 'msg', e)}"
        if new is None or not patched:
            return ""
        errors = hunk_calls.new_errors(patched, {p: old(p) or "" for p in patched}, {p: new(p) or "" for p in patched})
        return "would not run: " + "; ".join(errors) if errors else ""


def _counts(m: re.Match[str]) -> tuple[int, int, int, int]:
    a, b, c, d = m.group(1), m.group(2), m.group(3), m.group(4)
    return int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d)


def partial(h: Hunk, keep: set[int] | frozenset[int] | tuple[int, ...]) -> Hunk:
    """`h` with only the change lines `keep` (body line indices): other removals become context and
    other additions are left out, so the old side (and so the header's old range) is unchanged."""
    m = _HEADER.match(h.header)
    if m is None:
        raise ValueError(f"not a hunk header: {h.header!r}")
    old_start, old_len, new_start, _ = _counts(m)
    body: list[str] = []
    block: list[tuple[int, str]] = []
    for i, line in [*enumerate(h.body.splitlines(keepends=True)), (-1, " ")]:
        if line[:1] in "-+":
            block.append((i, line))
            continue
        body += _block(block, keep)
        block = []
        if i >= 0:
            body.append(line)
    text = "".join(body)
    new_len = sum(ln[:1] in (" ", "+") for ln in body)
    header = f"@@ -{old_start},{old_len} +{new_start},{new_len} @@{m.group(5)}"
    return Hunk(h.path, h.file_header, header, text)


def _block(lines: list[tuple[int, str]], keep: set[int] | frozenset[int] | tuple[int, ...]) -> list[str]:
    """One change block with only the `keep` lines: the old lines in order (a removal not kept stays
    as context), the added lines kept put where they stood against the additions left out (those
    the old lines left in stand for): before the first old line left in when they came before the
    first addition left out, after the block's old lines otherwise."""
    old = [(i, ln) for i, ln in lines if ln[:1] == "-"]
    new = [(i, ln) for i, ln in lines if ln[:1] == "+"]
    first_out = next((k for k, (i, _) in enumerate(new) if i not in keep), len(new))
    pre = [ln for i, ln in new[:first_out] if i in keep]
    post = [ln for i, ln in new[first_out:] if i in keep]
    stay = next((k for k, (i, _) in enumerate(old) if i not in keep), len(old))
    olds = [ln if i in keep else " " + ln[1:] for i, ln in old]
    return olds[:stay] + pre + olds[stay:] + post


def apply_text(text: str, file_hunks: Sequence[Hunk]) -> str:
    """`text` with hunks of its file applied in memory (old-side line numbers, in order)."""
    old = text.splitlines(keepends=True)
    out: list[str] = []
    at = 0  # old lines copied so far
    headed = [(_counts(_HEADER.match(h.header)), h) for h in file_hunks]  # type: ignore[arg-type]
    for (start, length, _, _), h in sorted(headed, key=lambda x: x[0][0]):
        first = start if length == 0 else start - 1
        out += old[at:first]
        at = first
        for line in h.body.splitlines(keepends=True):
            tag, rest = line[:1], line[1:]
            if tag == " ":
                out.append(old[at] if at < len(old) else rest)
                at += 1
            elif tag == "-":
                at += 1
            elif tag == "+":
                out.append(rest if rest.endswith("\n") else rest + "\n")
    return "".join(out + old[at:])


# ---- statements: where a hunk's change lines fall ----------------------------------------------


def _innermost(tree: ast.AST | None) -> dict[int, tuple[int, int]]:
    """Line -> the span of the smallest statement holding it (decorators count as their def's)."""
    out: dict[int, tuple[int, int]] = {}
    if tree is None:
        return out
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        end = node.end_lineno or node.lineno
        body_start = min((s.lineno for s in getattr(node, "body", []) if isinstance(s, ast.stmt)), default=end + 1)
        for line in range(start, end + 1):
            span = out.get(line)
            # a compound statement owns its header lines; its body's lines belong to its body
            if line >= body_start and isinstance(getattr(node, "body", None), list):
                continue
            if span is None or span[1] - span[0] > end - start:
                out[line] = (start, end)
    return out


def _parse(text: str | None) -> ast.Module | None:
    if text is None:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _runs(keys: list[tuple[int, tuple[int, int] | None]]) -> list[list[int]]:
    """Consecutive body indices with the same statement: lines outside any statement, and lines of a
    statement nested in the run's (an added `if` and its body), join the run before."""
    runs: list[list[int]] = []
    last: tuple[int, int] | None = None
    for i, key in keys:
        if runs and (key is None or last is None or last[0] <= key[0] <= key[1] <= last[1]):
            runs[-1].append(i)
            last = last or key
            continue
        runs.append([i])
        last = key
    return runs


def statement_pieces(h: Hunk, old_tree: ast.AST | None, new_tree: ast.AST | None) -> list[tuple[int, ...]]:
    """The hunk's change lines cut into statements: body-line index sets, each of which still applies.

    A change block (a run of removed and added lines) is cut where its removed statements and its
    added statements pair up one to one (or where it only adds or only removes); otherwise it stays
    whole."""
    m = _HEADER.match(h.header)
    if m is None:
        return []
    old_at, _, new_at, _ = _counts(m)
    old_of, new_of = _innermost(old_tree), _innermost(new_tree)
    blocks: list[tuple[list[_Line], list[_Line]]] = []  # (removed, added) per run of changed lines
    in_block = False
    for i, line in enumerate(h.body.splitlines()):
        tag = line[:1]
        if tag == "-":
            if not in_block:
                blocks.append(([], []))
            blocks[-1][0].append((i, old_of.get(old_at)))
            old_at, in_block = old_at + 1, True
        elif tag == "+":
            if not in_block:
                blocks.append(([], []))
            blocks[-1][1].append((i, new_of.get(new_at)))
            new_at, in_block = new_at + 1, True
        elif tag == "\\":
            continue
        else:
            old_at, new_at, in_block = old_at + 1, new_at + 1, False
    lines = h.body.splitlines()
    out: list[tuple[int, ...]] = []
    for removed, added in blocks:
        r, a = _runs(removed), _runs(added)
        if len(r) == len(a):
            out += [tuple(x + y) for x, y in zip(r, a)]
        else:
            out += _pair(r, a, lambda run: "\n".join(lines[i][1:].strip() for i in run))
    return sorted(out)


def _pair(removed: list[list[int]], added: list[list[int]], text: Callable[[list[int]], str]) -> list[tuple[int, ...]]:
    """Removed and added statements paired in order where their text is alike (a statement edited):
    each with the most alike one left, a statement of its own kind (`return` with `return`) before
    any other; the others stand alone (a statement only added or only removed). Pairing a `return`
    with a new assignment would leave a piece that drops the function's result."""

    def alike(a: str, b: str) -> float:  # the same first word (`return`, `if`, an assignment's target) first
        return difflib.SequenceMatcher(None, a, b).ratio() + (a.split(" ", 1)[0] == b.split(" ", 1)[0])

    out: list[tuple[int, ...]] = []
    at = 0
    for run in removed:
        scores = [
            (alike(text(run), text(added[j])), -j, j)
            for j in range(at, len(added))
            if difflib.SequenceMatcher(None, text(run), text(added[j])).ratio() >= 0.6
        ]
        match = max(scores)[2] if scores else None
        if match is None:
            out.append(tuple(run))
            continue
        out += [tuple(x) for x in added[at:match]]
        out.append(tuple(run + added[match]))
        at = match + 1
    return out + [tuple(x) for x in added[at:]]


# ---- plumbing: a piece that only threads new names through -------------------------------------


def _identifiers(tree: ast.AST | None) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _IDENT.match(node.value):
            out.add(node.value)
    return out


def new_names(olds: Sequence[str | None], news: Sequence[str | None]) -> frozenset[str]:
    """Identifiers the culprit's Python files use that its parent's do not."""
    before = set().union(*(_identifiers(_parse(t)) for t in olds))
    after = set().union(*(_identifiers(_parse(t)) for t in news))
    return frozenset(after - before)


def widened(olds: Sequence[str | None], news: Sequence[str | None]) -> frozenset[str]:
    """Functions, and classes whose `__init__`, gained a parameter: their calls may pass the new
    value positionally, as any expression (`Meta(q, k.stride(1), ...)`), and that is threading."""

    def params(text: str | None) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for node in ast.walk(_parse(text) or ast.Module([], [])):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                out.setdefault(node.name, set()).update(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs)
            elif isinstance(node, ast.ClassDef):  # a class is called through its __init__
                for init in node.body:
                    if isinstance(init, (ast.FunctionDef, ast.AsyncFunctionDef)) and init.name == "__init__":
                        a = init.args
                        out.setdefault(node.name, set()).update(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs)
        return out

    before: dict[str, set[str]] = {}
    for t in olds:
        for k, v in params(t).items():
            before.setdefault(k, set()).update(v)
    return frozenset(k for t in news for k, v in params(t).items() if k in before and v - before[k])


class _Same:
    """ast equality that lets the new side carry plumbing the old side lacks."""

    def __init__(self, names: frozenset[str], callees: frozenset[str]) -> None:
        self.names, self.callees = names, callees

    def _chain_new(self, e: ast.AST) -> bool:
        """A name or attribute chain that names a new identifier (`pages`, `self.pages`, `s.pages`)."""
        while isinstance(e, ast.Attribute):
            if e.attr in self.names:
                return True
            e = e.value
        return isinstance(e, ast.Name) and e.id in self.names

    def _target_new(self, t: ast.AST) -> bool:
        if isinstance(t, (ast.Tuple, ast.List)):
            return all(self._target_new(x) for x in t.elts)
        return (isinstance(t, ast.Name) and t.id in self.names) or (
            isinstance(t, ast.Attribute) and t.attr in self.names
        )

    @classmethod
    def _passed(cls, e: ast.AST | None) -> bool:
        """A value handed along, not computed: a name or attribute chain, a constant, or a call of
        such values (`kv_stride`, `self.kv_stride`, `k.stride(1)`). Arithmetic, a comprehension or
        an index on it computes with the new name: that is behaviour."""
        if e is None or isinstance(e, (ast.Name, ast.Constant)):
            return True
        if isinstance(e, ast.Attribute):
            return cls._passed(e.value)
        if isinstance(e, (ast.Tuple, ast.List)):  # a shape: torch.empty((n, m), ...)
            return all(cls._passed(x) for x in e.elts)
        if isinstance(e, ast.Call):
            return (
                cls._passed(e.func)
                and all(cls._passed(a) for a in e.args)
                and all(cls._passed(k.value) for k in e.keywords)
            )
        return False

    def _extra_stmt(self, s: ast.stmt) -> bool:
        if isinstance(s, ast.Assign):
            return all(self._target_new(t) for t in s.targets) and self._passed(s.value)
        if isinstance(s, ast.AnnAssign):
            return self._target_new(s.target) and self._passed(s.value)
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            return all((a.asname or a.name).split(".")[0] in self.names for a in s.names)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return s.name in self.names  # a new definition does nothing until plumbing calls it
        return False

    def _callee(self, call: ast.Call) -> str:
        f: ast.AST = call.func
        while isinstance(f, ast.Subscript):  # a Triton launch: kernel[grid](...)
            f = f.value
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""

    def _seq(self, old: Sequence[Any], new: Sequence[Any], extra: Callable[[Any], bool]) -> bool:
        """`old` is `new` without some items that `extra` allows (greedy, in order)."""
        i = 0
        for item in new:
            if i < len(old) and self.same(old[i], item):
                i += 1
            elif not extra(item):
                return False
        return i == len(old)

    @staticmethod
    def _docstring(s: object) -> bool:
        return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)

    def _params(self, a: ast.arguments) -> tuple[list[_Param], list[_Param]]:
        positional = a.posonlyargs + a.args
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
        defaults += a.defaults
        return (list(zip(positional, defaults)), list(zip(a.kwonlyargs, a.kw_defaults)))

    def same(self, old: object, new: object) -> bool:
        if isinstance(old, tuple) and isinstance(new, tuple):  # (arg, default) of a parameter
            return len(old) == len(new) and all(self.same(x, y) for x, y in zip(old, new))
        if isinstance(old, list) and isinstance(new, list):
            return len(old) == len(new) and all(self.same(x, y) for x, y in zip(old, new))
        if not isinstance(old, ast.AST) or not isinstance(new, ast.AST):
            return old == new
        if type(old) is not type(new):
            return False
        if self._docstring(old) and self._docstring(new):
            return True
        if isinstance(old, ast.arguments) and isinstance(new, ast.arguments):
            (po, ko), (pn, kn) = self._params(old), self._params(new)
            is_new = lambda p: p[0].arg in self.names  # noqa: E731
            return (
                self._seq(po, pn, is_new)
                and self._seq(ko, kn, is_new)
                and self.same(old.vararg, new.vararg)
                and self.same(old.kwarg, new.kwarg)
            )
        if isinstance(old, ast.Call) and isinstance(new, ast.Call):
            widened_ = self._callee(new) in self.callees
            return (
                self.same(old.func, new.func)
                and self._seq(old.args, new.args, lambda e: widened_ or self._chain_new(e))
                and self._seq(
                    old.keywords, new.keywords, lambda k: widened_ or k.arg in self.names or self._chain_new(k.value)
                )
            )
        if isinstance(old, ast.Assign) and isinstance(new, ast.Assign) and _slots(old) and _slots(new):
            return self._seq(
                old.value.elts,  # type: ignore[attr-defined]
                new.value.elts,  # type: ignore[attr-defined]
                lambda e: isinstance(e, ast.Constant) and e.value in self.names,
            )
        for name, value in ast.iter_fields(old):
            if name in ("ctx", "type_comment"):
                continue
            other = getattr(new, name, None)
            if (isinstance(value, list) and value and isinstance(value[0], ast.stmt)) or (
                isinstance(other, list) and other and isinstance(other[0], ast.stmt)
            ):
                if not self._seq(value, other, self._extra_stmt):  # type: ignore[arg-type]
                    return False
            elif not self.same(value, other):
                return False
        return True


def _slots(node: ast.Assign) -> bool:
    return any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets) and isinstance(
        node.value, (ast.Tuple, ast.List)
    )


def is_plumbing(old_text: str, new_text: str, names: frozenset[str], callees: frozenset[str] = frozenset()) -> bool:
    """The new text differs from the old only by new names threaded through (or not at all, in code)."""
    old, new = _parse(old_text), _parse(new_text)
    return old is not None and new is not None and _Same(names, callees).same(old, new)


# ---- the plan -----------------------------------------------------------------------------------


def _label(h: Hunk, keep: tuple[int, ...], n_pieces: int) -> str:
    if n_pieces < 2:
        return h.label
    m = _HEADER.match(h.header)
    assert m is not None
    old_at, _, new_at, _ = _counts(m)
    olds, news = [], []
    for i, line in enumerate(h.body.splitlines()):
        tag = line[:1]
        if tag == "-":
            olds += [old_at] * (i in keep)
            old_at += 1
        elif tag == "+":
            news += [new_at] * (i in keep)
            new_at += 1
        elif tag != "\\":
            old_at, new_at = old_at + 1, new_at + 1
    lines, side = (news, "+") if news else (olds, "-")
    span = f"{lines[0]}" if lines[0] == lines[-1] else f"{lines[0]}-{lines[-1]}"
    return f"{h.label} lines {side}{span}"


def pieces_of(parts: Sequence[Hunk], old: Source, new: Source) -> tuple[Piece, ...]:
    """Every hunk cut into statement pieces, each marked plumbing or not (in commit order)."""
    paths = [p for p in dict.fromkeys(h.path for h in parts) if p.endswith(".py")]
    olds, news = [old(p) for p in paths], [new(p) for p in paths]
    names, callees = new_names(olds, news), widened(olds, news)
    text_old, text_new = dict(zip(paths, olds)), dict(zip(paths, news))
    trees_old = {p: _parse(t) for p, t in text_old.items()}
    trees_new = {p: _parse(t) for p, t in text_new.items()}
    out: list[Piece] = []
    for i, h in enumerate(parts):
        parent_text = text_old.get(h.path)
        if not h.header or h.path not in text_old or parent_text is None or trees_old[h.path] is None:
            out.append(Piece(i, None, h.label))  # a new, deleted, binary or non-Python file: not plumbing
            continue
        cuts: Sequence[tuple[int, ...] | None] = statement_pieces(h, trees_old[h.path], trees_new[h.path]) or [None]
        for keep in cuts:
            piece = h if keep is None else partial(h, set(keep))
            plumbing = is_plumbing(parent_text, apply_text(parent_text, [piece]), names, callees)
            out.append(Piece(i, None if len(cuts) == 1 else keep, _label(h, keep or (), len(cuts)), plumbing))
    return tuple(out)

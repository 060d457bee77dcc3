"""A threading plan made safe to search: statement pieces that parse apart, tied where they share
a name, and a base that compiles and binds.

Cut into statements, a real culprit's pieces did not parse alone ("'(' was never closed": a call
cut over a line left as context), read names only another piece binds (a rewritten kernel's new
locals: every subset at the search's first level raised NameError), or left the base without the
call sites or allocations it needs (`TypeError: __init__() missing 1 required positional
argument`). Each is fixed before anything is built: a hunk whose pieces do not compile apart is
one piece (and the plan says so), pieces of one hunk that share a name they bind are one piece,
and the pieces the base needs join it (bisector/why/hunk_calls.py finds what would not run).

Pure: a Plan and file texts in, a Plan out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from bisector.why.hunk_plumbing import MOST, Piece, Plan, Source, _label, pieces_of
from bisector.why.hunks import Hunk

__all__ = ["checked", "plan"]


def _merged(plan: Plan, hunk: int) -> Plan:
    """`plan` with the behaviour-changing pieces of one hunk searched as one."""
    at = next(i for i, p in enumerate(plan.pieces) if p.hunk == hunk)
    pieces = [p for p in plan.pieces if p.hunk != hunk]
    pieces.insert(at, Piece(hunk, None, plan.parts[hunk].label))  # with the base's lines of it: the whole hunk
    why = f"{plan.parts[hunk].label}: its statements do not parse apart, searched whole"
    return replace(plan, pieces=tuple(pieces), unsplit=(*plan.unsplit, why))


# a binding: `x = ...`, `a, b = ...`, `x: T = ...`, `for x in ...`, and `x += ...` (a pointer moved in place)
_BOUND = re.compile(
    r"^\s*(?:for\s+)?([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?::[^=]*)?"
    r"(?:(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=[^=]|\s+in\s)"
)


def _tied(plan: Plan, old: Source) -> Plan:
    """The pieces of one hunk that bind (or move, or drop the binding of) a name another of its
    pieces reads, searched as one piece: apart, one would read what only the other binds (a
    rewritten kernel's new locals), and every subset that splits them is refused (NameError).
    Tying too much costs resolution, never a build."""
    pieces = list(plan.pieces)
    for hunk in dict.fromkeys(p.hunk for p in plan.pieces):
        mine = [i for i, p in enumerate(pieces) if p is not None and p.hunk == hunk and p.keep is not None]
        if len(mine) < 2:
            continue
        lines = plan.parts[hunk].body.splitlines()
        changed = {i: [lines[k] for k in pieces[i].keep if lines[k][:1] in "+-"] for i in mine}  # type: ignore[union-attr]
        # a name a piece binds anew, or whose binding it moves or removes, ties it to the pieces that read it
        binds = {
            i: {n.strip() for ln in changed[i] if (m := _BOUND.match(ln[1:])) for n in m.group(1).split(",")} - {""}
            for i in mine
        }
        reads = {
            i: set(re.findall(r"\b[A-Za-z_]\w*\b", "\n".join(ln[1:] for ln in changed[i] if ln[0] == "+")))
            for i in mine
        }
        root = {i: i for i in mine}

        def find(i: int, root: dict[int, int] = root) -> int:
            while root[i] != i:
                i = root[i]
            return i

        for i in mine:
            for j in mine:
                if i != j and binds[i] & reads[j]:
                    root[find(j)] = find(i)
        ties: dict[int, list[int]] = {}
        for i in mine:
            ties.setdefault(find(i), []).append(i)
        for members in ties.values():
            if len(members) > 1:
                keep = tuple(sorted(k for i in members for k in pieces[i].keep))  # type: ignore[union-attr]
                pieces[members[0]] = Piece(hunk, keep, _label(plan.parts[hunk], keep, 2))
                for i in members[1:]:
                    pieces[i] = None  # type: ignore[call-overload]
    return replace(plan, pieces=tuple(p for p in pieces if p is not None))


def _parses_apart(plan: Plan, old: Source) -> Plan:
    """Every piece applied alone on the base, and every piece left out of the whole, must compile;
    a hunk whose pieces do not is searched as one piece (its statements do not parse apart)."""
    for _ in range(len(plan.parts)):
        n = len(plan.pieces)
        every = tuple(range(n))
        bad = next(
            (
                plan.pieces[i].hunk
                for i in range(n)
                if sum(p.hunk == plan.pieces[i].hunk for p in plan.pieces) > 1
                and (plan.compile_error((i,), old) or plan.compile_error(every[:i] + every[i + 1 :], old))
            ),
            None,
        )
        if bad is None:
            break
        plan = _merged(plan, bad)
    whole = [i for i in range(len(plan.pieces)) if plan.compile_error((i,), old)]
    notes = [f"{plan.pieces[i].label}: does not parse without other hunks of its file" for i in whole]
    return replace(plan, unsplit=(*plan.unsplit, *notes))


def _callee(error: str) -> str:
    m = re.search(r"(\w+)\(\) ", error)
    return m.group(1) if m else ""


def checked(plan: Plan, old: Source, new: Source) -> Plan:
    """`plan` whose pieces parse apart and whose base binds: a behaviour-changing piece that calls a
    function or class the base widened (a call site the threading needs, passing a value the
    plumbing rule did not recognise), or that binds a name the base reads (the buffer a launch in
    the base passes), joins the base, until the base alone compiles and binds."""
    plan = _parses_apart(_tied(plan, old), old)
    for _ in range(len(plan.pieces) + 1):
        error = plan.compile_error((), old, new)
        errors = error.removeprefix("would not run: ").split("; ") if error.startswith("would not run") else []
        names = {_callee(e) for e in errors} - {""}
        unbound = {m.group(1) for e in errors if (m := re.search(r"(?:name|local variable) '(\w+)' is", e))}
        if not names and not unbound:
            return replace(plan, base_error=error)
        dead = [p for p in plan.base if _dead_reader(plan.parts[p.hunk], p.keep, unbound)]
        if dead:  # searched, not applied: tied to the statements that read what they bind
            kept = sorted(
                (*plan.pieces, *(replace(p, plumbing=False) for p in dead)),
                key=lambda p: (p.hunk, p.keep[0] if p.keep else -1),
            )
            plan = _tied(replace(plan, base=tuple(p for p in plan.base if p not in dead), pieces=tuple(kept)), old)
            continue
        callers = [
            p
            for p in plan.pieces
            if _calls(plan.parts[p.hunk], p.keep, names)
            or _binds(plan.parts[p.hunk], p.keep, unbound)
            or _drops(plan.parts[p.hunk], p.keep, unbound)
        ]
        if not callers or len(callers) == len(plan.pieces):
            return replace(plan, base_error=error)
        moved = tuple(replace(p, plumbing=True) for p in callers)
        plan = replace(plan, base=(*plan.base, *moved), pieces=tuple(p for p in plan.pieces if p not in callers))
    return plan


def _dead_reader(h: Hunk, keep: tuple[int, ...] | None, names: set[str]) -> bool:
    """A base piece that only assigns new names from one of `names`, which the base does not bind
    there (`w_f32 = w.to(tl.float32)` placed after the loop that loads `w`): nothing in the base
    needs it (it binds a new name), so it is searched rather than closed over the rewritten code
    that binds `w`."""
    if keep is None:
        return False
    lines = h.body.splitlines()
    changed = [
        ln for i in keep if (ln := lines[i])[:1] in "+-" and ln[1:].strip() and not ln[1:].lstrip().startswith("#")
    ]
    added = [ln[1:] for ln in changed if ln[0] == "+"]
    if not added or len(added) != len(changed):
        return False
    values = [m.group(1) for ln in added if (m := re.match(r"\s*[A-Za-z_]\w*\s*=(?!=)(.*)$", ln))]
    return len(values) == len(added) and any(re.search(rf"\b{re.escape(n)}\b", v) for v in values for n in names)


def _binds(h: Hunk, keep: tuple[int, ...] | None, names: set[str]) -> bool:
    """Whether the piece's added lines bind one of `names` (an assignment, a def, an import): the
    base reads it (a launch passing a new buffer) and would raise NameError without it."""
    lines = h.body.splitlines()
    added = [lines[i][1:] for i in (keep if keep is not None else range(len(lines))) if lines[i][:1] == "+"]
    return any(
        re.match(
            rf"\s*(({re.escape(n)}\s*(:[^=]*)?=[^=])|(def|class)\s+{re.escape(n)}\b|"
            rf"(from\s+\S+\s+)?import\s.*\b{re.escape(n)}\b)",
            ln,
        )
        for ln in added
        for n in names
    )


def _drops(h: Hunk, keep: tuple[int, ...] | None, names: set[str]) -> bool:
    """Whether the piece's removed lines read one of `names`: the base still reads what the culprit
    no longer does (a launch passing `DW` after the base dropped its allocation)."""
    lines = h.body.splitlines()
    removed = [lines[i][1:] for i in (keep if keep is not None else range(len(lines))) if lines[i][:1] == "-"]
    return any(re.search(rf"\b{re.escape(n)}\b", ln) for ln in removed for n in names)


def _calls(h: Hunk, keep: tuple[int, ...] | None, names: set[str]) -> bool:
    """Whether the piece's changed lines call one of `names`."""
    lines = h.body.splitlines()
    chosen = [lines[i] for i in (keep if keep is not None else range(len(lines))) if lines[i][:1] in "+-"]
    return any(re.search(rf"\b{re.escape(n)}\s*[\[(]", ln) for ln in chosen for n in names)


def plan(parts: Sequence[Hunk], largest_group: int, old: Source, new: Source) -> Plan | None:
    """A plumbing base and the pieces to search, when grouping would tie most hunks together and
    the commit holds both plumbing and behaviour-changing pieces; None otherwise. The statements of
    a hunk that do not parse apart are searched as one piece, and the base is closed over the call
    sites its signatures need (`checked`)."""
    if len(parts) < 3 or largest_group <= MOST * len(parts):
        return None
    found = pieces_of(parts, old, new)
    base = tuple(p for p in found if p.plumbing)
    rest = tuple(p for p in found if not p.plumbing)
    if not base or not rest:
        return None
    return checked(Plan(tuple(parts), base, rest), old, new)

"""Calls that would not bind, and names nothing binds: a subset of a culprit's hunks that widens a
signature without the call
sites that fill it (or the other way round) raises `TypeError` at import or at the first call.

On a real upstream the threading base of a culprit (a constructor given a new required argument,
with 14 call sites) failed with `TypeError: __init__() missing 1 required positional argument`:
two call sites passed the new value as an expression, not by its name, and stayed out of the base.
Such a subset is never built: every call in the touched files to a function or class they define
(one definition of that name) is bound against its signature as `inspect` would, every name read
must be bound somewhere in its file, and an error neither the parent nor the culprit has is the
subset's own.

Pure: file texts in, one line per error out.
"""

from __future__ import annotations

import ast
import builtins
import functools
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Signature", "signatures", "call_errors", "new_errors"]


@dataclass(frozen=True)
class Signature:
    """What a call must fill: positional names in order, how many have defaults, keyword-only names
    (required ones apart), and whether *args / **kwargs take the rest."""

    name: str
    positional: tuple[str, ...]
    n_defaults: int
    kwonly: tuple[str, ...]
    kwonly_required: tuple[str, ...]
    varargs: bool
    varkw: bool
    filled_in: bool = False  # a decorator beside `jit` (autotune, heuristics) fills parameters a launch leaves out

    @property
    def required(self) -> tuple[str, ...]:
        return self.positional[: len(self.positional) - self.n_defaults]


def _decorator(d: ast.expr) -> str:
    f = d.func if isinstance(d, ast.Call) else d
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "?"


def _signature(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef, bound: bool) -> Signature:
    a = node.args
    positional = [x.arg for x in a.posonlyargs + a.args][1 if bound else 0 :]
    n_defaults = min(len(a.defaults), len(positional))
    kwonly = tuple(x.arg for x in a.kwonlyargs)
    required = tuple(x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None)
    filled_in = any(_decorator(d) != "jit" for d in node.decorator_list)
    return Signature(
        name, tuple(positional), n_defaults, kwonly, required, a.vararg is not None, a.kwarg is not None, filled_in
    )


def signatures(trees: Mapping[str, ast.Module]) -> dict[str, Signature]:
    """Module-level functions and classes (their `__init__`) defined once over all `trees`."""
    found: dict[str, list[Signature | None]] = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(_signature(node.name, node, bound=False))
            elif isinstance(node, ast.ClassDef):
                init = next(
                    (
                        s
                        for s in node.body
                        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "__init__"
                    ),
                    None,
                )
                # a class without its own __init__ (a base's, a dataclass) is not checked
                found.setdefault(node.name, []).append(_signature(node.name, init, bound=True) if init else None)
    return {k: v[0] for k, v in found.items() if len(v) == 1 and v[0] is not None}


def _bind(sig: Signature, call: ast.Call, launch: bool) -> str:
    """Why `call` does not bind to `sig` ("" when it does). A Triton launch (`kernel[grid](...)`)
    takes launch options (num_warps, ...) as keywords, and leaves out what an autotuner or
    heuristics decorator fills: such a launch is checked for positional arguments and repeats only;
    a plain `@jit` kernel's launch must fill every parameter (`missing 1 required positional
    argument: 'rows_per_program'` on a real culprit)."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return ""  # *xs: not decidable from the text
    n = len(call.args)
    if n > len(sig.positional) and not sig.varargs:
        return f"{sig.name}() takes {len(sig.positional)} positional arguments but {n} were given"
    filled = set(sig.positional[:n])
    for k in call.keywords:
        if k.arg is None:
            continue  # **kw: what it fills is not decidable, what the rest fills is
        if k.arg in filled:
            return f"{sig.name}() got multiple values for argument '{k.arg}'"
        if k.arg not in sig.positional and k.arg not in sig.kwonly and not sig.varkw and not launch:
            return f"{sig.name}() got an unexpected keyword argument '{k.arg}'"
        filled.add(k.arg)
    if (launch and sig.filled_in) or (not launch and any(k.arg is None for k in call.keywords)):
        return ""  # a launch's **kw carries launch options (`**kernel_args`), a call's may fill anything
    missing = [p for p in (*sig.required, *sig.kwonly_required) if p not in filled]
    if missing:
        return f"{sig.name}() missing {len(missing)} required argument{'s' * (len(missing) > 1)}: " + ", ".join(
            f"'{m}'" for m in missing
        )
    return ""


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_ALWAYS = set(dir(builtins)) | {
    "__file__",
    "__name__",
    "__doc__",
    "__spec__",
    "__path__",
    "__builtins__",
    "__class__",
    "__qualname__",
    "__module__",
}


def _outer_parts(node: ast.AST) -> list[ast.AST]:
    """What a nested def, lambda or class evaluates in the scope around it: decorators, defaults,
    annotations, bases."""
    out: list[ast.AST] = list(getattr(node, "decorator_list", []))
    if isinstance(node, ast.ClassDef):
        return out + node.bases + [k.value for k in node.keywords]
    a = node.args  # type: ignore[attr-defined]
    out += [d for d in a.defaults + a.kw_defaults if d is not None]
    out += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs if x.annotation is not None]
    returns = getattr(node, "returns", None)
    return out + ([returns] if returns is not None else [])


def _own(scope: ast.AST) -> tuple[set[str], set[str], list[ast.AST]]:
    """The names a scope binds and reads itself, and the scopes nested in it (comprehensions count
    as their scope's: coarse, never a false NameError)."""
    bound: set[str] = set()
    read: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        bound |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        bound |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    body = [scope.body] if isinstance(scope, ast.Lambda) else list(scope.body)  # type: ignore[attr-defined]
    nested: list[ast.AST] = []
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            nested.append(node)
            if not isinstance(node, ast.Lambda):
                bound.add(node.name)
            stack += _outer_parts(node)
            continue
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif (isinstance(node, ast.ExceptHandler) and node.name) or (
            isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name
        ):
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        stack += list(ast.iter_child_nodes(node))
    return bound, read, nested


def _unbound(tree: ast.Module) -> set[str]:
    """Names read where no scope that reaches them binds them (its own, an enclosing function's, the
    module's; a class body's names reach only that body), and that are not builtins: a statement
    kept without the one that binds what it reads (`return pages` without `pages = ...`) raises
    NameError when it runs. Per scope, not per file: a name still bound in another function (the
    caller that unpacks `DX, DW, DB = ...`) does not bind it here. Where a name is bound within a
    scope does not matter (coarse: never an UnboundLocalError)."""
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)):
        return set()  # a star import binds what the text cannot say
    declared = {name for n in ast.walk(tree) if isinstance(n, ast.Global) for name in n.names}
    module_bound, module_read, nested = _own(tree)
    visible = _ALWAYS | module_bound | declared
    out = module_read - visible
    todo: list[tuple[ast.AST, set[str]]] = [(n, visible) for n in nested]
    while todo:
        scope, outer = todo.pop()
        bound, read, inner = _own(scope)
        out |= read - bound - outer
        # a class body's names are not visible in the functions nested in it
        todo += [(n, outer if isinstance(scope, ast.ClassDef) else outer | bound) for n in inner]
    return out


_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)


def _binds_in(node: ast.AST) -> set[str]:
    """Names a statement binds in its own scope (not in nested defs, lambdas, classes or
    comprehensions, whose targets are their own)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            if n is not node:
                continue
        if isinstance(n, (ast.Lambda, *_COMPS)):
            continue
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif (isinstance(n, ast.ExceptHandler) and n.name) or (isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name):
            out.add(n.name)
        stack += list(ast.iter_child_nodes(n))
    return out


def _reads(nodes: list[ast.AST]) -> list[str]:
    """Names the expressions read, in order (an augmented assignment's target too), not inside a
    nested def or lambda."""
    out: list[str] = []
    stack = list(reversed(nodes))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.append(n.id)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            out.append(n.target.id)
        stack += list(reversed(list(ast.iter_child_nodes(n))))
    return out


def _read_early(body: list[ast.stmt], local: set[str], bound: set[str], out: set[str], kernel: bool) -> None:
    """Locals read on the way every run takes (the body, and loop and `with` bodies, in order)
    before any statement that may bind them: `DW` passed to a launch after its allocation was
    dropped raises UnboundLocalError. Branches (`if`, `try`, `match`) bind what they may and are
    not read into (coarse: never a false error on a guarded read). In a `@jit` kernel (`kernel`)
    a name a loop binds, or only one branch of an `if`, is not visible after it (Triton's code
    generator keeps only what was bound before): `w_f32 = w.to(...)` after the loop that loads `w`."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
            continue
        if isinstance(stmt, _LOOPS):
            head = (
                [stmt.iter]
                if isinstance(stmt, (ast.For, ast.AsyncFor))
                else [stmt.test]
                if isinstance(stmt, ast.While)
                else [i.context_expr for i in stmt.items]
            )
            out.update(n for n in _reads(head) if n in local and n not in bound)  # type: ignore[arg-type]
            inner = set(bound)
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                inner |= _binds_in(stmt.target)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                inner |= {n for i in stmt.items if i.optional_vars is not None for n in _binds_in(i.optional_vars)}
            _read_early(stmt.body, local, inner, out, kernel)
            if not kernel or isinstance(stmt, (ast.With, ast.AsyncWith)):
                bound |= inner | _binds_in(stmt)
            continue
        if isinstance(stmt, (ast.If, ast.Try, ast.Match)) or (
            hasattr(ast, "TryStar") and isinstance(stmt, ast.TryStar)
        ):
            head = [stmt.test] if isinstance(stmt, ast.If) else [stmt.subject] if isinstance(stmt, ast.Match) else []
            out.update(n for n in _reads(head) if n in local and n not in bound)  # type: ignore[arg-type]
            if kernel and isinstance(stmt, ast.If):
                then, other = (set().union(*(_binds_in(s) for s in branch)) for branch in (stmt.body, stmt.orelse))
                bound |= then & other
            else:
                bound |= _binds_in(stmt)
            continue
        out.update(n for n in _reads([stmt]) if n in local and n not in bound)
        bound |= _binds_in(stmt)


def _unassigned(tree: ast.Module) -> set[str]:
    """Names some function reads before it may have bound them (UnboundLocalError; in a `@jit`
    kernel, also after the loop or the one branch that binds them)."""
    out: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = fn.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {
            x.arg for x in (a.vararg, a.kwarg) if x is not None
        }
        declared = {name for n in ast.walk(fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
        local = set().union(*(_binds_in(s) for s in fn.body)) - params - declared
        kernel = any(_decorator(d) == "jit" for d in fn.decorator_list)
        _read_early(fn.body, local, set(params), out, kernel)
    return out


def call_errors(texts: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """(path, error) for every call in `texts` (path -> Python source) that does not bind to the one
    definition of its name among them, and every name read that nothing binds; files that do not
    parse are left out (the compile check says so)."""
    return _errors(tuple(sorted(texts.items())))


@functools.lru_cache(maxsize=256)  # the parent's and the culprit's files, asked about for every subset
def _errors(items: tuple[tuple[str, str], ...]) -> frozenset[tuple[str, str]]:
    texts = dict(items)
    trees: dict[str, ast.Module] = {}
    for path, text in texts.items():
        try:
            trees[path] = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
    sigs = signatures(trees)
    out: set[tuple[str, str]] = {
        (path, f"name '{name}' is not defined (NameError)") for path, tree in trees.items() for name in _unbound(tree)
    }
    out |= {
        (
            path,
            f"local variable '{name}' is read before it is bound (UnboundLocalError; in a @jit kernel, "
            "also after the loop or the one branch that binds it)",
        )
        for path, tree in trees.items()
        for name in _unassigned(tree)
    }
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func, launch = node.func, False
            if isinstance(func, ast.Subscript):
                func, launch = func.value, True
            if isinstance(func, ast.Name) and func.id in sigs:
                error = _bind(sigs[func.id], node, launch)
                if error:
                    out.add((path, error))
    return frozenset(out)


def new_errors(patched: Mapping[str, str], parent: Mapping[str, str], culprit: Mapping[str, str]) -> list[str]:
    """The call errors of `patched` that neither the parent's nor the culprit's same files have,
    as "path: error" lines (sorted)."""
    known = call_errors(parent) | call_errors(culprit)
    return sorted(f"{path}: {error}" for path, error in call_errors(patched) - known)

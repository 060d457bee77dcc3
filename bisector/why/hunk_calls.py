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

    @property
    def required(self) -> tuple[str, ...]:
        return self.positional[:len(self.positional) - self.n_defaults]


def _signature(name: str, node: ast.FunctionDef | ast.AsyncFunctionDef, bound: bool) -> Signature:
    a = node.args
    positional = [x.arg for x in a.posonlyargs + a.args][1 if bound else 0:]
    n_defaults = min(len(a.defaults), len(positional))
    kwonly = tuple(x.arg for x in a.kwonlyargs)
    required = tuple(x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None)
    return Signature(name, tuple(positional), n_defaults, kwonly, required, a.vararg is not None, a.kwarg is not None)


def signatures(trees: Mapping[str, ast.Module]) -> dict[str, Signature]:
    """Module-level functions and classes (their `__init__`) defined once over all `trees`."""
    found: dict[str, list[Signature | None]] = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(_signature(node.name, node, bound=False))
            elif isinstance(node, ast.ClassDef):
                init = next((s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and s.name == "__init__"), None)
                # a class without its own __init__ (a base's, a dataclass) is not checked
                found.setdefault(node.name, []).append(_signature(node.name, init, bound=True) if init else None)
    return {k: v[0] for k, v in found.items() if len(v) == 1 and v[0] is not None}


def _bind(sig: Signature, call: ast.Call, launch: bool) -> str:
    """Why `call` does not bind to `sig` ("" when it does). A Triton launch (`kernel[grid](...)`) is
    checked for positional arguments and repeats only: its autotuner fills missing constexprs and
    it takes launch options (num_warps, ...) as keywords."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return ""  # *xs or **kw: not decidable from the text
    n = len(call.args)
    if n > len(sig.positional) and not sig.varargs:
        return f"{sig.name}() takes {len(sig.positional)} positional arguments but {n} were given"
    filled = set(sig.positional[:n])
    for k in call.keywords:
        if k.arg in filled:
            return f"{sig.name}() got multiple values for argument '{k.arg}'"
        if k.arg not in sig.positional and k.arg not in sig.kwonly and not sig.varkw and not launch:
            return f"{sig.name}() got an unexpected keyword argument '{k.arg}'"
        filled.add(k.arg)  # type: ignore[arg-type]
    if launch:
        return ""
    missing = [p for p in (*sig.required, *sig.kwonly_required) if p not in filled]
    if missing:
        return f"{sig.name}() missing {len(missing)} required argument{'s' * (len(missing) > 1)}: " + \
            ", ".join(f"'{m}'" for m in missing)
    return ""


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_ALWAYS = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__", "__builtins__",
                                "__class__", "__qualname__", "__module__"}


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
        elif ((isinstance(node, ast.ExceptHandler) and node.name)
              or (isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name)):
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
    out: set[tuple[str, str]] = {(path, f"name '{name}' is not defined (NameError)")
                                 for path, tree in trees.items() for name in _unbound(tree)}
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

"""Calls that would not bind, and names nothing binds: a subset of a culprit's hunks that widens a signature without the call
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
from dataclasses import dataclass
from typing import Mapping

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


def _unbound(tree: ast.Module) -> set[str]:
    """Names read in a file that nothing in it binds (anywhere: a coarse check that never calls a
    bound name unbound) and that are not builtins: a statement kept without the one that binds
    what it reads (`return pages` without `pages = ...`) raises NameError when it runs."""
    bound = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__", "__builtins__"}
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return set()  # a star import binds what the text cannot say
    return read - bound


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

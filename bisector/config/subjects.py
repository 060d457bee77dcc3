"""The suites a config measures, each with its subject: the built-in `fa` and `gemm`, a suite the
user brings (`[suites.NAME] module = "pkg.mod:Suite"`), or the upstream's own pytest-benchmark
tests (`[subject.NAME] pytest = "path::test"`). Every problem is `file: key: problem`.

A brought suite in the config's folder is read, not run: its file must exist and define the
named attribute, a class must define the suite contract (benches/suites/__init__.py) unless it
inherits it, and its `PARAMS`, when given as a literal, bound the keys its shapes may use. One in
the upstream checkout (`source = "upstream"`) can only be checked by its trials.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches import options as adapter_options
from benches import shapes as shape_rules
from bisector.config.reader import Section, show
from bisector.errors import ConfigError
from bisector.model import Shape

BUILTIN = ("fa", "gemm")
SUBJECT_ADAPTERS = ("triton", "torch", "flydsl", "aiter", "callable")
CONTRACT = ("make_inputs", "flops", "bytes", "reference", "describe")
SOURCES = ("config", "upstream")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_MODULE = re.compile(rf"({_DOTTED}):({_DOTTED})")
_SCALAR = (int, float, str, bool)


@dataclass(frozen=True)
class Subject:
    """How the trial calls the upstream's kernel for one suite."""

    entry: str  # "module.path:function" ("" for a pytest subject)
    adapter: str = "callable"
    layout: str = "bhsd"  # attention tensors as the entry point expects them: bhsd | bshd
    options: Mapping[str, Any] = field(default_factory=dict)  # passed to the adapter
    # The kernel's own calling convention (benches/backends/callmap.py): suite inputs passed
    # positionally, and keyword -> suite input.
    args: tuple[str, ...] = ()
    kwargs: Mapping[str, str] = field(default_factory=dict)
    pytest: tuple[str, ...] = ()  # the upstream's pytest-benchmark tests ("path::test"): adapter "pytest"


@dataclass(frozen=True)
class SuiteModule:
    """A suite the user brings: where the trial imports it from."""

    module: str  # "pkg.mod:Suite"
    source: str = "config"  # "config": the config's folder; "upstream": the commit's checkout
    path: str | None = None  # the config's folder, for source "config"
    has_control: bool | None = None  # from the file when it was read; None: not known before a trial
    params: tuple[str, ...] | None = None  # the suite's PARAMS, when its file gives them as a literal


def suite_names(top: Section) -> tuple[str, ...]:
    data = top.data.get("suites", {})
    if not isinstance(data, Mapping):
        raise ConfigError(top.path, "suites", "must be a table")
    for name in data:
        if not _NAME.fullmatch(name):
            raise ConfigError(top.path, f"suites.{name}", "a suite name is a letter then letters, digits or _")
    return tuple(data)


def parse_subjects(top: Section, names: tuple[str, ...]) -> dict[str, Subject]:
    sec = top.section("subject", tuple(dict.fromkeys((*BUILTIN, *names))), required=True)
    out = {suite: _subject(sec, suite) for suite in sec.data}
    if not out:
        raise ConfigError(top.path, "subject", "name at least one of: " + ", ".join(dict.fromkeys((*BUILTIN, *names))))
    return out


def _strings(s: Section, key: str) -> tuple[str, ...]:
    value = s.get(key, (list, str), [])
    value = [value] if isinstance(value, str) else value
    if not all(isinstance(v, str) and v for v in value):
        raise ConfigError(s.path, s.name(key), "must be a list of non-empty strings")
    return tuple(value)


def _subject(sec: Section, suite: str) -> Subject:
    s = sec.section(suite, ("entry", "adapter", "layout", "options", "args", "kwargs", "pytest"))
    if "pytest" in s.data:
        return _pytest_subject(s, suite)
    entry = s.get("entry", str)
    if ":" not in entry:
        raise ConfigError(s.path, s.name("entry"), f"must be 'module:function', got {show(entry)}")
    adapter = s.get("adapter", str, "callable", choices=SUBJECT_ADAPTERS)
    options = s.get("options", dict, {})
    if suite in BUILTIN:
        bad = adapter_options.unknown(adapter, suite, options)
        if bad:
            known = ", ".join(sorted(adapter_options.KNOWN[adapter][suite]))
            raise ConfigError(
                s.path,
                f"{s.name('options')}.{bad[0]}",
                f"not an option of the {adapter} {suite} adapter (known: {known})",
            )
    args = _strings(s, "args")
    kwargs = s.get("kwargs", dict, {})
    for k, v in kwargs.items():
        if not isinstance(v, str) or not v:
            raise ConfigError(s.path, f"{s.name('kwargs')}.{k}", f"must name a suite input, got {show(v)}")
        if k in options:
            raise ConfigError(s.path, f"{s.name('kwargs')}.{k}", "also given in options: name it once")
    if (args or kwargs) and adapter == "flydsl":
        raise ConfigError(
            s.path,
            s.name("args" if args else "kwargs"),
            "the flydsl adapter calls FlyDSL's own entry points: it takes no mapping",
        )
    return Subject(
        entry=entry,
        adapter=adapter,
        options=options,
        args=args,
        kwargs=dict(kwargs),
        layout=s.get("layout", str, "bhsd", choices=("bhsd", "bshd")),
    )


def _pytest_subject(s: Section, suite: str) -> Subject:
    """A subject timed by the upstream's own pytest-benchmark tests: those tests' node ids, nothing else."""
    extra = [k for k in s.data if k != "pytest"]
    if extra:
        raise ConfigError(
            s.path, s.name(extra[0]), f"a pytest subject runs the upstream's tests: it takes no {extra[0]}"
        )
    if suite in BUILTIN:
        raise ConfigError(
            s.path,
            s.name("pytest"),
            f"{suite} makes its own inputs: give the upstream's benchmarks a suite name of their own",
        )
    nodes = _strings(s, "pytest")
    for i, node in enumerate(nodes):
        path = node.split("::", 1)[0]
        if not path or Path(path).is_absolute() or ".." in Path(path).parts:
            raise ConfigError(
                s.path,
                f"{s.name('pytest')}[{i}]",
                f"must be a path inside the checkout ('tests/bench.py::test'), got {show(node)}",
            )
    if not nodes:
        raise ConfigError(s.path, s.name("pytest"), "names no test")
    return Subject(entry="", adapter="pytest", pytest=nodes)


def _read_suite_file(path: Path, key: str, file: Path, attr: str) -> tuple[bool | None, tuple[str, ...] | None]:
    """(has a control method, PARAMS) of a brought suite's class, read from its source."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise ConfigError(path, key, f"cannot read {file}: {type(exc).__name__}: {exc}"[:300]) from None
    first = attr.split(".")[0]
    found: ast.AST | None = None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == first:
            found = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.ImportFrom, ast.Import)):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            names += [a.asname or a.name for a in getattr(node, "names", [])]
            found = node if first in names else found
    if found is None:
        raise ConfigError(path, key, f"{file.name} defines no {first!r}")
    if not isinstance(found, ast.ClassDef) or "." in attr:
        return None, None
    defined = {n.name for n in found.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in found.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [m for m in CONTRACT if m not in defined]
    if missing and not found.bases:
        raise ConfigError(
            path, key, f"class {first} lacks {', '.join(missing)} (the suite contract: {', '.join(CONTRACT)})"
        )
    params = None
    for n in found.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PARAMS" for t in n.targets):
            try:
                value = ast.literal_eval(n.value)
            except ValueError:
                continue
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                params = tuple(value)
    # With a base class, a control may be inherited: not known until a trial imports it.
    has_control = True if "control" in defined else (None if found.bases else False)
    return has_control, params


def parse_suite_modules(
    top: Section, names: tuple[str, ...], subjects: Mapping[str, Subject]
) -> dict[str, SuiteModule]:
    out = {}
    for name in names:
        sub = subjects.get(name)
        if name in BUILTIN or (sub is not None and sub.adapter == "pytest"):
            top.section("suites", names).section(name, ("shapes", "cache"))
            continue
        s = top.section("suites", names).section(name, ("module", "source", "shapes", "cache"))
        if "module" not in s.data:
            raise ConfigError(
                top.path,
                s.name("module"),
                f"missing: {name} is not a built-in suite ({', '.join(BUILTIN)}) nor a pytest subject",
            )
        module = s.get("module", str)
        match = _MODULE.fullmatch(module)
        if not match:
            raise ConfigError(top.path, s.name("module"), f"must be 'pkg.mod:Suite', got {show(module)}")
        source = s.get("source", str, "config", choices=SOURCES)
        if source == "upstream":
            out[name] = SuiteModule(module, source)
            continue
        folder = top.path.resolve().parent
        rel = Path(*match.group(1).split("."))
        file = next((f for f in (folder / rel.with_suffix(".py"), folder / rel / "__init__.py") if f.is_file()), None)
        if file is None:
            raise ConfigError(
                top.path,
                s.name("module"),
                f'no {rel}.py in the config\'s folder {folder} (or give source = "upstream")',
            )
        has_control, params = _read_suite_file(top.path, s.name("module"), file, match.group(2))
        out[name] = SuiteModule(module, source, str(folder), has_control, params)
    return out


def _default_name(suite: str, params: Mapping[str, Any]) -> str:
    """The name a shape gets when its row gives none; the built-in suites' plain rows keep theirs."""
    if suite == "fa":
        short = {"Hkv": "hkv", "Sq": "sq", "Sk": "sk", "page_size": "p"}
        parts = [f"{k.lower()}{params[k]}" for k in ("B", "H", "S", "D") if k in params]
        parts += [f"{short[k]}{params[k]}" for k in ("Hkv", "Sq", "Sk", "page_size") if k in params]
        parts += ["varlen"] if "varlen" in params else []
        return "_".join(parts) + f"_{params['dtype']}"
    if suite == "gemm":
        parts = [f"g{len(params['groups'])}"] if "groups" in params else []
        parts += [f"{k.lower()}{params[k]}" for k in ("M", "N", "K") if k in params]
        parts += [f"batch{params['batch']}"] if "batch" in params else []
        return "_".join(parts) + f"_{params['dtype']}" + (f"_{params['scaling']}" if "scaling" in params else "")
    if "benchmark" in params:
        return re.sub(r"[^A-Za-z0-9_.\-\[\]]+", "_", str(params["benchmark"]))
    return "_".join(f"{k.lower()}{v}" for k, v in params.items() if isinstance(v, _SCALAR)) or "shape"


def _free_params(row: Section, suite: str, known: tuple[str, ...] | None, pytest: bool) -> dict[str, Any]:
    """A brought or pytest suite's shape row: scalars and lists of scalars, by the suite's keys."""
    params: dict[str, Any] = {}
    for key, value in row.data.items():
        if key == "name":
            continue
        if pytest and key not in ("benchmark", "flops", "bytes"):
            raise ConfigError(row.path, row.name(key), "unknown key (known: name, benchmark, flops, bytes)")
        if known is not None and not pytest and key not in known:
            raise ConfigError(
                row.path, row.name(key), f"not a parameter of suite {suite} (its PARAMS: {', '.join(known)})"
            )
        ok = isinstance(value, _SCALAR) or (isinstance(value, list) and all(isinstance(v, _SCALAR) for v in value))
        if not ok or (isinstance(value, float) and value != value):
            raise ConfigError(
                row.path, row.name(key), f"must be a number, string, bool or a list of them, got {show(value)}"
            )
        params[key] = tuple(value) if isinstance(value, list) else value
    if pytest:
        if not isinstance(params.get("benchmark", row.data.get("name", "")), str):
            raise ConfigError(row.path, row.name("benchmark"), "must be a benchmark's name or node id")
        for key in ("flops", "bytes"):
            if key in params and (
                not isinstance(params[key], (int, float)) or isinstance(params[key], bool) or params[key] <= 0
            ):
                raise ConfigError(row.path, row.name(key), f"must be a number > 0, got {show(params[key])}")
        if "benchmark" not in params and "name" not in row.data:
            raise ConfigError(row.path, row.name("benchmark"), "missing (the benchmark this shape is)")
    return params


def parse_shapes(
    top: Section, names: tuple[str, ...], subjects: Mapping[str, Subject], modules: Mapping[str, SuiteModule]
) -> tuple[Shape, ...]:
    if not names:
        raise ConfigError(top.path, "suites", "missing table")
    suites = top.section("suites", names, required=True)
    shapes: list[Shape] = []
    for suite in names:
        known = ("shapes", "cache") if suite not in modules else ("module", "source", "shapes", "cache")
        s = suites.section(suite, known)
        pytest = subjects.get(suite) is not None and subjects[suite].adapter == "pytest"
        for i, raw in enumerate(s.get("shapes", list)):
            rules = {"fa": shape_rules.ATTN_KEYS, "gemm": shape_rules.GEMM_KEYS}.get(suite)
            free = tuple(raw) if isinstance(raw, Mapping) else ()  # checked by _free_params
            row = Section(top.path, raw, f"{s.name('shapes')}[{i}]", rules or free)
            try:
                if suite == "fa":
                    params = shape_rules.normalize_attention(row.data)
                elif suite == "gemm":
                    params = shape_rules.normalize_gemm(row.data)
                else:
                    mod = modules.get(suite)
                    params = _free_params(row, suite, mod.params if mod else None, pytest)
            except shape_rules.ShapeError as exc:
                raise ConfigError(top.path, row.name(exc.key), exc.problem) from None
            name = row.get("name", str, _default_name(suite, params))
            if not name:
                raise ConfigError(top.path, row.name("name"), "must not be empty")
            shape = Shape(suite=suite, name=name, params=tuple(sorted(params.items())))
            if any(x.key == shape.key for x in shapes):
                raise ConfigError(top.path, row.name("name"), f"duplicate shape {shape.key!r}")
            if suite in subjects:
                _check_call(top.path, row, suite, subjects[suite], params)
            shapes.append(shape)
    if not shapes:
        raise ConfigError(top.path, "suites", "no shapes")
    for shape in shapes:
        if shape.suite not in subjects:
            raise ConfigError(top.path, f"subject.{shape.suite}", f"missing: suite {shape.suite!r} has shapes")
    return tuple(shapes)


def _check_call(path: Path, row: Section, suite: str, subject: Subject, params: Mapping[str, Any]) -> None:
    """A built-in suite's shape is callable with the subject's mapping (or needs none)."""
    if suite not in BUILTIN:
        return
    if not subject.args and not subject.kwargs:
        why = shape_rules.needs_mapping(suite, params)
        if why and subject.adapter != "flydsl":
            raise ConfigError(
                path, row.prefix, f"{why}: give subject.{suite} args / kwargs, the kernel's own calling convention"
            )
        return
    have = shape_rules.inputs_of(suite, params)
    named = [(f"subject.{suite}.args[{i}]", n) for i, n in enumerate(subject.args)]
    named += [(f"subject.{suite}.kwargs.{k}", n) for k, n in subject.kwargs.items()]
    for key, name in named:
        if name not in have:
            raise ConfigError(
                path, key, f"{name!r} is not an input of shape {row.prefix} (its inputs: {', '.join(sorted(have))})"
            )


def forced_metrics(subjects: Mapping[str, Subject], modules: Mapping[str, SuiteModule]) -> dict[str, str]:
    """Suites with no control compare the subject's own speed: a pytest subject always; a brought
    suite unless its file shows a `control` method."""
    out = {name: "speed" for name, sub in subjects.items() if sub.adapter == "pytest"}
    out.update({name: "speed" for name, mod in modules.items() if not mod.has_control})
    return out

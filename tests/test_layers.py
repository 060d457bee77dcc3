"""The package's layers, read from the source (ast), as docs/ARCHITECTURE.md draws them:
the analysis stages never import the report or the pipeline that calls them, benches/ (the
instrument inside the trial process) imports nothing of bisector, the pipeline is in no import
circle, and no two modules of the package share a name."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("bisector.config", "bisector.store", "bisector.search", "bisector.why", "bisector.build", "bisector.runner")


def _modules(top: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / top).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports (at the top, in a function or under TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for a in node.names:  # `from pkg import module` imports the module
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return found


def _graph(top: str = "bisector") -> dict[str, set[str]]:
    mods = _modules(top)
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_analysis_stage_imports_the_report_or_the_pipeline():
    bad = [f"{m} imports {i}" for m, deps in _graph().items() if any(_within(m, s) for s in STAGES)
           for i in deps if _within(i, "bisector.report") or _within(i, "bisector.pipeline")
           or _within(i, "bisector.commands") or _within(i, "bisector.triggers")]
    assert not bad, bad


def test_benches_import_nothing_of_bisector_nor_the_studies():
    bad = [f"{m} imports {i}" for m, deps in _graph("benches").items() for i in deps
           if _within(i, "bisector") or _within(i, "studies")]
    assert not bad, bad


def test_the_pipeline_is_in_no_import_circle():
    graph = _graph()
    seen, stack = {"bisector.pipeline"}, ["bisector.pipeline"]
    while stack:  # everything the pipeline reaches ...
        for dep in graph.get(stack.pop(), ()):
            if dep in graph and dep not in seen:
                seen.add(dep)
                stack.append(dep)
    back = sorted(m for m in seen - {"bisector.pipeline"} if "bisector.pipeline" in graph[m])
    assert not back, f"imported by the pipeline and importing it back: {back}"


def test_no_two_modules_of_the_package_share_a_name():
    names = collections.defaultdict(list)
    for path in (ROOT / "bisector").rglob("*"):
        if "__pycache__" in path.parts or "templates" in path.parts:
            continue
        if path.is_dir():
            names[path.name].append(str(path.relative_to(ROOT)))
        elif path.suffix == ".py" and path.name not in ("__init__.py", "__main__.py"):
            names[path.stem].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert not shared, shared


def test_the_checks_see_real_imports():
    """The graph is not empty by mistake: known arrows are in it."""
    graph = _graph()
    assert "bisector.why.fixes" in graph["bisector.pipeline"]
    assert "bisector.search.stats" in graph["bisector.search"]
    assert "bisector.why.hunk_groups" in graph["bisector.why.culprit_hunks"]  # `from bisector.why import hunk_groups`
    assert "benches.suites" in _graph("benches")["benches.trial"]

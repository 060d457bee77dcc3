"""The package's layers, read from the source (ast), as docs/ARCHITECTURE.md draws them: each
room imports only the shared bottom and rooms earlier in the documented order, no module and no
package is in an import circle (imports in functions and under TYPE_CHECKING count: a circle of
types is still a circle), the analysis stages never import the report or the pipeline that calls
them, benches/ (the instrument inside the trial process) imports nothing of bisector, and no two
modules of the package share a name."""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = (
    "bisector.config",
    "bisector.isolation",
    "bisector.build",
    "bisector.runner",
    "bisector.store",
    "bisector.search",
    "bisector.estimate",
    "bisector.measure",
    "bisector.why",
)


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
    bad = [
        f"{m} imports {i}"
        for m, deps in _graph().items()
        if any(_within(m, s) for s in STAGES)
        for i in deps
        if _within(i, "bisector.report")
        or _within(i, "bisector.pipeline")
        or _within(i, "bisector.commands")
        or _within(i, "bisector.triggers")
    ]
    assert not bad, bad


def test_benches_import_nothing_of_bisector_nor_the_studies():
    bad = [
        f"{m} imports {i}"
        for m, deps in _graph("benches").items()
        for i in deps
        if _within(i, "bisector") or _within(i, "studies")
    ]
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
    assert "bisector.search.state" in graph["bisector.search"]
    assert "bisector.why.hunk_groups" in graph["bisector.why.culprit_hunks"]  # `from bisector.why import hunk_groups`
    assert "benches.suites" in _graph("benches")["benches.trial"]


def _documented_order() -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The bottom and the rooms in order, as docs/ARCHITECTURE.md's `bottom:` and `rooms:` lines
    name them (one room: names joined by `+`), so the drawing and the check cannot drift apart."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    bottom = re.search(r"^ {4}bottom: (.+)$", text, re.M)
    rooms = re.search(r"^ {4}rooms: (.+)$", text, re.M)
    assert bottom and rooms, "docs/ARCHITECTURE.md draws no `bottom:` and `rooms:` lines"
    name = lambda n: "bisector" if n == "bisector" else f"bisector.{n}"  # noqa: E731
    return (
        tuple(name(n) for n in bottom.group(1).split()),
        [tuple(name(n) for n in room.split("+")) for room in rooms.group(1).split(" -> ")],
    )


def _room_of(module: str, bottom: tuple[str, ...], rooms: list[tuple[str, ...]]) -> int | None:
    """-1 for the shared bottom, the room's place in the order otherwise (the longest prefix
    wins: `bisector.trust.filter` is bottom, `bisector.trust.start` is not); None: no room."""
    best, where = "", None
    for prefix in bottom:
        if (module == prefix or (prefix != "bisector" and _within(module, prefix))) and len(prefix) > len(best):
            best, where = prefix, -1
    for i, room in enumerate(rooms):
        for prefix in room:
            if _within(module, prefix) and len(prefix) > len(best):
                best, where = prefix, i
    return where


def _order_breaks(graph: dict[str, set[str]]) -> list[str]:
    bottom, rooms = _documented_order()
    bad = []
    for module, deps in graph.items():
        mine = _room_of(module, bottom, rooms)
        for dep in deps:
            if dep not in graph or dep == module:
                continue
            theirs = _room_of(dep, bottom, rooms)
            if mine is None or theirs is None or theirs > mine or (mine == -1 and theirs != -1):
                bad.append(f"{module} imports {dep}")
    return sorted(bad)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, deps = work[-1]
            for dep in deps:
                if dep not in graph:
                    continue
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                    break
                if dep in on:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        part.append(top)
                        if top == node:
                            break
                    if len(part) > 1:
                        out.append(sorted(part))
    return out


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of the package's sub-packages (a module at the top stands for itself)."""
    mods = _modules("bisector")

    def home(m: str) -> str:
        pkg = m if mods[m].name == "__init__.py" else m.rpartition(".")[0]
        return m if pkg == "bisector" else pkg

    out: dict[str, set[str]] = collections.defaultdict(set)
    for module, deps in graph.items():
        out[home(module)].update(home(d) for d in deps if d in graph and home(d) != home(module))
    return dict(out)


def test_each_room_imports_only_the_bottom_and_earlier_rooms():
    assert not _order_breaks(_graph()), _order_breaks(_graph())


def test_every_module_of_the_package_has_a_room():
    bottom, rooms = _documented_order()
    assert not [m for m in _graph() if _room_of(m, bottom, rooms) is None]
    named = {p for room in rooms for p in room} | set(bottom)
    assert not [p for p in named if p not in _graph()], "docs/ARCHITECTURE.md names a room that is not there"


def test_no_module_is_in_an_import_circle():
    assert not _circles(_graph()), _circles(_graph())


def test_no_package_is_in_an_import_circle():
    assert not _circles(_packages(_graph())), _circles(_packages(_graph()))


def test_the_order_checks_catch_what_they_are_for():
    """The checks are not empty by mistake: a room that imports a later one, a circle of two
    modules, a circle of two packages through different modules, and a module outside every room
    are each found."""
    graph = {m: set(d) for m, d in _graph().items()}
    graph["bisector.build.steps"].add("bisector.runner.workers")
    graph["bisector.measure.probe"].add("bisector.why.fixes")
    assert _order_breaks(graph) == [
        "bisector.build.steps imports bisector.runner.workers",
        "bisector.measure.probe imports bisector.why.fixes",
    ]
    graph = {m: set(d) for m, d in _graph().items()}
    graph["bisector.search.stats"].add("bisector.search.samples")
    graph["bisector.search.samples"].add("bisector.search.stats")
    assert ["bisector.search.samples", "bisector.search.stats"] in _circles(graph)
    graph = {m: set(d) for m, d in _graph().items()}
    graph["bisector.isolation.fence"].add("bisector.runner.lock")  # runner -> isolation runs elsewhere
    assert any({"bisector.isolation", "bisector.runner"} <= set(c) for c in _circles(_packages(graph)))
    bottom, rooms = _documented_order()
    assert _room_of("bisector.nowhere", bottom, rooms) is None
    assert _room_of("bisector.trust.filter", bottom, rooms) == -1
    assert _room_of("bisector.trust.start", bottom, rooms) == len(rooms) - 1


def test_the_search_core_stays_a_driver():
    """search/__init__.py is the driver only (its state and the probe's Protocol live beside it):
    under 400 lines, and it finds no probe method by name."""
    text = (ROOT / "bisector" / "search" / "__init__.py").read_text()
    assert len(text.splitlines()) < 400
    assert not [p for p in (ROOT / "bisector" / "search").glob("*.py") if "getattr(self.probe" in p.read_text()]

"""The house style the tools do not check: no function in the package over 60 lines (a longer one
hides several jobs under one name), and the linter and type checker `.ci/run` runs are configured
where it reads them, so that a bare `ruff check` or `mypy` checks what CI checks."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60


def long_functions(top: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (n lines)` for each function or method under `top` longer than `limit`,
    counted from its `def` to its last line, docstring included."""
    found = []
    for path in sorted(top.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(top)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_60_lines() -> None:
    assert long_functions(ROOT / "bisector") == []


def test_the_measure_finds_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(tmp_path) == [f"m.py:5 long ({MAX_FUNCTION_LINES + 1} lines)"]


def test_lint_and_type_check_configured() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool = config["tool"]
    assert {"E", "F", "W", "I", "B", "UP", "SIM", "RUF"} <= set(tool["ruff"]["lint"]["select"])
    assert tool["mypy"]["strict"] is True and tool["mypy"]["packages"] == ["bisector"]
    test_extra = config["project"]["optional-dependencies"]["test"]
    assert {"ruff", "mypy"} <= {req.split(">")[0].split("=")[0] for req in test_extra}
    ci = (ROOT / ".ci" / "run").read_text()
    assert "ruff check" in ci and "ruff format --check" in ci and "mypy" in ci
    assert ci.index("mypy") < ci.index("pytest")

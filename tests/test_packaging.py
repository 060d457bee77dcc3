"""What the wheel holds: the bot and the instrument, not the studies that measure the bot.

`studies/` (7.5k lines and their result files) shipped in the wheel; it runs from a checkout."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_studies_are_not_installed() -> None:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(where=str(ROOT), include=found["include"], exclude=found.get("exclude", ()))
    assert "bisector" in packages and "benches" in packages and "bisector.commands" in packages
    assert [p for p in packages if p.split(".")[0] not in ("bisector", "benches")] == []


def test_a_study_still_runs_from_a_checkout() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "studies.search_accuracy", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr

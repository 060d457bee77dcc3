"""Fixtures shared by the demo's test modules: the demo repository and a place to export commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisector.demo import DemoManifest, write_demo_repo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoManifest:
    return write_demo_repo(tmp_path_factory.mktemp("demo") / "repo")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exports")

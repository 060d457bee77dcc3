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


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test, and every `bisector` it starts, gets a user cache dir of its own: the runs it
    makes must not become the user's "last store", nor a test read the user's (once a test opened
    a committed report's store that way, and left its WAL files beside it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("BISECTOR_STORE", raising=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow end-to-end tests first (their order kept): in two test processes a long test taken
    last leaves the other process idle at the end; started first, the short ones fill around them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

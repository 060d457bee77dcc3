"""What a worker imports ahead of its trial when a subject is an upstream's pytest-benchmark file, so
that a forked trial's session starts warm: pytest, the plugins its session loads and what they
import when a session configures (the hypothesis plugin: ~2 s on a 2-core VM), and pytest-benchmark's
timer precision, which it measures by spinning for one second in every new process. Done once in
the zygote (a throwaway session over an empty folder, its output dropped). A plugin that fails
here fails again, and is reported, in the trial's own session."""

from __future__ import annotations

import contextlib
import io
import tempfile
from importlib.metadata import entry_points

import pytest


def _import_plugins() -> None:
    for plugin in entry_points(group="pytest11"):
        try:
            plugin.load()
        except Exception:  # noqa: BLE001 - the trial's session reports it
            pass


def _configure_once() -> None:
    """One empty session with the trial's own flags: what plugins import on configure is then loaded."""
    with (
        tempfile.TemporaryDirectory(prefix="pytest-warm-") as empty,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        try:
            pytest.main(
                [
                    empty,
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-o",
                    "addopts=",
                    "--assert=plain",
                    "--collect-only",
                    "--rootdir",
                    empty,
                ]
            )
        except Exception:  # noqa: BLE001 - a warm-up only
            pass


def _timer_precision() -> None:
    """Measure the default timer's precision now, where pytest-benchmark keeps it per process
    (BenchmarkFixture._precisions, keyed by the timer); without it a trial spends the second itself."""
    try:
        from pytest_benchmark.fixture import BenchmarkFixture
        from pytest_benchmark.timers import compute_timer_precision, default_timer
    except ImportError:
        return
    cache = getattr(BenchmarkFixture, "_precisions", None)
    if isinstance(cache, dict) and default_timer not in cache:
        cache[default_timer] = compute_timer_precision(default_timer)


_import_plugins()
_configure_once()
_timer_precision()

"""The upstream's own pytest-benchmark tests as a subject: one pytest session inside the trial's
fresh process, with the device held, and each benchmark one shape.

The subject names its tests (`pytest = "tests/bench_ops.py::test_matmul"`, relative to the
checkout's source dir); each shape names its benchmark (`benchmark = "test_matmul[512]"`, by name,
by node id, or by the end of its node id). The session runs with the upstream's own conftest and
ini file, but without its `addopts` (a `-n auto` or `--benchmark-skip` there would spoil the run),
without the cache plugin (nothing written into the checkout), with plain asserts (pytest rewrites
every module of a plugin's package it imports during the session: hypothesis's took ~3 s of each
trial; a failed check still reads AssertionError, with its line), `--benchmark-only`, exactly the
protocol's repetitions as rounds (`--benchmark-min-rounds`, `--benchmark-max-time=0`; a test that
calls `benchmark.pedantic` keeps its own), its warm-up, the trial clock's timer (on the CPU the
process's CPU time by default, as every other subject: wall time counted a busy neighbour's 4 ms
slices, benches/timing.py), and `--benchmark-json`, whose raw rounds (seconds per iteration) become
the shape's `subject_ms`. A test that fails on an assertion is a
wrong result, one that raises is a crash, a skipped one is unavailable. There is no control: the
search compares the subject's own speed (`thresholds.metric = "speed"`). TFLOP/s and GB/s come from
`flops` / `bytes` in the benchmark's `extra_info`, else in the shape.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest


class Outcomes:
    """A pytest plugin object: each test's outcome and, for a failure, its last error line.

    It also answers pytest-benchmark's machine and commit info itself: the trial records both, and
    the plugin's own answers cost a py-cpuinfo subprocess and git calls (~1.5 s of each session on
    a 2-core VM)."""

    def __init__(self, sha: str = "") -> None:
        self.by_node: dict[str, tuple[str, str]] = {}
        self.sha = sha

    @pytest.hookimpl(tryfirst=True)
    def pytest_benchmark_generate_machine_info(self, config: Any) -> dict[str, str]:
        return {"node": platform.node(), "note": "the trial's output records the machine"}

    @pytest.hookimpl(tryfirst=True)
    def pytest_benchmark_generate_commit_info(self, config: Any) -> dict[str, str]:
        return {"id": self.sha, "note": "the commit under test"}

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when != "call" and not (report.failed or report.skipped):
            return
        if report.failed:
            text = str(getattr(report, "longreprtext", "") or report.longrepr)
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "") or text.strip()[-300:]
            kind = "wrong" if "AssertionError" in text or crash.startswith("assert") else "crash"
            self.by_node[report.nodeid] = (kind, crash.strip().splitlines()[0][:300] if crash.strip() else kind)
        elif report.skipped:
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.by_node[report.nodeid] = ("unavailable", f"skipped: {reason}"[:300])
        else:
            self.by_node.setdefault(report.nodeid, ("ok", ""))


def arguments(nodes: Sequence[str], source_dir: str, json_path: Path, reps: int, warmup: int, timer: str) -> list[str]:
    """pytest's command line for one trial; `timer` is the trial clock's (`Clock.host_timer`)."""
    paths = [str(Path(source_dir) / node) for node in nodes]
    warm = (
        ["--benchmark-warmup=on", f"--benchmark-warmup-iterations={warmup}"] if warmup else ["--benchmark-warmup=off"]
    )
    return [
        *paths,
        "--rootdir",
        source_dir,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-o",
        "addopts=",
        "-q",
        "--assert=plain",
        "--benchmark-only",
        f"--benchmark-json={json_path}",
        f"--benchmark-min-rounds={max(reps, 1)}",
        "--benchmark-max-time=0",
        f"--benchmark-timer={timer}",
        *warm,
    ]


def run_session(
    nodes: Sequence[str], source_dir: str, out_dir: Path, reps: int, warmup: int, sha: str, timer: str
) -> tuple[int, list[dict[str, Any]], Outcomes]:
    """Run the tests in this process: (pytest's exit code, the benchmarks of its JSON, outcomes)."""
    json_path = out_dir / "benchmark.json"
    json_path.unlink(missing_ok=True)
    outcomes = Outcomes(sha)
    # The session is the upstream's alone: not a worker of a pytest-xdist run the bot may sit in
    # (pytest-benchmark then disables itself), nor led by options from the bot's environment.
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_") or n == "PYTEST_ADDOPTS"]:
        del os.environ[name]
    code = int(pytest.main(arguments(nodes, source_dir, json_path, reps, warmup, timer), plugins=[outcomes]))
    benches = json.loads(json_path.read_text()).get("benchmarks", []) if json_path.exists() else []
    return code, benches, outcomes


def matches(wanted: str, name: str, node: str) -> bool:
    return wanted in (name, node) or node.endswith("::" + wanted) or node.endswith("/" + wanted)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def shape_result(
    shape: Mapping[str, Any], benches: Sequence[Mapping[str, Any]], outcomes: Outcomes, code: int
) -> dict[str, Any]:
    """One shape's result from the session: its benchmark's raw rounds and its test's outcome."""
    params, key = shape["params"], shape["key"]
    wanted = str(params.get("benchmark") or shape["name"])
    bench = next((b for b in benches if matches(wanted, str(b.get("name")), str(b.get("fullname")))), None)
    outcome = next((o for node, o in outcomes.by_node.items() if matches(wanted, node.rsplit("::", 1)[-1], node)), None)
    result: dict[str, Any] = {"shape": key, "status": "crash", "benchmark": wanted}
    if bench is not None:
        stats = bench.get("stats") or {}
        ms = [float(t) * 1e3 for t in stats.get("data") or []]
        extra = bench.get("extra_info") or {}
        flops = _number(extra.get("flops")) or _number(params.get("flops"))
        nbytes = _number(extra.get("bytes")) or _number(params.get("bytes"))
        result.update(
            benchmark=str(bench.get("fullname")),
            subject_ms=ms,
            rounds=len(ms),
            iterations=stats.get("iterations"),
            compile_s=None,
        )
        if flops and ms:
            result.update(flops=flops, subject_tflops=statistics.median(flops / (t * 1e-3) / 1e12 for t in ms))
        if nbytes and ms:
            result.update(bytes=nbytes, subject_gbps=statistics.median(nbytes / (t * 1e-3) / 1e9 for t in ms))
    if outcome is not None and outcome[0] != "ok":
        result.update(status=outcome[0], error=outcome[1])
    elif bench is None or not result.get("subject_ms"):
        ran = ", ".join(str(b.get("name")) for b in benches) or "none"
        result["error"] = (
            f"no benchmark {wanted!r} in the run (pytest exit code {code}; benchmarks: {ran})"
            if outcome is None
            else f"test {wanted!r} passed without a benchmark"
        )[:400]
    else:
        result["status"] = "ok"
    return result


def measure(
    shapes: Sequence[Mapping[str, Any]],
    subject: Mapping[str, Any],
    source_dir: str,
    out_dir: Path,
    reps: int,
    warmup: int,
    sha: str,
    timer: str,
) -> list[dict[str, Any]]:
    """Every shape of one pytest subject from one session."""
    code, benches, outcomes = run_session(
        list(subject.get("pytest") or ()), source_dir, out_dir, reps, warmup, sha, timer
    )
    return [shape_result(shape, benches, outcomes, code) for shape in shapes]

"""The kernel's limits on what code under test holds (bisector/isolation/cgroups.py), on this host's
real cgroups: tasks, memory the watch cannot see (tmpfs), and cgroups that outlive nothing.

Real build steps (`run_step`), real trial processes (spawned and forked) and a real bot killed by
SIGKILL. Where the host gives the bot no cgroups the tests that need them are skipped, naming the
reason; the fallback (the memory watch alone, said in the isolation line) is tested everywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from bisector.build.steps import run_step
from bisector.isolation import cgroups, sandbox
from bisector.isolation.cgroups import Limits
from bisector.isolation.fenced import fenced
from bisector.model import BuildResult, BuildStatus, TrialStatus
from bisector.runner import make_executor
from bisector.runner.executor import TrialJob
from tests.devices import DEVICES
from tests.processes import alive
from tests.test_sandbox import config, notes, trial

ROOT = Path(__file__).resolve().parents[1]
HOST = cgroups.probe()
needs_cgroups = pytest.mark.skipif(not HOST.active, reason=f"no cgroup limits on this host: {HOST.reason}")
needs_cgroupfs = pytest.mark.skipif(
    not HOST.hierarchies,
    reason=f"the bot makes no cgroups itself here ({HOST.method}: {HOST.reason or 'systemd scopes'})",
)

FORKS = textwrap.dedent("""
    import os, sys, time
    started = failed = 0
    for _ in range({n}):
        try:
            pid = os.fork()
        except OSError:
            failed += 1
            continue
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        started += 1
    print("forked:", started, "failed:", failed, flush=True)
""")


def gone_after_exit(before: list[str], pid: int, within_s: float = 20.0) -> bool:
    """The cgroups made since `before` are removed once their fences end (each fence removes its own
    as its command exits, which on a busy machine may land a moment after the executor closes)."""
    deadline = time.time() + within_s
    while groups_of(pid) != before and time.time() < deadline:
        time.sleep(0.2)
    return groups_of(pid) == before


def groups_of(pid: int) -> list[str]:
    """The cgroups bot `pid` made that still exist, in every hierarchy the bot uses."""
    return [
        name
        for h in HOST.hierarchies
        for name in os.listdir(h.base)
        if name.startswith(f"{cgroups.GROUP_PREFIX}{pid}-")
    ]


def test_the_isolation_line_names_the_limits_or_why_there_are_none() -> None:
    line = sandbox.probe().describe()
    if HOST.active:
        assert "tasks limited by the kernel per trial and build step" in line and HOST.method in line, line
    else:
        assert HOST.reason and f"no cgroup limits: {HOST.reason}" in line, line


@needs_cgroups
def test_a_build_step_forks_no_more_than_its_task_limit(tmp_path: Path) -> None:
    out = run_step(
        "forks",
        [sys.executable, "-c", FORKS.format(n=200)],
        tmp_path,
        dict(os.environ),
        120.0,
        tmp_path / "s.log",
        tmp_path / "all.log",
        writable=[tmp_path],
        max_tasks=64,
    )
    said = next(line for line in (tmp_path / "s.log").read_text().splitlines() if line.startswith("forked: "))
    started, failed = int(said.split()[1]), int(said.split()[3])
    assert started < 64 and failed == 200 - started, said
    assert out.ok, out.reason  # its children were taken with it, not counted as its failure


@needs_cgroups
def test_the_kernels_limit_stops_an_allocation_faster_than_the_watch(tmp_path: Path) -> None:
    """No memory watch at all here: only the kernel's limit (64 MiB + the margin) stands."""
    hog = "b = bytearray(1 << 20)\nkeep = [bytearray(64 << 20) for _ in range(40)]\nprint('survived')\n"
    proc = subprocess.run(
        fenced([sys.executable, "-c", hog], limits=Limits(64 << 20, 64)), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 128 + signal.SIGKILL and "survived" not in proc.stdout, proc.stdout + proc.stderr
    assert "the kernel killed 1 process(es) of this command over its cgroup memory limit" in proc.stderr, proc.stderr


@needs_cgroupfs
def test_tmpfs_written_by_a_build_step_counts_against_its_memory(tmp_path: Path) -> None:
    """700 MiB in /dev/shm is no resident memory of any process: the step's cgroup still holds it."""
    name = f"bisector-test-{uuid.uuid4().hex}"
    script = f"dd if=/dev/zero of=/dev/shm/{name} bs=1M count=700 status=none; echo wrote; sleep 20\n"
    try:
        out = run_step(
            "shm",
            ["bash", "-c", script],
            tmp_path,
            dict(os.environ),
            120.0,
            tmp_path / "s.log",
            tmp_path / "all.log",
            memory_bytes=200 << 20,
            writable=[tmp_path],
        )
    finally:
        Path(f"/dev/shm/{name}").unlink(missing_ok=True)
    assert not out.ok and "over the memory limit of 0.2 GiB" in out.reason, out.reason
    assert out.seconds < 20


SHM_KERNEL = textwrap.dedent("""
    import json, os

    def fill_shm(a, b):
        with open(os.path.join({probe!r}, "cgroup-" + str(os.getpid()) + ".json"), "w") as fh:
            json.dump({{"cgroup": open("/proc/self/cgroup").read()}}, fh)
        with open("/dev/shm/{name}", "wb") as fh:
            for _ in range(800):
                fh.write(b"x" * (1 << 20))
                fh.flush()
        import time
        time.sleep(15)
        return a @ b
""")


@needs_cgroupfs
@pytest.mark.parametrize("source", ["spawn", "fork"])
def test_tmpfs_written_by_a_trial_counts_against_its_memory(
    tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial (forked from the zygote too: each in its own cgroup) that fills /dev/shm is over its limit."""
    name = f"bisector-test-{uuid.uuid4().hex}"
    src, probes = tmp_path / "src", tmp_path / "probes"
    src.mkdir()
    probes.mkdir()
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(probes))
    (src / "kern.py").write_text(SHM_KERNEL.format(probe=str(probes), name=name))
    before = groups_of(os.getpid())
    try:
        rec = trial(tmp_path, src, "fill_shm", source, memory_gb=0.6, timeout=120.0)
    finally:
        Path(f"/dev/shm/{name}").unlink(missing_ok=True)
    assert rec.status is TrialStatus.CRASH and "over the memory limit of 0.6 GiB" in rec.error, rec.error
    (seen,) = notes(probes)
    leaf = "/main" if source == "spawn" else "/w1"
    assert any(
        line.split(":", 2)[2].endswith(leaf) and cgroups.GROUP_PREFIX in line
        for line in seen["cgroup"].splitlines()
        if "memory" in line or line.startswith("0::")
    ), seen
    assert gone_after_exit(before, os.getpid()), "a trial's cgroup outlived its executor"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["spawn", "fork"])
def test_a_trial_in_its_cgroup_measures_on_its_device(
    tmp_path: Path, device: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cgroup (where there is one) changes nothing a trial needs: CUDA initializes and measures in it."""
    src, probes = tmp_path / "src", tmp_path / "probes"
    src.mkdir()
    probes.mkdir()
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(probes))
    (src / "kern.py").write_text(
        textwrap.dedent(f"""
        import json, os

        def mm(a, b):
            with open(os.path.join({str(probes)!r}, "cgroup-" + str(os.getpid()) + ".json"), "w") as fh:
                json.dump({{"cgroup": open("/proc/self/cgroup").read()}}, fh)
            return a @ b
    """)
    )
    cfg = config(tmp_path, "kern:mm", kind=device)
    before = groups_of(os.getpid())
    with make_executor(cfg, tmp_path / "work", source=source, ahead=0, lock_devices=False) as executor:
        (outcome,) = executor.run([TrialJob(BuildResult("a" * 40, BuildStatus.OK, str(src)), cfg.shapes, seed=1)])
    rec = outcome.records[0]
    assert rec.status is TrialStatus.OK, rec.error + rec.log_tail
    (seen,) = notes(probes)
    assert (cgroups.GROUP_PREFIX in seen["cgroup"]) == HOST.active, seen
    assert gone_after_exit(before, os.getpid())


KILLED_BOT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[1]]
    from bisector.build.steps import run_step
    tmp = Path(sys.argv[2])
    run_step("long", ["bash", "-c", "sleep 300 & echo $! > child; wait"], tmp, dict(os.environ), 600.0,
             tmp / "s.log", tmp / "all.log", writable=[tmp])
""")


@needs_cgroupfs
def test_a_killed_bot_leaves_no_cgroup_and_nothing_in_one(tmp_path: Path) -> None:
    bot = subprocess.Popen([sys.executable, "-c", KILLED_BOT, str(ROOT), str(tmp_path)], cwd=tmp_path)
    mark = tmp_path / "child"
    deadline = time.monotonic() + 60
    while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert groups_of(bot.pid), "the step did not run in a cgroup of its bot's"
    bot.send_signal(signal.SIGKILL)
    bot.wait()
    deadline = time.monotonic() + 30
    while groups_of(bot.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not groups_of(bot.pid), "the killed bot's cgroups were left behind"


FALLBACK = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[1]]
    from bisector.build.steps import run_step
    from bisector.isolation import cgroups, sandbox
    tmp = Path(sys.argv[2])
    out = run_step("fork", [sys.executable, "-c", sys.argv[3]], tmp, dict(os.environ), 120.0, tmp / "s.log",
                   tmp / "all.log", writable=[tmp], max_tasks=64)
    print(json.dumps({"method": cgroups.probe().method, "line": sandbox.probe().describe(), "ok": out.ok,
                      "log": (tmp / "s.log").read_text()}))
""")


def test_without_cgroups_the_run_goes_on_and_says_why(tmp_path: Path) -> None:
    """Where cgroups are not allowed (here: turned off by the operator) the command runs, watched only."""
    env = {**os.environ, "BISECTOR_CGROUP": "off"}
    out = subprocess.run(
        [sys.executable, "-c", FALLBACK, str(ROOT), str(tmp_path), FORKS.format(n=100)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["method"] == "none" and seen["ok"], seen
    assert "memory watched from the bot only (no cgroup limits: BISECTOR_CGROUP=off)" in seen["line"]
    assert "forked: 100 failed: 0" in seen["log"]  # no task limit without cgroups: that is what they add


def test_a_config_bounds_tasks_and_refuses_too_few(tmp_path: Path) -> None:
    from bisector.config import parse
    from bisector.errors import ConfigError

    cfg = config(tmp_path, "kern:mm")
    assert cfg.protocol.max_tasks == cfg.build.max_tasks == cgroups.DEFAULT_TASKS
    data = {
        "name": "x",
        "upstream": {"repo": str(tmp_path)},
        "device": {"kind": "cpu"},
        "control": {"backend": "torch"},
        "subject": {"gemm": {"entry": "k:mm", "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 8, "N": 8, "K": 8, "dtype": "fp32"}]}},
        "build": {"max_tasks": 8},
    }
    with pytest.raises(ConfigError, match=r"build\.max_tasks: must be >= 64"):
        parse(data, tmp_path / "x.toml")


def test_a_forked_worker_is_moved_only_if_it_is_the_zygotes(tmp_path: Path) -> None:
    """The pid a zygote reports is translated and checked before anything is moved: a host process
    that happens to carry that number is never put in (and later killed with) a trial's cgroup."""
    if not HOST.hierarchies:
        pytest.skip("the bot makes no cgroups itself here")
    from bisector.runner.workers import ForkSource

    source = ForkSource(dict(os.environ), ("json",), tmp_path, limits=Limits(1 << 30, 256))
    try:
        stranger = subprocess.Popen(["sleep", "60"])
        assert source._adopt(source.zygote, stranger.pid) is None and alive(stranger.pid)
        assert cgroups.GROUP_PREFIX not in Path(f"/proc/{stranger.pid}/cgroup").read_text()
        stranger.kill()
        stranger.wait()
    finally:
        source.zygote.control.close()
        source.proc.terminate()
        source.proc.wait()
        source.log.close()

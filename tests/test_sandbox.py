"""Code under test attacks the bot the way issue 22 found it could: each attack here succeeded
before the sandbox (bisector/isolation/sandbox.py), the subreapers and the instrument snapshot.

The subjects are real upstream modules run in real trial processes (spawned and forked), the build
steps real bash scripts run by `run_step`. What they manage is written to a probe dir the test
opens to them (BISECTOR_SANDBOX_WRITABLE); the test then checks the bot's files, the host's
processes and /dev/shm from outside.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

import bisector
from bisector.build.steps import run_step
from bisector.config import parse
from bisector.isolation import sandbox
from bisector.isolation.sandbox import probe
from bisector.model import BuildResult, BuildStatus, TrialStatus
from bisector.report.markdown import header
from bisector.runner import make_executor
from bisector.runner.executor import TrialJob
from tests.devices import CONTROL, DEVICES
from tests.processes import alive
from tests.report_fixtures import demo_range

ROOT = Path(__file__).resolve().parents[1]
needs_sandbox = pytest.mark.skipif(not probe().sandboxed, reason=f"no sandbox on this host: {probe().reason}")
linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
BOT_FILE = Path(bisector.__file__).resolve().parent / "report" / "plots.py"

KERNELS = textwrap.dedent('''
    import json, os, socket, subprocess, sys, time
    import torch

    PROBE = {probe!r}
    TAG = {tag!r}

    def note(**kv):
        with open(os.path.join(PROBE, TAG + "-" + str(os.getpid()) + ".json"), "w") as fh:
            json.dump(kv, fh)

    def append_to_bot(a, b):
        """The theft of issue 22: reach the bot's own source through its package, or its path."""
        found = {{}}
        try:
            import bisector
            found["import"] = str(getattr(bisector, "__file__", None))
        except Exception as exc:
            found["import"] = "failed: " + repr(exc)
        try:
            with open({bot_file!r}, "a") as fh:
                fh.write("\\n# injected " + TAG + "\\n")
            found["append"] = "done"
        except OSError as exc:
            found["append"] = "failed: " + repr(exc)
        found["path"] = [p for p in sys.path if os.path.isdir(os.path.join(p, "bisector"))]
        note(**found)
        return a @ b

    def read_ancestors(a, b):
        """Walk /proc up from here and read every ancestor's environment."""
        seen, pid = [], os.getpid()
        while pid > 1:
            try:
                seen.append(open(f"/proc/{{pid}}/environ", "rb").read().decode("utf-8", "replace"))
                pid = int(open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
        every = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    every.append(open(f"/proc/{{p}}/environ", "rb").read().decode("utf-8", "replace"))
                except OSError:
                    pass
        note(ancestors=seen, every=every, pid=os.getpid())
        return a @ b

    def escape(a, b):
        """Leave processes behind: setsid, a double fork, one holding the trial's sockets, one
        holding memory, and files in /dev/shm."""
        socks = [int(fd) for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{{fd}}")
                 and os.readlink(f"/proc/self/fd/{{fd}}").startswith("socket:")]
        subprocess.Popen(["setsid", "sleep", "{tag}1"], pass_fds=socks, start_new_session=True)
        subprocess.Popen(["sh", "-c", "(sleep {tag}2 &) ; exit 0"])
        subprocess.Popen([sys.executable, "-c", "import time; keep = bytearray({hold_mb} << 20); "
                          "keep[::4096] = b'x' * len(keep[::4096]); time.sleep({tag}3)"], start_new_session=True)
        with open("/dev/shm/{tag}", "wb") as fh:
            fh.write(b"x" * (1 << 20))
        time.sleep({linger})
        return a @ b
''')


def config(tmp_path: Path, entry: str, memory_gb: float = 0.0, timeout: float = 120.0, kind: str = "cpu"):
    data = {
        "name": "x",
        "upstream": {"repo": str(tmp_path)},
        "device": {"kind": kind, "visible": [0]},
        "control": {"backend": CONTROL[kind]},
        "subject": {"gemm": {"entry": entry, "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 64, "N": 64, "K": 64, "dtype": "fp32"}]}},
        "protocol": {
            "reps": 2,
            "warmup": 1,
            "flush_mb": 1,
            "timeout_s": timeout,
            "jit_cache_env": [],
            "memory_gb": memory_gb,
        },
    }
    return parse(data, tmp_path / "x.toml")


def upstream(tmp_path: Path, tag: str, hold_mb: int = 8, linger: float = 0.5) -> tuple[Path, Path]:
    src, probes = tmp_path / "src", tmp_path / "probes"
    src.mkdir()
    probes.mkdir()
    (src / "kern.py").write_text(
        KERNELS.format(probe=str(probes), tag=tag, bot_file=str(BOT_FILE), hold_mb=hold_mb, linger=linger)
    )
    return src, probes


def trial(tmp_path: Path, src: Path, entry: str, source: str, **kw):
    cfg = config(tmp_path, f"kern:{entry}", **kw)
    with make_executor(cfg, tmp_path / "work", source=source, ahead=0, lock_devices=False) as executor:
        (outcome,) = executor.run([TrialJob(BuildResult("a" * 40, BuildStatus.OK, str(src)), cfg.shapes, seed=1)])
    return outcome.records[0]


def notes(probes: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(probes.glob("*.json"))]


def host_pids(pattern: str) -> list[int]:
    """Live processes of this host whose command line holds `pattern` (not this test's own)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if pattern in cmd and alive(int(name)):
                found.append(int(name))
    return found


def gone(pattern: str, within_s: float = 20.0) -> list[int]:
    """Processes matching `pattern` still alive after waiting up to `within_s` for them to end."""
    deadline = time.monotonic() + within_s
    while host_pids(pattern) and time.monotonic() < deadline:
        time.sleep(0.2)
    return host_pids(pattern)


@pytest.fixture
def probe_dir_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(tmp_path / "probes"))


def tag() -> str:
    """A number no other process on the host has in its command line (the escapees' sleep times)."""
    return str(900000 + uuid.uuid4().int % 99000)


@needs_sandbox
@linux
@pytest.mark.parametrize("source", ["spawn", "fork"])
def test_a_trial_cannot_append_to_the_bots_source(tmp_path: Path, source: str, probe_dir_writable: None) -> None:
    t = tag()
    src, probes = upstream(tmp_path, t)
    before = BOT_FILE.read_bytes()
    try:
        rec = trial(tmp_path, src, "append_to_bot", source)
        after = BOT_FILE.read_bytes()
    finally:
        if BOT_FILE.read_bytes() != before:  # the attack worked: undo it before failing
            BOT_FILE.write_bytes(before)
    assert rec.status is TrialStatus.OK, rec.error + rec.log_tail
    (seen,) = notes(probes)
    assert after == before, "code under test changed the bot's source"
    assert seen["append"].startswith("failed"), seen
    assert not seen["path"], f"the bot's checkout is on the trial's path: {seen['path']}"
    # the bot's package dir is not even readable there: `import bisector` finds nothing of it
    assert seen["import"].startswith("failed") or seen["import"] == "None", seen
    # and the bot's own lazy import of that module, later, is the code it shipped
    out = subprocess.run(
        [sys.executable, "-c", "import bisector.report.plots as p; print(p.__file__)"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == str(BOT_FILE), out.stderr
    assert hashlib.sha256(BOT_FILE.read_bytes()).digest() == hashlib.sha256(before).digest()


ANCESTOR_BOT = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [sys.argv[1]]
    from tests.test_sandbox import trial
    from pathlib import Path
    tmp = Path(sys.argv[2])
    rec = trial(tmp, tmp / "src", "read_ancestors", sys.argv[3])
    print(rec.status.value, rec.error)
""")


@needs_sandbox
@linux
@pytest.mark.parametrize("source", ["spawn", "fork"])
def test_no_trial_reads_a_token_from_an_ancestors_environ(tmp_path: Path, source: str) -> None:
    """Launched as cron or CI launch it: `env TOKEN=... timeout 1200 bot`: the `timeout` process
    (and the bot itself, here not re-executed by the CLI entry) holds the token in its environ."""
    t = tag()
    _src, probes = upstream(tmp_path, t)
    token = "ghp_ancestor" + uuid.uuid4().hex
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "BISECTOR_SANDBOX_WRITABLE": str(probes),
        "BISECTOR_LOCK_DIR": str(tmp_path / "locks"),
    }
    out = subprocess.run(
        [
            "env",
            f"BISECTOR_GITHUB_TOKEN={token}",
            "timeout",
            "600",
            sys.executable,
            "-c",
            ANCESTOR_BOT,
            str(ROOT),
            str(tmp_path),
            source,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=660,
    )
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stdout + out.stderr[-3000:]
    (seen,) = notes(probes)
    assert seen["ancestors"] and seen["every"], seen  # it did read environs: its own at least
    assert token not in json.dumps(seen), "code under test read the token from an ancestor's environ"


@linux
@pytest.mark.parametrize("source", ["spawn", "fork"])
def test_nothing_a_trial_starts_outlives_it_or_holds_it_open(
    tmp_path: Path, source: str, probe_dir_writable: None
) -> None:
    t = tag()
    src, _ = upstream(tmp_path, t)
    try:
        rec = trial(tmp_path, src, "escape", source, timeout=60.0)
        # the escapee holding the trial's socket did not keep it open until its time limit
        assert rec.status is TrialStatus.OK, rec.error + rec.log_tail
        assert rec.protocol["trial_wall_s"] < 60, rec.protocol["trial_wall_s"]
        assert not gone(f"sleep {t}1"), "a setsid escapee outlived its trial"
        assert not gone(f"sleep {t}2"), "a double-forked escapee outlived its trial"
        assert not gone(f"time.sleep({t}3)"), "an escapee holding memory outlived its trial"
        if probe().sandboxed:  # a private /dev/shm: what the trial put there is gone with it
            assert not Path(f"/dev/shm/{t}").exists(), "the trial's /dev/shm file outlived it"
    finally:
        for pid in host_pids(t):
            os.kill(pid, 9)
        Path(f"/dev/shm/{t}").unlink(missing_ok=True)


@linux
@pytest.mark.parametrize("source", ["spawn", "fork"])
def test_memory_held_by_an_escapee_counts_against_its_trial(
    tmp_path: Path, source: str, probe_dir_writable: None
) -> None:
    t = tag()
    src, _ = upstream(tmp_path, t, hold_mb=700, linger=20)
    try:
        rec = trial(tmp_path, src, "escape", source, memory_gb=0.5, timeout=120.0)
        assert rec.status is TrialStatus.CRASH and "over the memory limit" in rec.error, rec.error
        assert not gone(f"time.sleep({t}3)"), "an escapee holding memory outlived its trial"
    finally:
        for pid in host_pids(t):
            os.kill(pid, 9)
        Path(f"/dev/shm/{t}").unlink(missing_ok=True)


ESCAPING_STEP = "setsid sleep {t}1 & (sleep {t}2 &) ; echo x > /dev/shm/{t}; exit 0\n"


@linux
def test_nothing_a_build_step_starts_outlives_it(tmp_path: Path) -> None:
    t = tag()
    (tmp_path / "step.sh").write_text(ESCAPING_STEP.format(t=t))
    try:
        out = run_step(
            "escape",
            ["bash", str(tmp_path / "step.sh")],
            tmp_path,
            dict(os.environ),
            120.0,
            tmp_path / "s.log",
            tmp_path / "all.log",
            writable=[tmp_path],
        )
        assert out.ok, out.reason
        assert not gone(f"sleep {t}1"), "a setsid escapee outlived its build step"
        assert not gone(f"sleep {t}2"), "a double-forked escapee outlived its build step"
        if probe().sandboxed:
            assert not Path(f"/dev/shm/{t}").exists()
    finally:
        for pid in host_pids(t):
            os.kill(pid, 9)
        Path(f"/dev/shm/{t}").unlink(missing_ok=True)


@needs_sandbox
def test_a_build_step_writes_only_its_own_dirs(tmp_path: Path) -> None:
    """The store, other commits' builds, $HOME and the upstream's git config are read-only."""
    mine, other, repo = tmp_path / "entry", tmp_path / "other-entry", tmp_path / "up"
    for d in (mine, other, repo / ".git"):
        d.mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    store = tmp_path / "s.sqlite"
    store.write_bytes(b"db")
    script = (
        f"echo ok > {mine}/built; echo x >> {repo}/.git/config; echo x >> {store}; "
        f"touch {other}/poison; touch $HOME/.poison-{os.getpid()}; exit 0\n"
    )
    out = run_step(
        "write",
        ["bash", "-c", script],
        mine,
        dict(os.environ),
        120.0,
        tmp_path / "s.log",
        tmp_path / "all.log",
        writable=[mine],
    )
    assert out.ok and (mine / "built").read_text() == "ok\n", out.reason
    assert (repo / ".git" / "config").read_text() == "[core]\n" and store.read_bytes() == b"db"
    assert not (other / "poison").exists() and not Path(os.path.expanduser(f"~/.poison-{os.getpid()}")).exists()
    assert "Read-only file system" in (tmp_path / "s.log").read_text()


@pytest.mark.parametrize("device", DEVICES)
@needs_sandbox
def test_a_trial_runs_on_its_device_and_says_how_it_was_confined(tmp_path: Path, device: str) -> None:
    """A trial runs inside the sandbox on the CPU and on a GPU (whose driver initializes there:
    the namespace's own /proc is writable), measures, and its record says so."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "kern.py").write_text("import os\n\ndef mm(a, b):\n    assert os.getpid() != 1\n    return a @ b\n")
    cfg = config(tmp_path, "kern:mm", kind=device)
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=0, lock_devices=False) as executor:
        (outcome,) = executor.run([TrialJob(BuildResult("a" * 40, BuildStatus.OK, str(src)), cfg.shapes, seed=1)])
    rec = outcome.records[0]
    assert rec.status is TrialStatus.OK, rec.error + rec.log_tail
    assert rec.machine["device_kind"] == device
    assert rec.protocol["isolation"] == "sandbox" and sandbox.gpu_inside() == ""


@needs_sandbox
def test_the_sandboxs_own_proc_is_writable_but_its_kernel_wide_parts(tmp_path: Path) -> None:
    """CUDA needs a writable /proc inside the namespaces (error 304 otherwise, on an H200): the
    sandbox's own /proc is writable (a thread renames itself), /proc/sys and the like are not."""
    script = (
        "import os\n"
        "open(f'/proc/self/task/{os.getpid()}/comm', 'w').write('renamed')\n"
        "print(open('/proc/self/comm').read().strip())\n"
        "try:\n    open('/proc/sys/kernel/hostname', 'w').write('pwned')\nexcept OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    out = subprocess.run(
        sandbox.command([sys.executable, "-I", "-S", "-c", script]), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["renamed", "refused", "30"], out.stdout  # 30: EROFS
    assert sandbox.gpu_inside() == "" or "did not initialize" in sandbox.gpu_inside()


def test_the_isolation_is_probed_and_said(tmp_path: Path) -> None:
    """Each trial record and the report header say what confined the code under test."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "kern.py").write_text("def mm(a, b):\n    return a @ b\n")
    rec = trial(tmp_path, src, "mm", "spawn")
    assert rec.protocol["isolation"] == sandbox.trial_isolation(gpu=False)
    assert sandbox.trial_isolation(gpu=False) == ("sandbox" if probe().sandboxed else f"none: {probe().reason}")
    lines = header(replace(demo_range(), isolation=probe().describe()))
    assert any(line.startswith("Isolation of the code under test: ") for line in lines)

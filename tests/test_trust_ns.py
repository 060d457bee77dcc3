"""Code under test attacks the bot as issue 57 found it could, through the network, git, ptrace and
credential files; and a host without user namespaces fails closed where the run requires a sandbox.

Every attack is real: upstream modules run in real trial processes (forked from a real zygote), build
steps are real bash run by the real Builder or `run_step`, the bot a real process killed with
SIGKILL, the listeners real sockets of this host. What the code under test manages to see is written
to a probe dir the test opens to it (BISECTOR_SANDBOX_WRITABLE) and checked from outside.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import git
import pytest

from bisector.build.builder import Builder
from bisector.build.steps import run_step
from bisector.config import Build, BuildStep, Upstream, parse
from bisector.isolation import sandbox
from bisector.isolation.sandbox import probe
from bisector.model import BuildResult, BuildStatus, TrialStatus
from bisector.runner import make_executor
from bisector.runner.executor import TrialJob
from tests.devices import CONTROL, DEVICES
from tests.gitfixtures import commit_file
from tests.gitfixtures import git as run_git

ROOT = Path(__file__).resolve().parents[1]
needs_sandbox = pytest.mark.skipif(not probe().sandboxed, reason=f"no sandbox on this host: {probe().reason}")
EPERM, EACCES = 1, 13

KERNELS = textwrap.dedent('''
    import ctypes, json, os, socket, subprocess, sys, time
    import torch

    PROBE = {probe!r}

    def note(name, **kv):
        with open(os.path.join(PROBE, name + ".json"), "w") as fh:
            json.dump(kv, fh)

    def connect(a, b):
        """Reach the host: a TCP listener on its loopback, an abstract unix socket."""
        seen = {{"interfaces": [n for _, n in socket.if_nameindex()]}}
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=5).sendall(b"from the trial")
            seen["tcp"] = "connected"
        except OSError as exc:
            seen["tcp"] = exc.errno
        for name, address in (("abstract", {abstract!r}), ("pathname", {pathname!r})):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(address)
                s.sendall(b"from the trial")
                seen[name] = "connected"
            except OSError as exc:
                seen[name] = exc.errno
        note("connect", **seen)
        return a @ b

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    def poke(a, b):
        """Reach into the zygote this trial was forked from, and into a process it starts."""
        libc = ctypes.CDLL(None, use_errno=True)
        zygote = os.getppid()
        seen = {{"zygote_cmdline": open(f"/proc/{{zygote}}/cmdline", "rb").read().decode(errors="replace")}}
        try:
            region = next(l.split()[0] for l in open(f"/proc/{{zygote}}/maps") if l.split()[1].startswith("rw"))
            address = int(region.split("-")[0], 16)
            seen["maps"] = "read"
        except OSError as exc:
            address, seen["maps"] = 0x10000, exc.errno
        buf = ctypes.create_string_buffer(8)
        local, remote = IoVec(ctypes.addressof(buf), 8), IoVec(address, 8)
        read = libc.process_vm_readv(zygote, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        seen["process_vm_readv"] = "done" if read == 8 else ctypes.get_errno()
        # the same bytes written back: harmless where it works, and it works without the fix
        wrote = libc.process_vm_writev(zygote, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        seen["process_vm_writev"] = "done" if wrote == 8 else ctypes.get_errno()
        try:
            open(f"/proc/{{zygote}}/mem", "r+b").close()
            seen["mem"] = "opened"
        except OSError as exc:
            seen["mem"] = exc.errno
        seen["attach_zygote"] = _attach(libc, zygote)
        child = subprocess.Popen(["sleep", "30"])
        time.sleep(0.2)
        seen["attach_child"] = _attach(libc, child.pid)
        child.kill()
        child.wait()
        note("poke", **seen)
        return a @ b

    def _attach(libc, pid):
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
            return "attached"
        return ctypes.get_errno()

    def read_credentials(a, b):
        """Every credential file of the bot's home, and its upstream checkout's git config."""
        seen = {{}}
        for path in {paths!r}:
            try:
                seen[path] = open(path, errors="replace").read()
            except OSError as exc:
                seen[path] = "unreadable: " + exc.strerror
        note("credentials", **seen)
        return a @ b
''')


def config(tmp_path: Path, upstream: Path, entry: str, kind: str = "cpu"):
    data = {
        "name": "x",
        "upstream": {"repo": str(upstream)},
        "device": {"kind": kind, "visible": [0]},
        "control": {"backend": CONTROL[kind]},
        "subject": {"gemm": {"entry": entry, "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 64, "N": 64, "K": 64, "dtype": "fp32"}]}},
        "protocol": {"reps": 2, "warmup": 1, "flush_mb": 1, "timeout_s": 300.0, "jit_cache_env": []},
    }
    return parse(data, tmp_path / "x.toml")


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "probes"
    out.mkdir()
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(out))
    return out


def write_kernels(
    tmp_path: Path,
    probes: Path,
    port: int = 0,
    abstract: bytes = b"\0none",
    pathname: str = "/none",
    paths: tuple[str, ...] = (),
) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "kern.py").write_text(
        KERNELS.format(probe=str(probes), port=port, abstract=abstract, pathname=pathname, paths=list(paths))
    )
    return src


def trial(tmp_path: Path, src: Path, entry: str, kind: str = "cpu", upstream: Path | None = None):
    cfg = config(tmp_path, upstream or tmp_path, f"kern:{entry}", kind)
    sandbox.prepare(cfg)  # what every command does before it starts workers
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=0, lock_devices=False) as executor:
        (outcome,) = executor.run([TrialJob(BuildResult("a" * 40, BuildStatus.OK, str(src)), cfg.shapes, seed=1)])
    rec = outcome.records[0]
    assert rec.status is TrialStatus.OK, rec.error + rec.log_tail
    assert rec.protocol["isolation"] == "sandbox"
    return rec


class HostListeners:
    """A TCP listener on this host's loopback, an abstract and a pathname unix socket (in a dir the
    sandbox can read), as the bot's dask scheduler, a session bus or docker.sock would have;
    `accepted` says whether anyone got through."""

    def __init__(self, where: Path) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.abstract_name = f"\0bisector-test-{uuid.uuid4().hex}".encode()
        self.pathname = str(where / "host.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.abstract_name)
        self.named = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.named.bind(self.pathname)
        self.socks = (("tcp", self.tcp), ("abstract", self.unix), ("pathname", self.named))
        for _, sock in self.socks:
            sock.listen()
            sock.setblocking(False)

    def accepted(self) -> list[str]:
        got = []
        for name, sock in self.socks:
            try:
                sock.accept()[0].close()
                got.append(name)
            except BlockingIOError:
                pass
        return got

    def close(self) -> None:
        for _, sock in self.socks:
            sock.close()


@pytest.fixture
def listeners(tmp_path: Path):
    host = HostListeners(tmp_path)
    yield host
    host.close()


def notes(probes: Path, name: str) -> dict:
    return json.loads((probes / f"{name}.json").read_text())


# -- the network (issue 57, item 2) ---------------------------------------------------------------


@needs_sandbox
@pytest.mark.parametrize("device", DEVICES)
def test_a_trial_reaches_no_socket_of_the_host(
    tmp_path: Path, probes: Path, listeners: HostListeners, device: str
) -> None:
    """It runs (on a GPU: CUDA works without a network) but connects to nothing of the host."""
    src = write_kernels(tmp_path, probes, listeners.port, listeners.abstract_name, listeners.pathname)
    trial(tmp_path, src, "connect", device)
    seen = notes(probes, "connect")
    assert seen["interfaces"] == ["lo"], seen
    assert all(seen[k] != "connected" for k in ("tcp", "abstract", "pathname")), seen
    assert listeners.accepted() == []


@needs_sandbox
def test_a_build_step_reaches_no_socket_of_the_host(tmp_path: Path, listeners: HostListeners) -> None:
    script = (
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {listeners.port}), timeout=5)\n"
        f"    print('tcp connected')\nexcept OSError as e:\n    print('tcp refused', e.errno)\n"
        f"for name, where in (('abstract', {listeners.abstract_name!r}), ('pathname', {listeners.pathname!r})):\n"
        f"    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(where)\n"
        f"        print(name, 'connected')\n    except OSError as e:\n        print(name, 'refused', e.errno)\n"
    )
    out = run_step(
        "connect",
        [sys.executable, "-c", script],
        tmp_path,
        dict(os.environ),
        120.0,
        tmp_path / "s.log",
        tmp_path / "all.log",
        writable=[tmp_path / "entry"],
    )
    log = (tmp_path / "s.log").read_text()
    assert out.ok, log
    said = [line for line in log.splitlines() if re.fullmatch(r"(tcp|abstract|pathname) (refused \d+|connected)", line)]
    assert said == ["tcp refused 111", "abstract refused 111", "pathname refused 111"], log
    assert listeners.accepted() == []


@pytest.mark.slow
def test_the_local_dask_cluster_refuses_a_client_without_the_runs_certificate(tmp_path: Path) -> None:
    """A trial that reaches the scheduler anyway (no sandbox: a GPU's trials in the fence only)
    cannot run a task in a worker: the cluster speaks TLS and wants this run's certificate."""
    distributed = pytest.importorskip("distributed")
    from bisector.runner.cluster import local_cluster

    cluster = local_cluster([0])
    try:
        with distributed.Client(cluster, set_as_default=False) as client:  # the bot: its cluster's security
            assert client.run(lambda: "ok")
            address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:"), address
        marker = tmp_path / "ran-in-a-worker"
        attack = textwrap.dedent(f"""
            import distributed, pathlib
            for addr in ({address!r}, {address.replace("tls://", "tcp://")!r}):
                try:
                    c = distributed.Client(addr, timeout="8s", set_as_default=False)
                except Exception as exc:
                    print("refused", addr, type(exc).__name__)
                    continue
                c.run(lambda: pathlib.Path({str(marker)!r}).write_text("x"))
                print("connected", addr)
        """)
        out = subprocess.run(
            [sys.executable, "-c", attack],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert out.stdout.count("refused") == 2, out.stdout + out.stderr[-2000:]
        assert not marker.exists()
    finally:
        cluster.close()


# -- ptrace (issue 57, item 4) --------------------------------------------------------------------


@needs_sandbox
@pytest.mark.parametrize("device", DEVICES)
def test_a_trial_cannot_reach_into_its_zygote_or_another_process(tmp_path: Path, probes: Path, device: str) -> None:
    """PTRACE_ATTACH and process_vm_readv/writev on the zygote are refused (EPERM), its memory and
    maps unreadable; so is attaching to a process the trial started itself (dumpable after exec:
    another trial's compiler would be the same), which only the seccomp filter refuses."""
    src = write_kernels(tmp_path, probes)
    trial(tmp_path, src, "poke", device)
    seen = notes(probes, "poke")
    assert "--zygote" in seen["zygote_cmdline"], seen  # it attacked the zygote, not some other process
    for what in ("attach_zygote", "process_vm_writev", "process_vm_readv", "attach_child"):
        assert seen[what] == EPERM, (what, seen)
    assert seen["mem"] in (EPERM, EACCES) and seen["maps"] in (EPERM, EACCES), seen


# -- credentials (issue 57, item 7) ---------------------------------------------------------------

TOKEN = "ghp_" + uuid.uuid4().hex  # a token-shaped secret in every file


def credential_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Path]]:
    """A home with the credential files a CI runner or a developer keeps, and an upstream checkout
    whose git config holds actions/checkout's persisted token."""
    home = tmp_path / "home"
    files = {
        ".git-credentials": f"https://x-access-token:{TOKEN}@github.com\n",
        ".netrc": f"machine github.com login x password {TOKEN}\n",
        ".config/gh/hosts.yml": f"github.com:\n    oauth_token: {TOKEN}\n",
        ".gitconfig": f"[user]\n\tname = x\n[credential]\n\thelper = store\n"
        f'[url "https://x:{TOKEN}@github.com/"]\n\tinsteadOf = https://github.com/\n',
    }
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    monkeypatch.setenv("HOME", str(home))
    up = tmp_path / "upstream"
    up.mkdir()
    run_git(up, "init", "-q", "-b", "main")
    commit_file(up, "lib.py", "x = 1\n", "initial", 1)
    run_git(up, "config", "http.https://github.com/.extraheader", f"AUTHORIZATION: basic {TOKEN}")
    return up, [home / rel for rel in files] + [up / ".git" / "config"]


@needs_sandbox
def test_a_trial_reads_no_credential_file(tmp_path: Path, probes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    up, paths = credential_home(tmp_path, monkeypatch)
    src = write_kernels(tmp_path, probes, paths=tuple(map(str, paths)))
    trial(tmp_path, src, "read_credentials", upstream=up)
    seen = notes(probes, "credentials")
    assert set(seen) == set(map(str, paths))
    assert TOKEN not in json.dumps(seen), "code under test read a credential"
    assert "[core]" in seen[str(up / ".git" / "config")]  # the checkout's config, without the token


@needs_sandbox
def test_a_build_step_reads_no_credential_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real Builder: a step cats every file, and git still works in its worktree."""
    up, paths = credential_home(tmp_path, monkeypatch)
    run = "cat " + " ".join(map(str, paths)) + "; git config --list; git rev-parse HEAD"
    builder = Builder(
        git.Repo(up), Upstream(repo=str(up)), Build(recipe="command", steps=(BuildStep(run=run),)), tmp_path / "cache"
    )
    result = builder.build("main")
    log = Path(result.log_path).read_text()
    assert result.status is BuildStatus.OK, log
    assert TOKEN not in log, "a build step read a credential"
    assert run_git(up, "rev-parse", "HEAD") in log  # git works on the scrubbed config


# -- git in trees a step wrote (issue 57, item 3) -------------------------------------------------

REPOINT = textwrap.dedent("""\
    set -e
    if [ -e "$PROBE/repointed" ]; then exit 0; fi
    evil="$BISECTOR_SOURCE/.evil"
    git init -q "$evil"
    git -C "$evil" -c user.name=x -c user.email=x@y commit -q --allow-empty -m evil
    printf '#!/bin/sh\\necho ran >> {marker}\\n' > "$evil/fsmonitor.sh"
    chmod +x "$evil/fsmonitor.sh"
    git -C "$evil" config core.fsmonitor "$evil/fsmonitor.sh"
    git -C "$evil" config core.hooksPath "$evil"
    cp "$evil/fsmonitor.sh" "$evil/post-checkout"
    echo "gitdir: $evil/.git" > "$BISECTOR_SOURCE/.git"
    touch "$PROBE/repointed"
    sleep 600
""")

BOT = textwrap.dedent("""
    import sys
    sys.path[:0] = [sys.argv[1]]
    import git
    from pathlib import Path
    from bisector.build.builder import Builder
    from bisector.config import Build, BuildStep, Upstream
    up, cache, step, probes = sys.argv[2:6]
    build = Build(recipe="command", steps=(BuildStep(run=step, env={"PROBE": probes}),))
    result = Builder(git.Repo(up), Upstream(repo=up), build, Path(cache)).build("main")
    print(result.status.value, result.log_tail[-300:])
""")


def test_git_never_runs_a_fsmonitor_a_build_step_planted(tmp_path: Path, probes: Path) -> None:
    """A step points its worktree's `.git` at a git dir of its own whose config runs a command on
    `git status` (core.fsmonitor) and on checkouts (a hook); the bot is killed mid-build; the next
    run resumes that build. The command never runs (it would write `marker` as the bot)."""
    up = tmp_path / "upstream"
    up.mkdir()
    run_git(up, "init", "-q", "-b", "main")
    commit_file(up, "lib.py", "x = 1\n", "initial", 1)
    marker = tmp_path / "fsmonitor-ran"
    step = REPOINT.format(marker=marker)
    argv = [sys.executable, "-c", BOT, str(ROOT), str(up), str(tmp_path / "cache"), step, str(probes)]
    bot = subprocess.Popen(argv, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (probes / "repointed").exists():
            assert bot.poll() is None, bot.stdout.read().decode() if bot.stdout else ""
            assert time.monotonic() < deadline, "the step never repointed its tree"
            time.sleep(0.2)
    finally:
        bot.send_signal(signal.SIGKILL)  # killed mid-build: the next run resumes it
        bot.wait()
    trees = [p for p in (tmp_path / "cache").rglob("tree") if (p / ".evil").is_dir()]
    assert trees and "/.evil/" in (trees[0] / ".git").read_text(), "the attack was not in place"
    resumed = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0 and resumed.stdout.startswith("ok"), resumed.stdout + resumed.stderr[-2000:]
    assert not marker.exists(), "git ran the command of a git dir a build step planted"
    (tree,) = [p for p in (tmp_path / "cache").rglob("tree") if (p / "lib.py").is_file()]
    assert not (tree / ".evil").exists() and "/.evil/" not in (tree / ".git").read_text()  # checked out anew
    out = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True)
    assert out.returncode == 0 and not marker.exists()


# -- fail closed (issue 57, item 9) ---------------------------------------------------------------

NO_USERNS = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [sys.argv[1]]
    from bisector.isolation.sandbox_init import install_seccomp
    install_seccomp((), new_user_ns=False)  # what a host that forbids user namespaces answers
    os.execv(sys.executable, [sys.executable, "-m", "bisector", *sys.argv[2:]])
""")


def build_config(tmp_path: Path, up: Path, extra: str = "") -> Path:
    path = tmp_path / f"cfg{len(extra)}.toml"
    path.write_text(
        f'name = "x"\n[upstream]\nrepo = "{up}"\n[device]\nkind = "cpu"\n[control]\nbackend = "torch"\n'
        f'[subject.gemm]\nentry = "lib:mm"\nadapter = "torch"\n'
        f'[[suites.gemm.shapes]]\nname = "a"\nM = 8\nN = 8\nK = 8\ndtype = "fp32"\n'
        f'[build]\ncache_dir = "{tmp_path / "cache"}"\nrecipe = "command"\n'
        f'[[build.steps]]\nrun = "touch $BISECTOR_PREFIX/built"\n{extra}'
    )
    return path


def test_a_run_that_requires_the_sandbox_fails_closed_where_user_namespaces_are_refused(tmp_path: Path) -> None:
    """The bot runs where unshare(CLONE_NEWUSER) is refused (a seccomp filter, as Docker's default
    profile does): the real probe finds no sandbox; a config with `[sandbox] require = true` stops
    with one line and exit 3, building nothing; without it the build runs (unsandboxed, as said)."""
    up = tmp_path / "upstream"
    up.mkdir()
    run_git(up, "init", "-q", "-b", "main")
    commit_file(up, "lib.py", "def mm(a, b):\n    return a @ b\n", "initial", 1)
    env = {**{k: v for k, v in os.environ.items() if k != "BISECTOR_SANDBOX"}, "PYTHONPATH": str(ROOT)}

    def bisector(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", NO_USERNS, str(ROOT), *args], env=env, capture_output=True, text=True, timeout=300
        )

    required = bisector("build", "--config", str(build_config(tmp_path, up, "[sandbox]\nrequire = true\n")), "main")
    assert required.returncode == 3, required.stdout + required.stderr
    (line,) = required.stderr.strip().splitlines()
    assert line.startswith("error: no sandbox for code under test on this host (namespaces refused here"), line
    assert "[sandbox] require = true" in line
    assert not list((tmp_path / "cache").rglob("built"))

    plain = bisector("build", "--config", str(build_config(tmp_path, up)), "main")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert list((tmp_path / "cache").rglob("built"))


def test_the_sandbox_key_is_read_and_fork_code_requires_the_sandbox_by_default(tmp_path: Path) -> None:
    from bisector import config as config_mod
    from bisector.errors import ConfigError
    from bisector.triggers.fork_policy import forks_need_sandbox, must_be_sandboxed
    from bisector.triggers.slash_commands import PerfCommand

    up = tmp_path
    load = config_mod.load
    assert load(build_config(tmp_path, up)).sandbox.require is None
    assert forks_need_sandbox(load(build_config(tmp_path, up)))
    assert load(build_config(tmp_path, up, "[sandbox]\nrequire = true\n")).sandbox.require is True
    assert not forks_need_sandbox(load(build_config(tmp_path, up, "[sandbox]\nrequire = false\n")))
    assert not forks_need_sandbox(load(build_config(tmp_path, up, "[triggers]\nallow_unsandboxed_forks = true\n")))
    nobody = lambda: pytest.fail("no ref of the upstream to look up for /perf")  # noqa: E731
    default, off, on = (
        load(build_config(tmp_path, up, extra))
        for extra in ("", "[sandbox]\nrequire = false\n", "[sandbox]\nrequire = true\n")
    )
    assert must_be_sandboxed(PerfCommand(), "org/lib", "carol/lib", default, nobody)  # a fork's head
    assert not must_be_sandboxed(PerfCommand(), "org/lib", "org/lib", default, nobody)  # the upstream's own
    assert not must_be_sandboxed(PerfCommand(), "org/lib", "carol/lib", off, nobody)
    assert must_be_sandboxed(PerfCommand(), "org/lib", "org/lib", on, nobody)
    with pytest.raises(ConfigError, match=r"sandbox\.require: true contradicts"):
        load(build_config(tmp_path, up, "[triggers]\nallow_unsandboxed_forks = true\n[sandbox]\nrequire = true\n"))
    with pytest.raises(ConfigError, match=r"sandbox\.require: must be bool"):
        load(build_config(tmp_path, up, '[sandbox]\nrequire = "yes"\n'))


@needs_sandbox
def test_required_refuses_to_run_anything_unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside `required` (a fork's code), a command the host would run unsandboxed is refused."""
    from bisector.errors import SandboxUnavailable

    with sandbox.required(gpu=False):
        assert sandbox.wrap(["true"], [])[0].endswith("unshare")
        monkeypatch.setattr(sandbox, "applies", lambda gpu: False)
        with pytest.raises(SandboxUnavailable):
            sandbox.wrap(["true"], [])
    assert sandbox.wrap(["true"], []) == ["true"]  # outside it, as before

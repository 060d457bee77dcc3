"""A trial process started before its trial is known, so that its start costs the device nothing.

    python -m benches.worker --fd N [--preload torch,triton]     one worker, spawned
    python -m benches.worker --zygote --fd N [--preload ...]     a zygote that forks workers

A worker imports what every trial needs (torch, triton: seconds of CPU) and says `ready` on its
socket; the bot then hands it one trial (spec, output, log, the trial's own environment: device,
JIT cache dirs), and the worker runs `benches.trial.run` with a gate that asks the bot for the
device (`want`) and waits for `go`, and says `release` when its device section ends. One worker
runs one trial and exits: a fresh process per trial, as the cold protocol wants.

The zygote imports the same modules once and forks a worker per request (the bot sends one end of
a socketpair with SCM_RIGHTS). Nothing in the zygote touches the device before it forks: the
child picks its device (CUDA_VISIBLE_DEVICES) and its JIT cache dirs from the trial's environment,
which CUDA and Triton read when first used, not at import.

Nothing a trial starts outlives it: a worker is a child subreaper (PR_SET_CHILD_SUBREAPER), so
what its trial started, `setsid` or double-forked, stays below it (and under the bot's memory
watch); it kills all of that before it exits, and the zygote, a subreaper too, kills any process
that reaches it from a worker that was killed first.

The messages are JSON lines; the bot side is bisector/runner/workers.py. This module, like all of
`benches`, imports nothing from `bisector`.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4


class Channel:
    """JSON lines over a connected stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb")

    def send(self, **message: Any) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def recv(self) -> dict[str, Any]:
        line = self._reader.readline()
        if not line:
            raise EOFError("the bot closed the channel")
        return json.loads(line)


class SocketGate:
    """benches.trial's gate: ask the bot for the device, wait for it, give it back."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def acquire(self, brief: bool = False) -> dict[str, Any]:
        self.channel.send(msg="want", t=time.time(), **({"brief": True} if brief else {}))
        while "go" not in (message := self.channel.recv()):
            pass
        return message

    def release(self, brief: bool = False) -> None:
        self.channel.send(msg="release", t=time.time(), **({"brief": True} if brief else {}))


def preload(modules: Sequence[str]) -> list[str]:
    """Import what every trial imports, then compute what each trial's first kernel call would
    compute again from the same files (`triton_key`) and import what it would import (`TRITON_LAZY`);
    a module missing here is the trial's to report, not ours."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - e.g. triton absent on a CPU host
            failed.append(name)
    if "triton" in modules and "triton" not in failed:
        triton_key()
        for name in TRITON_LAZY:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - not in this Triton: its first call imports nothing of it
                pass
    return failed


# What Triton imports only at a kernel's first call: Triton 3.6's argument specializer imports its Gluon
# dialect, 0.15 s of a later trial's 0.25 s precompile of the demo's attention alone on the H200 host
# (its .py files compiled anew: the image's site-packages keep no bytecode; studies/precompile_parts.py).
TRITON_LAZY = ("triton.experimental.gluon",)


def triton_key() -> bool:
    """Triton's own cache key (a sha256 of its compiler's files and of libtriton, ~0.3-0.4 s of CPU),
    computed once here: it is cached per process, and every trial's first JIT call, also a warm
    cache's, would hash the same files again on the host where other trials set up
    (studies/results/h200-first-calls.txt). It reads files only, never the device. False where this
    Triton has no such function."""
    try:
        from triton.runtime.cache import triton_key as key
    except ImportError:
        return False
    try:
        key()
    except Exception:  # noqa: BLE001 - a trial computes it itself, as it did before
        return False
    return True


def become_subreaper() -> None:
    """Orphans of this process's descendants are re-parented to it, not to the host's init."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def not_dumpable() -> None:
    """No process of the same user may ptrace this one or read or write its memory (ptrace,
    process_vm_writev, /proc/PID/mem): a trial cannot reach into the zygote it was forked from, nor
    into another trial. Inherited by forks, reset by exec (the sandbox's seccomp filter covers those)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def child_pids() -> list[int]:
    """This process's children (orphans it adopted as a subreaper included)."""
    out: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(x) for x in Path(f"/proc/self/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


def end_all(keep: frozenset[int] = frozenset()) -> None:
    """SIGKILL this process's children but `keep`, and reap them; what they leave comes back to
    this subreaper as children and goes in the next round."""
    for _ in range(400):
        strays = [pid for pid in child_pids() if pid not in keep]
        if not strays:
            return
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _redirect_output(log: str) -> None:
    """stdout and stderr to the trial's log, made by the bot in the trial's fresh dir (never a link
    another trial planted there: O_NOFOLLOW)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def serve(channel: Channel, started: float, loaded: tuple[float, float], failed: Sequence[str]) -> int:
    """Say ready, take one trial, run it with the bot's gate."""
    torch = sys.modules.get("torch")
    # Forked workers need a device runtime nobody has touched yet; say so if the preload touched it.
    cuda = bool(torch is not None and torch.cuda.is_initialized())
    channel.send(
        msg="ready",
        pid=os.getpid(),
        started=started,
        preload=list(loaded),
        preload_failed=list(failed),
        cuda_initialized=cuda,
    )
    opened: dict[str, str] = {}
    try:
        message = channel.recv()
        while "job" not in message:
            if "device" in message:
                opened, seconds = open_device(message["device"])
                channel.send(msg="opened", t=time.time(), s=seconds)
            message = channel.recv()
        job = message["job"]
    except EOFError:
        return 0  # the pool was closed before this worker got a trial
    changed = {k: v for k, v in opened.items() if job["env"].get(k, v) != v or k in job.get("unset", ())}
    if changed:  # the bot's guarantee (one device a pool) broken: never time on another device's context
        raise RuntimeError(f"the device this worker opened differs from its trial's: {sorted(changed)}")
    _redirect_output(job["log"])
    os.chdir(job["cwd"])
    for name in job.get("unset", ()):
        os.environ.pop(name, None)
    os.environ.update(job["env"])
    if job.get("cpu") is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(job["cpu"])})
    scratch = own_scratch(job.get("scratch_in"))
    from benches import trial  # after the trial's environment is in place

    # The spec comes with the job; the output goes back on this socket as it grows: the bot reads
    # neither from a path (bisector/isolation/safe_fs.py says why).
    spec = job["spec_data"] if "spec_data" in job else json.loads(Path(job["spec"]).read_text())
    try:
        trial.run(spec, Path(job["out"]), gate=SocketGate(channel), report=lambda out: channel.send(msg="out", out=out))
    finally:
        end_all()  # what the trial started (and its /dev/shm users) goes with it
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    channel.send(msg="done", t=time.time())
    return 0


SCRATCH_PREFIX = "bisector-trial-"


def own_scratch(where: str | None, pid: int | None = None) -> str:
    """A temp dir of this trial's own in `where` (the sandbox's private tmpfs), made the temp dir of
    everything the trial runs; "" when the bot gave the trial one already (TMPDIR)."""
    if not where:
        return ""
    path = os.path.join(where, f"{SCRATCH_PREFIX}{pid or os.getpid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    for name in ("TMPDIR", "TEMP", "TMP"):
        os.environ[name] = path
    tempfile.tempdir = path  # gettempdir() caches what it found at the first call (an import's)
    return path


def open_device(prelude: dict[str, Any]) -> tuple[dict[str, str], float | None]:
    """Apply the device's environment (bisector/runner/executor.py `Prelude`) and create its context,
    as the trial would first thing (benches.trial `_open_device`): an allocation, no kernel. Returns
    the environment applied and the seconds it took (None where there is no device to open)."""
    env = {str(k): str(v) for k, v in prelude.get("env", {}).items()}
    for name in prelude.get("unset", ()):
        os.environ.pop(name, None)
    os.environ.update(env)
    torch = sys.modules.get("torch")
    if prelude.get("kind") == "cpu" or torch is None or not torch.cuda.is_available():
        return env, None
    start = time.perf_counter()
    torch.empty(1, device="cuda")
    return env, round(time.perf_counter() - start, 6)


def _socket(fd: int) -> socket.socket:
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)


RETIRE = b"r"  # the bot's word to a zygote it replaced (bisector/runner/workers.py: ForkSource.renew)
PRELOAD = b"p"  # followed by a JSON list of module names and a newline: import them (benches/env_preload.py)
FORK = b"w"  # sent with the new worker's socket (SCM_RIGHTS)


def control_words(buf: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The bot's words in `buf`, each (kind, payload), and what is left of a word not yet whole."""
    words: list[tuple[bytes, bytes]] = []
    while buf:
        kind = buf[:1]
        if kind == PRELOAD:
            end = buf.find(b"\n")
            if end < 0:
                break
            words.append((kind, buf[1:end]))
            buf = buf[end + 1 :]
        else:
            words.append((kind, b""))
            buf = buf[1:]
    return words, buf


def zygote(control: socket.socket, started: float, loaded: tuple[float, float], failed: Sequence[str]) -> int:
    """Fork a worker for every socket the bot sends; report each child's pid and, later, its exit."""
    control.sendall((json.dumps({"msg": "zygote", "pid": os.getpid(), "preload": list(loaded)}) + "\n").encode())
    children: set[int] = set()
    retired = False  # the bot made a new zygote: fork no more, end once the last child has
    pending = b""  # a word of the bot's not yet whole
    become_subreaper()
    control.settimeout(0.5)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 4096, 1)
        except TimeoutError:
            data, fds = b"", []
            _reap(control, children)
            if retired and not children:
                return 0
            continue
        except OSError:
            return 0
        if not data and not fds:
            return 0  # the bot is gone: the fence around us takes the children
        words, pending = control_words(pending + data)
        for kind, payload in words:
            if kind == RETIRE:
                retired = True
            elif kind == PRELOAD:
                _preload_more(control, payload)
        for fd in fds:
            pid = os.fork()
            if pid == 0:
                control.close()
                become_subreaper()
                not_dumpable()
                os.setpgid(0, 0)  # its own group: the bot kills a worker without its siblings
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = 1
                try:
                    code = serve(Channel(_socket(fd)), time.time(), loaded, failed)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            os.close(fd)
            children.add(pid)
            control.sendall((json.dumps({"msg": "forked", "pid": pid}) + "\n").encode())
        _reap(control, children)
        if retired and not children:
            return 0


def _preload_more(control: socket.socket, payload: bytes) -> None:
    """Import the environment's modules the bot names (checked, benches/env_preload.py) and say how it went."""
    from benches import env_preload

    try:
        names = json.loads(payload)
    except ValueError:
        names = []
    answer = env_preload.zygote_load([str(n) for n in names] if isinstance(names, list) else [])
    try:
        control.sendall((json.dumps({"msg": "preloaded", **answer}) + "\n").encode())
    except OSError:
        pass


def _reap(control: socket.socket, children: set[int]) -> None:
    end_all(keep=frozenset(children))  # a killed worker's orphans, adopted here
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            children.discard(pid)
            continue
        if done:
            children.discard(pid)
            shutil.rmtree(os.path.join("/dev/shm", f"{SCRATCH_PREFIX}{pid}"), ignore_errors=True)  # a killed trial's
            code = os.waitstatus_to_exitcode(status)
            try:
                control.sendall((json.dumps({"msg": "exited", "pid": pid, "code": code}) + "\n").encode())
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.worker")
    parser.add_argument("--fd", type=int, required=True, help="the socket to the bot")
    parser.add_argument("--preload", default="torch", help="modules every trial imports, comma-separated")
    parser.add_argument("--zygote", action="store_true", help="fork a worker per request instead")
    args = parser.parse_args(argv)
    not_dumpable()  # before any module that is not the interpreter's own is imported
    if not args.zygote:
        become_subreaper()
    started = time.time()
    failed = preload([m for m in args.preload.split(",") if m])
    loaded = (started, time.time())
    if args.zygote:
        code = zygote(_socket(args.fd), started, loaded, failed)
        # Its workers are reaped and it holds nothing but its log: end without the interpreter's
        # teardown, which with torch loaded took ~1 s of the bot's exit (it waits for its zygotes).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return serve(Channel(_socket(args.fd)), started, loaded, failed)


if __name__ == "__main__":
    sys.exit(main())

"""Where trial processes come from: spawned one by one, or forked from a zygote that imported torch.

Both give a `Worker`: a fresh process, fenced (bisector/isolation/fence.py), that has imported what
every trial needs and waits on its socket for one trial (benches/worker.py is the other side).
- `SpawnSource`: `python -m benches.worker` per trial, each paying its own interpreter start and
  imports, in parallel with other trials' device time when started ahead.
- `ForkSource`: one zygote imports once and forks a worker per trial (~ms). Nothing in the zygote
  has touched CUDA when it forks; the child picks its device and JIT cache dirs when it gets its
  trial. On a 2-core CPU host this saves the ~2-3 s of CPU that `import torch` costs per trial.

Each process is started in the sandbox (bisector/isolation/sandbox.py) where the host allows it:
its PIDs are then the namespace's, and `Worker.found` translates the pid a worker reports.

Sources only make processes; the executor (bisector/runner/executor.py) decides when and where
they run. Messages are JSON lines; a source is driven from the executor's one event-loop thread.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benches.worker import FORK, PRELOAD, RETIRE
from bisector.errors import BisectorError
from bisector.isolation import cgroups, sandbox
from bisector.isolation.fenced import fenced, fenced_in
from bisector.isolation.lines import Lines
from bisector.isolation.memwatch import tree


@dataclass
class Worker:
    """One trial process: its socket, and what is known of it so far."""

    sock: socket.socket
    started: float
    proc: subprocess.Popen[bytes] | None = None  # spawned workers; forked ones are the zygote's children
    pid: int | None = None  # as this bot sees it
    root: int | None = None  # the fence above it (a sandbox's pids are translated below it)
    inner: int | None = None  # the pid it reported (its own namespace's)
    pgid: int | None = None
    pidfd: int | None = None  # the worker's, opened when its pid was found: what `kill` signals
    ready: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    # A forked worker's own cgroup: made and entered when its pid is known, before any trial.
    adopt: Callable[[int], cgroups.Leaf | None] | None = None
    leaf: cgroups.Leaf | None = None
    # its source's lineage when it was made (`WorkerSource.renew`); AHEAD_OF_RENEWAL until the
    # renewal it was forked ahead for (`WorkerSource.start_next`)
    lineage: int = 0
    lines: Lines = field(init=False)

    def __post_init__(self) -> None:
        self.sock.setblocking(False)
        self.lines = Lines(self.sock)

    def found(self, reported: int) -> bool:
        """The pid of this worker as its zygote (or, spawned, the worker itself before its trial)
        reported it: noted once, and only when it names a process below the fence the bot started
        for it; then held as a pidfd, so that a later kill reaches that process or nothing. False
        when it was refused (or already known): a pid a trial chose is never signalled."""
        if self.inner is not None or self.root is None:
            return False
        pid = sandbox.outer_pid(reported, self.root)
        if pid == self.root or pid not in tree(self.root):
            return False
        try:
            group = os.getpgid(pid)
            pidfd: int | None = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
        except OSError as exc:
            if exc.errno != errno.ENOSYS:  # gone already; ENOSYS: a kernel before 5.3 (`kill` checks the tree then)
                return False
            pidfd = None
        self.inner, self.pid, self.pidfd = reported, pid, pidfd
        self.pgid = pid if group == pid else None  # its own group (a forked worker's): killed as one
        if self.adopt is not None and self.leaf is None:
            self.leaf = self.adopt(self.pid)
        return True

    def send(self, **message: Any) -> bool:
        try:
            self.sock.setblocking(True)
            self.sock.sendall((json.dumps(message) + "\n").encode())
            return True
        except OSError:
            return False
        finally:
            self.sock.setblocking(False)

    def kill(self) -> None:
        """SIGKILL the worker and, while it is alive to vouch that its pid is still its own, its
        process group (its compile children included); then the fence the bot started, if any.
        Nothing else: no pid a message named."""
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, 0)  # alive: its pid (and group id) not reused
                if self.pgid is not None:
                    os.killpg(self.pgid, signal.SIGKILL)
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            elif self.pid is not None and self.root is not None and self.pid in tree(self.root):
                os.killpg(self.pgid, signal.SIGKILL) if self.pgid is not None else os.kill(self.pid, signal.SIGKILL)
        except OSError:  # gone (ProcessLookupError), or never ours to signal
            pass
        if self.proc is not None:
            try:
                self.proc.terminate()  # the fence: it kills what is left of the session
            except ProcessLookupError:
                pass

    def close(self, wait_s: float = 0.0) -> None:
        """Close the socket; wait up to `wait_s` for the exit status (a crash wants it, a clean end
        does not: the fence is reaped later by `reap`)."""
        try:
            self.sock.close()
        except OSError:
            pass
        cgroups.end_leaf(self.leaf)  # the trial is over: what it left in its cgroup goes
        self.leaf = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.proc is not None:
            try:
                self.exit_code = self.proc.wait(timeout=wait_s) if wait_s else self.proc.poll()
            except subprocess.TimeoutExpired:
                pass

    def reap(self) -> bool:
        """True once the process is gone (its status collected)."""
        if self.proc is None:
            return True
        self.exit_code = self.proc.poll()
        return self.exit_code is not None


AHEAD_OF_RENEWAL = -1  # the lineage of a worker forked ahead for the next renewal: no trial takes it before


class WorkerSource(Protocol):
    kind: str
    lineage: int  # bumped by `renew`: the workers made since share no process history with older ones

    def start(self) -> Worker: ...

    def start_next(self) -> Worker | None: ...

    def renew(self, to: int = 0) -> int: ...

    def sockets(self) -> list[socket.socket]: ...

    def on_readable(self, sock: socket.socket, workers: Sequence[Worker]) -> None: ...

    def learn(self, names: Sequence[str]) -> None: ...

    def close(self) -> None: ...


def worker_command(preload: Sequence[str], fd: int, zygote: bool = False) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benches.worker",
        "--fd",
        str(fd),
        "--preload",
        ",".join(preload),
        *(["--zygote"] if zygote else []),
    ]


class SpawnSource:
    """A new fenced `python -m benches.worker` per trial."""

    kind = "spawn"

    def __init__(
        self,
        env: Mapping[str, str],
        preload: Sequence[str],
        cwd: Path,
        writable: Sequence[Path] = (),
        gpu: bool = False,
        limits: cgroups.Limits | None = None,
    ) -> None:
        self.env, self.preload, self.cwd = dict(env), tuple(preload), Path(cwd)
        self.writable, self.gpu, self.limits = tuple(writable), gpu, limits
        self.count, self.lineage = 0, 0

    def renew(self, to: int = 0) -> int:
        """Every spawned worker is a fresh interpreter already: only the count moves on (to `to`
        at least: lineages no job asked for are skipped)."""
        self.lineage = max(self.lineage + 1, to)
        return self.lineage

    def start(self) -> Worker:
        ours, theirs = socket.socketpair()
        self.count += 1
        log = open(self.cwd / f"worker-{os.getpid()}-{self.count}.log", "ab")  # noqa: SIM115 - closed in finally
        try:
            argv = sandbox.wrap(worker_command(self.preload, theirs.fileno()), self.writable, gpu=self.gpu)
            proc = subprocess.Popen(
                fenced(argv, [theirs.fileno()], self.limits),
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=[theirs.fileno()],
            )
        finally:
            theirs.close()
            log.close()
        return Worker(ours, time.time(), proc=proc, root=proc.pid, lineage=self.lineage)

    def start_next(self) -> Worker | None:
        """None: a spawned worker of the next lineage would be no fresher than one started then."""
        return None

    def sockets(self) -> list[socket.socket]:
        return []

    def on_readable(self, sock: socket.socket, workers: Sequence[Worker]) -> None:
        pass

    def learn(self, names: Sequence[str]) -> None:
        """Nothing: each worker is a fresh interpreter, with no zygote to import them once."""

    def close(self) -> None:
        pass


@dataclass
class _Zygote:
    """One zygote process, the socket it is asked for forks on, and the workers it has not yet named."""

    proc: subprocess.Popen[bytes]
    control: socket.socket
    group: cgroups.Group | None
    lines: Lines = field(init=False)
    waiting: list[Worker] = field(default_factory=list)  # asked for, pid not yet known (answered in order)

    def __post_init__(self) -> None:
        self.control.setblocking(False)
        self.lines = Lines(self.control)

    def say(self, word: bytes, fds: Sequence[int] = ()) -> None:
        """One of the bot's words to the zygote (benches/worker.py `control_words`), sent whole
        (with `fds` handed over where given); the socket is left non-blocking, as it is read."""
        try:
            self.control.setblocking(True)
            if fds:
                socket.send_fds(self.control, [word], list(fds))
            else:
                self.control.sendall(word)
        finally:
            self.control.setblocking(False)

    def close(self, wait_s: float = 10.0) -> None:
        try:
            self.control.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()


class ForkSource:
    """Workers forked from one fenced zygote that has imported the preload modules once.

    `renew` starts a new lineage: later workers come from another zygote, one that has forked no
    trial before. Every worker forked from one zygote inherits its heap and its history, so a build
    can read slower in all its trials of one run and normally in the next: on the 2-core CI machine
    a neutral demo build read 21% slow over its 25 trials of one run, and normally through a new
    zygote (studies/results/cpu-slow-builds.txt). A step is therefore verified in a new lineage
    (bisector/search: `independent`). The replaced zygote forks no more and ends with its last child;
    on a GPU host (`prestart`) the next one is started with the first and at each renewal, so that
    no renewal waits for imports (the H200 demo's verification round waited 8.3 s for its zygote)."""

    kind = "fork"

    def __init__(
        self,
        env: Mapping[str, str],
        preload: Sequence[str],
        cwd: Path,
        writable: Sequence[Path] = (),
        gpu: bool = False,
        limits: cgroups.Limits | None = None,
        prestart: bool | None = None,
    ) -> None:
        self.log_path = Path(cwd) / f"zygote-{os.getpid()}.log"
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - the zygote's log, closed with it
        self.limits, self.forks, self.restarts, self.lineage = limits, 0, 0, 0
        self._spawn = (env, preload, cwd, writable, gpu)
        # a GPU host has cores to spare for the next zygote; two CPU cores time trials
        self._prestart = gpu if prestart is None else prestart
        self.learned: list[str] = []  # the environment's modules the trials import, asked of every zygote (`learn`)
        self.refused: dict[str, str] = {}  # names a zygote would not import, and why: never asked again
        self.preloaded: list[dict[str, Any]] = []  # the zygotes' answers (benches/env_preload.py zygote_load)
        self.zygote = self._launch()
        self._next: _Zygote | None = self._launch() if self._prestart else None  # the next renewal's
        self._retired: list[_Zygote] = []  # replaced, still the parent of live workers
        self._ahead: list[Worker] = []  # forked from `_next` ahead of its renewal (`start_next`)

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.zygote.proc

    @property
    def group(self) -> cgroups.Group | None:
        return self.zygote.group

    def _launch(self) -> _Zygote:
        env, preload, cwd, writable, gpu = self._spawn
        ours, theirs = socket.socketpair()
        try:
            argv, group = fenced_in(
                sandbox.wrap(worker_command(preload, theirs.fileno(), zygote=True), writable, gpu=gpu),
                [theirs.fileno()],
                self.limits,
            )
            proc = subprocess.Popen(
                argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                pass_fds=[theirs.fileno()],
            )
        finally:
            theirs.close()
        z = _Zygote(proc, ours, group)
        if self.learned:  # a zygote started after the trials named their imports
            self._tell(z, self.learned)
        return z

    def learn(self, names: Sequence[str]) -> None:
        """The environment's modules a trial imported (its `env_imports`), for every zygote to import
        once, checked (benches/env_preload.py): later forks start with them. Only names not asked
        before, up to MAX_LEARNED in all: each trial of a library names the same few."""
        if "*" in self.refused:
            return
        new = [n for n in dict.fromkeys(names) if n not in self.learned and n not in self.refused]
        new = new[: max(0, MAX_LEARNED - len(self.learned))]
        if not new:
            return
        self.learned += new
        for z in [self.zygote, *([self._next] if self._next is not None else [])]:
            self._tell(z, new)

    def _tell(self, z: _Zygote, names: Sequence[str]) -> None:
        try:
            z.say(PRELOAD + json.dumps(list(names)).encode() + b"\n")
        except OSError:
            pass  # it is gone: a new one is told at its launch

    def _answered(self, z: _Zygote, msg: Mapping[str, Any]) -> None:
        """A zygote's answer to `learn`: names it refused are never asked again; after one whose
        imports left it unfit to fork from (a thread, the driver), nothing more is asked."""
        rejected = msg["rejected"] if isinstance(msg.get("rejected"), dict) else {}
        for name, why in rejected.items():
            if name in self.learned:
                self.learned.remove(name)
            self.refused[str(name)] = str(why)[:200]
        loaded = [str(n) for n in msg.get("loaded", ()) if isinstance(n, str)]
        self.preloaded.append({"pid": z.proc.pid, "loaded": loaded, "rejected": dict(self.refused), "s": msg.get("s")})
        if z is self.zygote and (loaded or rejected):
            refused = "; ".join(f"{k}: {v}" for k, v in list(rejected.items())[:3])
            print(
                f"bisector: trial processes now start with {len(loaded)} more modules their library imports "
                f"from the environment ({', '.join(loaded[:6])}{', ...' if len(loaded) > 6 else ''}; "
                f"{msg.get('s')} s once, in the zygote)"
                + (f"; refused {len(rejected)}: {refused}" if rejected else ""),
                file=sys.stderr,
                flush=True,
            )
        if msg.get("tainted"):  # its probe child was clean, the zygote not: ask nothing more of any
            self.learned, self.refused["*"] = [], "a zygote's imports started a thread or loaded the GPU driver"
            print(f"bisector: warning: {self.refused['*']} after its probe did not", file=sys.stderr, flush=True)

    def renew(self, to: int = 0) -> int:
        """A new lineage (numbered `to` at least: lineages no job asked for cost no zygote): workers
        started from now on come from a zygote that has forked nothing yet. The replaced one is told
        to fork no more and to end once its last worker has."""
        old = self.zygote
        fresh, self._next = self._next, None
        self.zygote = fresh if fresh is not None and fresh.proc.poll() is None else self._launch()
        if fresh is not None and fresh is not self.zygote:
            fresh.close(0.0)
        if self._prestart:
            self._next = self._launch()
        self.lineage = max(self.lineage + 1, to)
        ahead, self._ahead = self._ahead, []
        if self.zygote is fresh:  # forked ahead from the zygote now current: they join its lineage
            for worker in ahead:
                worker.lineage = self.lineage
        try:
            old.say(RETIRE)
            self._retired.append(old)
        except OSError:  # it is gone already
            old.close(0.0)
        return self.lineage

    def _relaunch(self, why: str) -> None:
        """The zygote is gone (it died at start or later: seen as a broken pipe on its next fork,
        twice on a fresh H200 host): a new one, up to ZYGOTE_RESTARTS times; then an error that
        quotes its log. Workers it had forked keep running; those it never answered for are lost
        and started again by the executor (`_starting` times out)."""
        code = self.proc.poll()
        tail = _tail(self.log_path)
        if self.restarts >= ZYGOTE_RESTARTS:
            raise WorkerStartError(
                f"the worker zygote died {self.restarts + 1} times ({why}; exit code {code}); "
                f"its log {self.log_path}: {tail}"
            )
        self.restarts += 1
        print(
            f"bisector: the worker zygote (pid {self.proc.pid}) is gone ({why}; exit code {code}), starting "
            f"another ({self.restarts} of {ZYGOTE_RESTARTS}); its log: {tail}",
            file=sys.stderr,
            flush=True,
        )
        try:
            self.zygote.control.close()
        except OSError:
            pass
        if code is None:
            self.proc.kill()
            self.proc.wait()
        if self.learned:  # it may have died of what it was asked to import: its successor is not asked
            self.learned, self.refused["*"] = [], "a zygote died after it was asked to import the trials' modules"
        self.zygote = self._launch()

    def start(self) -> Worker:
        if self.proc.poll() is not None:
            self._relaunch("it exited")
        ours, theirs = socket.socketpair()
        try:
            try:
                self._ask(theirs)
            except OSError as exc:  # the zygote died since: a new one, asked again
                self._relaunch(exc.strerror or type(exc).__name__)
                self._ask(theirs)
        finally:
            theirs.close()
        return self._named(self.zygote, ours, self.lineage)

    def start_next(self) -> Worker | None:
        """A worker forked ahead from the zygote the next `renew` makes current (where one is
        prestarted: GPU hosts). It waits idle with its device opened, in lineage AHEAD_OF_RENEWAL
        until that renewal, so that a new lineage's first trials wait for no fork and no device
        context: the 389-commit range's verification round, 10 trials in fresh forks, waited
        3.8 s for its first (2.9 s of it opening the H200) while setup took 0.9 s. None while no
        next zygote is up; a worker whose zygote dies before its renewal is never promoted."""
        z = self._next
        if z is None or z.proc.poll() is not None:
            return None
        ours, theirs = socket.socketpair()
        try:
            self._ask(theirs, z)
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        worker = self._named(z, ours, AHEAD_OF_RENEWAL)
        self._ahead.append(worker)
        return worker

    def _named(self, z: _Zygote, ours: socket.socket, lineage: int) -> Worker:
        """The worker `z` was just asked to fork, waiting for its pid (`on_readable`)."""
        worker = Worker(
            ours,
            time.time(),
            root=z.proc.pid,
            lineage=lineage,
            adopt=(lambda pid: self._adopt(z, pid)) if z.group is not None and self.limits is not None else None,
        )
        z.waiting.append(worker)
        return worker

    def _ask(self, theirs: socket.socket, z: _Zygote | None = None) -> None:
        """Ask a zygote (the current one by default) for one fork, handing it the new worker's end
        of a socket pair."""
        (z or self.zygote).say(FORK, [theirs.fileno()])

    def _adopt(self, z: _Zygote, pid: int) -> cgroups.Leaf | None:
        """A cgroup of its own for the worker forked as `pid` (one of the zygote's, never another process)."""
        assert z.group is not None and self.limits is not None
        if pid == z.proc.pid or pid not in tree(z.proc.pid):
            return None
        self.forks += 1
        try:
            leaf = z.group.leaf(f"w{self.forks}", self.limits)
        except OSError:
            return None  # it stays in the zygote's cgroup, under the same limits shared
        try:
            leaf.adopt(pid)
        except OSError:
            leaf.end()
            return None
        return leaf

    def _all(self) -> list[_Zygote]:
        return [self.zygote, *([self._next] if self._next is not None else []), *self._retired]

    def sockets(self) -> list[socket.socket]:
        return [z.control for z in self._all()]

    def on_readable(self, sock: socket.socket, workers: Sequence[Worker]) -> None:
        z = next((z for z in self._all() if z.control is sock), None)
        if z is None:
            return
        for msg in z.lines.read():
            if msg.get("msg") == "forked" and z.waiting:
                z.waiting.pop(0).found(int(msg["pid"]))
            elif msg.get("msg") == "exited":
                for worker in workers:
                    if worker.inner == msg["pid"] and worker.root == z.proc.pid:
                        worker.exit_code = int(msg["code"])
            elif msg.get("msg") == "preloaded":
                self._answered(z, msg)
        if z.lines.closed and z in self._retired:  # its last worker ended, and so did it
            self._retired.remove(z)
            z.close(1.0)

    def close(self) -> None:
        for z in self._all():
            z.close()
        self.log.close()


SOURCES = ("spawn", "fork")
ZYGOTE_RESTARTS = 2  # a zygote that dies again after this many new ones is an error, with its log
MAX_LEARNED = 256  # the environment's modules a ForkSource asks its zygotes to import, in all


class WorkerStartError(BisectorError):
    """Trial processes cannot be started here; the message quotes why."""


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text)[-800:] or "(empty)"


def make_source(
    kind: str,
    env: Mapping[str, str],
    preload: Sequence[str],
    cwd: Path,
    writable: Sequence[Path] = (),
    gpu: bool = False,
    limits: cgroups.Limits | None = None,
) -> WorkerSource:
    """`writable`: the dirs the sandbox lets these workers write (the run's trial, JIT and scratch
    dirs); `gpu`: the workers run a GPU's trials (no sandbox there, bisector/isolation/sandbox.py);
    `limits`: each trial's cgroup limits, where the host allows them (bisector/isolation/cgroups.py)."""
    cwd.mkdir(parents=True, exist_ok=True)
    if kind == "fork":
        return ForkSource(env, preload, cwd, writable, gpu, limits)
    return SpawnSource(env, preload, cwd, writable, gpu, limits)

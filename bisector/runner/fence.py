"""The fence around every process that runs upstream code: it dies with the bot, and takes its tree.

    python -I fence.py --bot PID [--pass-fds 3,4] -- COMMAND ARG...

Run by path (stdlib only, nothing of bisector is imported), it starts COMMAND in a session of
its own and waits. When the bot dies (even by SIGKILL: the kernel sends this process SIGTERM
through PR_SET_PDEATHSIG), or when the bot stops it (SIGTERM, SIGINT, SIGHUP), it kills every
process of that session, grandchildren and forked compile workers included, then exits. When
COMMAND exits, the rest of its session goes too, so nothing it started outlives it. The fence is
a child subreaper (PR_SET_CHILD_SUBREAPER): a process that left the session (`setsid`) or whose
parent exited (a double fork) is re-parented to the fence instead of to the host's init, so it is
still among the fence's descendants, and those are all killed as well. The exit status is
COMMAND's (128 + N when a signal N ended it).

Why a process and not a flag: PR_SET_PDEATHSIG reaches one process only (a build script's
compiler would survive its bash), and a hung trial must not hold the GPU after its bot is gone.
Memory is watched by the bot (bisector/runner/memwatch.py), which sees every tree at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def session_pids(sid: int) -> list[int]:
    """Every process whose session is `sid` (field 6 of /proc/PID/stat)."""
    out = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            out.append(int(name))
    return out


def kill_session(sid: int) -> None:
    """SIGKILL the session's process group, then any of its processes in other groups."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(20):
        if not kill_all([p for p in session_pids(sid) if p != os.getpid()]):
            return
        time.sleep(0.05)


def kill_all(pids: list[int]) -> bool:
    """SIGKILL each of `pids` (gone ones are skipped); False when there were none."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return bool(pids)


def descendants(pid: int | str = "self") -> list[int]:
    """Every live process below `pid`, from /proc/PID/task/*/children (Linux 3.5+)."""
    out: list[int] = []
    todo = [str(pid)]
    while todo:
        here = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{here}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{here}/task/{tid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            out += kids
            todo += [str(k) for k in kids]
    return out


def kill_descendants() -> None:
    """SIGKILL every descendant of this process and reap those that become its children, until
    none is left (a subreaper sees each orphan again as its own child)."""
    for _ in range(400):
        if not kill_all(descendants()):
            return
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.005)


def _die_with(bot: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
        except (OSError, AttributeError):
            pass
    if bot and os.getppid() != bot:  # the bot died before we could ask to follow it
        sys.exit(137)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: fence.py --bot PID [--pass-fds A,B] -- COMMAND ARG...", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1:]
    bot = int(opts[opts.index("--bot") + 1]) if "--bot" in opts else 0
    fds = [int(x) for x in opts[opts.index("--pass-fds") + 1].split(",") if x] if "--pass-fds" in opts else []
    _die_with(bot)
    child = subprocess.Popen(command, start_new_session=True, pass_fds=fds)
    for fd in fds:
        os.close(fd)

    def stop(signum: int, frame: object) -> None:
        # Not child.wait(): this may run inside it, and Popen's wait lock is not re-entrant.
        kill_session(child.pid)
        kill_descendants()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    code = child.wait()  # a signal still reaches `stop` while this waits (PEP 475)
    kill_session(child.pid)
    kill_descendants()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

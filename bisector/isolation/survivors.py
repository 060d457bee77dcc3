"""Nothing code under test started may still run when the bot writes what it trusts (a publish plan).

Each fenced command's processes are killed when it ends (bisector/isolation/fence.py, the sandbox's
PID namespace, its cgroup). What can still outlive it: a process whose fence was itself killed
(where there is no sandbox, a trial may SIGKILL its own fence), re-parented to the nearest subreaper
above. So the bot makes itself that subreaper (`adopt_orphans`, before the first fenced command),
and before a plan is written `end_leftovers` kills every process below the bot that is not in the
bot's own session (the fence starts each command in a session of its own, a process can only leave
a session for a new one, never join the bot's, and the bot's own children (git, fences, dask) stay
in its session) and every process still in a cgroup the bot made, whose dirs it then removes. What
it killed is returned, to be said in the plan.

Not covered: a process code under test had another service start (a systemd --user unit over
D-Bus, cron, a container runtime): it never was below the bot.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

from bisector.isolation import cgroups
from bisector.isolation.fence import cgroup_pids, descendants, remove_cgroup

PR_SET_CHILD_SUBREAPER = 36
_adopting = False


def adopt_orphans() -> bool:
    """Make this process the subreaper of everything below it (once); False where Linux does not allow it."""
    global _adopting
    if _adopting or not sys.platform.startswith("linux"):
        return _adopting
    try:
        _adopting = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _adopting = False
    return _adopting


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().decode(errors="replace").rsplit(")", 1)[-1].split()
        return int(fields[3]) if fields[0] != "Z" else None
    except (OSError, IndexError, ValueError):
        return None


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()[:15]
    except OSError:
        return "?"


def leftovers() -> list[int]:
    """Live processes below this one outside its session, and any in the cgroups it made: code under
    test that outlived its command (called when no command should run any more)."""
    mine = os.getsid(0)
    below = [pid for pid in descendants(os.getpid()) if (sid := _session(pid)) is not None and sid != mine]
    grouped = [
        pid
        for group in cgroups.own_groups()
        for pid in cgroup_pids(group)
        if pid != os.getpid() and _session(pid) is not None
    ]
    return list(dict.fromkeys(below + grouped))


def end_leftovers(within_s: float = 5.0) -> tuple[str, ...]:
    """Kill every leftover (and reap those that became this process's children); "NAME (pid N)" for
    each one killed."""
    killed: dict[int, str] = {}
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = leftovers()
        if not found:
            break
        for pid in found:
            killed.setdefault(pid, f"{_name(pid)} (pid {pid})")
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    for pid in killed:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    for group in cgroups.own_groups():  # left by fences killed under their commands: empty now
        remove_cgroup(group)
    return tuple(killed.values())


__all__ = ["adopt_orphans", "end_leftovers", "leftovers"]

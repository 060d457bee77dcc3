"""The fence around every process that runs upstream code: it dies with the bot, and takes its tree.

    python -I fence.py --bot PID [--pass-fds 3,4] [--cgroup DIR]... -- COMMAND ARG...

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
Memory is watched by the bot (bisector/isolation/memwatch.py), which sees every tree at once.

With `--cgroup DIR` (one per cgroup hierarchy, made by bisector/isolation/cgroups.py) COMMAND starts
in DIR/main, where the kernel holds it to its memory and task limits; this process stays outside.
When COMMAND ends (or the fence is stopped) everything left in DIR is killed, how many processes the
kernel's memory limit killed is said on stderr, and DIR is removed.
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
LEAF = "main"  # the leaf cgroup of the fenced command, under each --cgroup dir
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # what stops the fence (the bot's death: SIGTERM)
OOM_LINE = "fence: the kernel killed {n} process(es) of this command over its cgroup memory limit"


def session_pids(sid: int) -> list[int]:
    """Every live process whose session is `sid` (field 6 of /proc/PID/stat). A zombie is left out:
    it runs nothing, and it stays listed until this process (its subreaper) reaps it, which
    `kill_descendants` does next; counted, it kept `kill_session` polling for its whole second on
    every zygote's exit (the bot's own exit waited on it)."""
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
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
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


def cgroup_dirs(group: str) -> list[str]:
    """`group` and every cgroup below it, deepest first (the order they can be removed in)."""
    found = []
    for here, dirs, _ in os.walk(group):
        found += [os.path.join(here, d) for d in dirs]
    return [*sorted(found, key=lambda d: -d.count(os.sep)), group]


def cgroup_pids(group: str) -> list[int]:
    """Every process in `group` or below it, as this process's PID namespace numbers them."""
    pids: list[int] = []
    for path in cgroup_dirs(group):
        try:
            with open(os.path.join(path, "cgroup.procs")) as fh:
                pids += [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            continue
    return pids


def join_cgroups(leaves: list[str]) -> None:
    """Move the calling process into each leaf (a Popen preexec_fn: before COMMAND runs anything)."""
    for leaf in leaves:
        with open(os.path.join(leaf, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))


def oom_kills(group: str) -> int:
    """Processes the kernel killed for the memory limit anywhere in `group` (v2 memory.events,
    v1 memory.oom_control)."""
    total = 0
    for path in cgroup_dirs(group):
        for name in ("memory.events", "memory.oom_control"):
            try:
                with open(os.path.join(path, name)) as fh:
                    total += sum(int(line.split()[1]) for line in fh if line.startswith("oom_kill "))
            except (OSError, ValueError, IndexError):
                continue
    return total


def kill_cgroup(group: str) -> None:
    """SIGKILL every process in `group` (cgroup.kill where the kernel has it) until it is empty."""
    try:
        with open(os.path.join(group, "cgroup.kill"), "w") as fh:
            fh.write("1")
    except OSError:
        pass
    for _ in range(400):
        if not kill_all([p for p in cgroup_pids(group) if p != os.getpid()]):
            return
        time.sleep(0.005)


def remove_cgroup(group: str) -> bool:
    """Remove `group` and the cgroups below it (a cgroup goes once its last process has exited)."""
    for _ in range(200):
        for path in cgroup_dirs(group):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                break
        if not os.path.isdir(group):
            return True
        time.sleep(0.01)
    return False


def end_cgroups(groups: list[str]) -> None:
    """Kill what is left in the command's cgroups, say what the kernel's memory limit killed, remove them."""
    kills = 0
    for group in groups:
        kills += oom_kills(group)
        kill_cgroup(group)
        remove_cgroup(group)
    if kills:
        print(OOM_LINE.format(n=kills), file=sys.stderr, flush=True)


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
        print("usage: fence.py --bot PID [--pass-fds A,B] [--cgroup DIR]... -- COMMAND ARG...", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1 :]
    bot = int(opts[opts.index("--bot") + 1]) if "--bot" in opts else 0
    fds = [int(x) for x in opts[opts.index("--pass-fds") + 1].split(",") if x] if "--pass-fds" in opts else []
    groups = [opts[i + 1] for i, o in enumerate(opts) if o == "--cgroup"]
    _die_with(bot)
    leaves = [os.path.join(g, LEAF) for g in groups]
    # A stop that comes while COMMAND starts waits until `stop` can take its session: by default
    # it ended this process alone, and COMMAND lived on (a build step, when the bot was killed
    # just as it started on a busy machine; tests/test_fence.py).
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)

    def prepare() -> None:  # in COMMAND, before it runs: the signals as they were, its cgroups
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        join_cgroups(leaves)

    try:
        child = subprocess.Popen(command, start_new_session=True, pass_fds=fds, preexec_fn=prepare)
    except (OSError, subprocess.SubprocessError) as exc:  # never run it outside its limits
        print(f"fence: cannot start {command[0]}" + (" in its cgroup" if groups else "") + f": {exc}", file=sys.stderr)
        end_cgroups(groups)
        return 126
    for fd in fds:
        os.close(fd)

    def stop(signum: int, frame: object) -> None:
        # Not child.wait(): this may run inside it, and Popen's wait lock is not re-entrant.
        kill_session(child.pid)
        kill_descendants()
        end_cgroups(groups)
        os._exit(128 + signum)

    for sig in STOPS:
        signal.signal(sig, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # one that came meanwhile is handled now
    code = child.wait()  # a signal still reaches `stop` while this waits (PEP 475)
    kill_session(child.pid)
    kill_descendants()
    end_cgroups(groups)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

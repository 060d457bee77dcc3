"""Kernel limits on the memory (tmpfs included) and the tasks of each process tree that runs upstream code.

The bot's memory watch (memwatch.py) reads resident memory from /proc: pages a trial writes to
/dev/shm are not in it, a burst between two polls goes unseen, and nothing bounds how many
processes a build step or trial forks. Where the host lets the bot use cgroups, every fenced
command (a trial's worker, a build step, an import check) runs in a cgroup of its own:

- the kernel's hard limits: memory (anonymous, tmpfs and page cache; swap off) at the configured
  limit plus a margin (`hard_memory`), so that the watch, which now also reads the cgroup's
  anonymous + tmpfs memory, names the breach first, and the kernel stops what is faster than its
  poll; and a task (processes and threads) limit;
- nothing can leave it: the sandboxed see cgroupfs read-only and hold no capability.

Probed once per bot process, the first that works is used (`probe()`; the report's isolation line
names it, or why there is none):

1. "cgroup v2": a delegated cgroup v2 dir whose children get the memory and pids controllers:
   $BISECTOR_CGROUP, else the bot's own cgroup (its processes moved to a leaf when the bot is
   alone there, as under `systemd-run --user --scope -p Delegate=yes bisector ...`).
2. "cgroup v1": the memory and pids hierarchies of a v1 or hybrid host, below the bot's own cgroups
   (root, or a delegated dir).
3. "systemd-run": `systemd-run [--user] --scope -p MemoryMax -p TasksMax` around each command.
4. none: the memory watch alone (the reason is said).

With cgroupfs (1, 2) each fenced command gets `<base>/bisector-<bot pid>-<n>/` (one per hierarchy);
the fence starts the command in its `main` leaf and removes the dir when it ends, everything in it
killed (bisector/isolation/fence.py). A zygote's forked workers each get a leaf `w<n>` beside it,
which the bot moves the worker into before it is given a trial. BISECTOR_CGROUP=off turns
cgroups off (a debugging aid; the isolation line says so).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from bisector.isolation.fence import LEAF, kill_cgroup, remove_cgroup

SWITCH_ENV = "BISECTOR_CGROUP"  # a delegated cgroup v2 dir, or "off"
GROUP_PREFIX = "bisector-"
MARGIN_MIN = 1 << 30  # bytes the kernel's limit allows over the watched one, at least
DEFAULT_TASKS = 8192  # processes and threads of one command (a build's compilers, torch's threads)
_PROBE_MEMORY, _PROBE_TASKS = 64 << 20, 64
_count = itertools.count(1)


@dataclass(frozen=True)
class Limits:
    """What one command may hold: the watched memory limit in bytes (0: none) and its tasks (0: none)."""

    memory_bytes: int = 0
    tasks: int = DEFAULT_TASKS


def hard_memory(watched: int) -> int:
    """The kernel's limit for a command whose watched limit is `watched` bytes: a margin above it,
    so the watch (which names the breach) acts first on what it can see."""
    return watched + max(watched // 4, MARGIN_MIN) if watched > 0 else 0


@dataclass(frozen=True)
class Hierarchy:
    """One cgroupfs dir under which the bot may make cgroups: its version, and the files it writes."""

    base: str
    version: int  # 2, or 1 for a v1 controller's own hierarchy
    controller: str = ""  # v1: "memory" or "pids"

    def limit_files(self, limits: Limits) -> list[tuple[str, str]]:
        hard, files = hard_memory(limits.memory_bytes), []
        if self.version == 2:
            if hard:
                files += [("memory.max", str(hard)), ("memory.swap.max", "0"), ("memory.oom.group", "1")]
            if limits.tasks:
                files.append(("pids.max", str(limits.tasks)))
        elif self.controller == "memory" and hard:
            files += [("memory.limit_in_bytes", str(hard)), ("memory.memsw.limit_in_bytes", str(hard))]
        elif self.controller == "pids" and limits.tasks:
            files.append(("pids.max", str(limits.tasks)))
        return files


@dataclass(frozen=True)
class CgroupHost:
    """How this host lets the bot limit a command: `method` ("cgroup v2", "cgroup v1", "systemd-run",
    "none"), why not when none, and where (cgroupfs dirs, or the systemd-run command)."""

    method: str
    reason: str = ""
    hierarchies: tuple[Hierarchy, ...] = ()
    systemd: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.method != "none"

    def describe(self) -> str:
        if not self.active:
            return f"memory watched from the bot only (no cgroup limits: {self.reason})"
        how = {"systemd-run": "a systemd-run scope each (forked trial workers share their zygote's)"}.get(
            self.method, f"a cgroup each ({self.method}, cgroupfs)"
        )
        return (
            f"memory (tmpfs included, no swap) and tasks limited by the kernel per trial and build step, "
            f"{how}; memory also watched from the bot"
        )


# -- finding what the host offers --------------------------------------------------------------


@lru_cache(maxsize=1)
def _mounts() -> tuple[tuple[str, str, str, frozenset[str]], ...]:
    """(mount point, root inside the hierarchy, fstype, super options) of every cgroup mount."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) > 4 and tail and tail[0] in ("cgroup", "cgroup2"):
                    opts = frozenset(tail[2].split(",")) if len(tail) > 2 else frozenset()
                    out.append((fields[4].replace("\\040", " "), fields[3], tail[0], opts))
    except OSError:
        pass
    return tuple(out)


def _own_paths(pid: int | str = "self") -> dict[str, str]:
    """A process's cgroup per hierarchy: "" for v2, each v1 controller name for v1."""
    out: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    for name in parts[1].split(",") if parts[1] else [""]:
                        out[name] = parts[2]
    except OSError:
        pass
    return out


def _under(mount: str, root: str, path: str) -> str | None:
    """The dir of cgroup `path` (as /proc/self/cgroup names it) under a mount of hierarchy root `root`."""
    root = root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None
    return os.path.join(mount, path[len(root) :].lstrip("/"))


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _try_limits(hierarchies: Sequence[Hierarchy]) -> str:
    """Make a cgroup under each hierarchy, set small limits, remove it: "" when all of that worked."""
    limits = Limits(_PROBE_MEMORY, _PROBE_TASKS)
    made: list[str] = []
    try:
        for h in hierarchies:
            group = os.path.join(h.base, f"{GROUP_PREFIX}probe-{os.getpid()}")
            os.mkdir(group)
            made.append(group)
            _set_limits(group, h, limits)
        return ""
    except OSError as exc:
        where = f" ({os.path.basename(str(exc.filename))})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    finally:
        for group in reversed(made):
            try:
                os.rmdir(group)
            except OSError:
                pass


def _v2_base() -> tuple[Hierarchy | None, str]:
    mounts = [m for m in _mounts() if m[2] == "cgroup2"]
    if not mounts:
        return None, "no cgroup v2 mount"
    chosen = os.environ.get(SWITCH_ENV, "")
    if chosen:
        base = os.path.abspath(chosen)
        if not any(base == m[0] or base.startswith(m[0].rstrip("/") + "/") for m in mounts):
            return None, f"{SWITCH_ENV} is not a dir of a cgroup v2 mount"
    else:
        own = _own_paths().get("")
        dirs = [d for m in mounts if own is not None and (d := _under(m[0], m[1], own)) and os.path.isdir(d)]
        if not dirs:
            return None, "the bot's own cgroup v2 dir was not found"
        base = dirs[0]
    have = set(_read(os.path.join(base, "cgroup.controllers")).split())
    if not {"memory", "pids"} <= have:
        return None, f"cgroup v2 offers {' '.join(sorted(have)) or 'no controllers'} here, not memory and pids"
    problem = _delegate(base, own_cgroup=not chosen)
    return (None, problem) if problem else (Hierarchy(base, 2), "")


def _delegate(base: str, own_cgroup: bool) -> str:
    """Give memory and pids to `base`'s children; when `base` is the bot's own cgroup and holds the
    bot alone, the bot moves into a leaf first (a cgroup with processes cannot give controllers)."""
    control = os.path.join(base, "cgroup.subtree_control")
    if {"memory", "pids"} <= set(_read(control).split()):
        return ""
    try:
        _write(control, "+memory +pids")
        return ""
    except OSError as exc:
        if not own_cgroup or _read(os.path.join(base, "cgroup.procs")).split() != [str(os.getpid())]:
            return (
                f"cgroup v2: the bot's cgroup cannot give memory and pids to children ({exc.strerror}); "
                f"start the bot in a delegated one (systemd-run --user --scope -p Delegate=yes) "
                f"or name one in {SWITCH_ENV}"
            )
    try:
        leaf = os.path.join(base, f"{GROUP_PREFIX}bot")
        os.makedirs(leaf, exist_ok=True)
        _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))
        _write(control, "+memory +pids")
        return ""
    except OSError as exc:
        return f"cgroup v2: cannot move the bot to a leaf of its own cgroup ({exc.strerror})"


def _v1_bases() -> tuple[tuple[Hierarchy, ...], str]:
    own = _own_paths()
    found = []
    for controller in ("memory", "pids"):
        dirs = [
            d
            for m in _mounts()
            if m[2] == "cgroup"
            and controller in m[3]
            and controller in own
            and (d := _under(m[0], m[1], own[controller]))
            and os.path.isdir(d)
        ]
        if not dirs:
            return (), f"no cgroup v1 {controller} hierarchy holding the bot"
        found.append(Hierarchy(dirs[0], 1, controller))
    return tuple(found), ""


SYSTEMD_CHECK = (
    "import os\n"
    "p = [l.split(':', 2)[2].strip() for l in open('/proc/self/cgroup') if l.startswith('0::')]\n"
    "d = '/sys/fs/cgroup' + (p[0] if p else '/nowhere')\n"
    "print(*(open(os.path.join(d, n)).read().strip() for n in ('memory.max', 'pids.max')))\n"
)


def _systemd() -> tuple[tuple[str, ...], str]:
    exe = shutil.which("systemd-run")
    if exe is None:
        return (), "no systemd-run"
    prefix = (exe, *(["--user"] if os.getuid() != 0 else []), "--scope", "--quiet", "--collect")
    argv = [
        *prefix,
        "-p",
        f"MemoryMax={_PROBE_MEMORY}",
        "-p",
        f"TasksMax={_PROBE_TASKS}",
        "--",
        sys.executable,
        "-I",
        "-c",
        SYSTEMD_CHECK,
    ]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"systemd-run failed: {exc}"
    if out.returncode != 0 or out.stdout.split() != [str(_PROBE_MEMORY), str(_PROBE_TASKS)]:
        said = (out.stderr.strip().splitlines() or [out.stdout.strip() or f"exit {out.returncode}"])[-1]
        return (), f"systemd-run scopes do not take the limits here: {said[:160]}"
    return prefix, ""


@lru_cache(maxsize=1)
def probe() -> CgroupHost:
    """What this host allows, tried once per bot process (see the module's docstring)."""
    if os.environ.get(SWITCH_ENV, "").lower() in ("0", "off", "no", "false"):
        return CgroupHost("none", f"{SWITCH_ENV}=off")
    if not sys.platform.startswith("linux"):
        return CgroupHost("none", "not Linux")
    reasons = []
    v2, why = _v2_base()
    if v2 is not None:
        why = _try_limits([v2])
        if not why:
            _clean_stale([v2])
            return CgroupHost("cgroup v2", hierarchies=(v2,))
    reasons.append(why)
    if not os.environ.get(SWITCH_ENV):
        v1, why = _v1_bases()
        if v1:
            why = _try_limits(v1)
            if not why:
                _clean_stale(v1)
                return CgroupHost("cgroup v1", hierarchies=v1)
        reasons.append(f"cgroup v1: {why}")
        prefix, why = _systemd()
        if prefix:
            return CgroupHost("systemd-run", systemd=prefix)
        reasons.append(why)
    return CgroupHost("none", "; ".join(r for r in reasons if r))


def _clean_stale(hierarchies: Sequence[Hierarchy]) -> None:
    """Groups left by bots that died with their fences (killed together): what is in them is killed."""
    for h in hierarchies:
        try:
            names = os.listdir(h.base)
        except OSError:
            continue
        for name in names:
            parts = name[len(GROUP_PREFIX) :].split("-")
            if not name.startswith(GROUP_PREFIX) or not parts[0].isdigit() or _alive(int(parts[0])):
                continue
            group = os.path.join(h.base, name)
            kill_cgroup(group)
            remove_cgroup(group)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# -- one command's cgroups ----------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """The cgroups of one fenced command (one dir per hierarchy); the fence removes them."""

    dirs: tuple[str, ...]
    hierarchies: tuple[Hierarchy, ...]

    def fence_args(self) -> list[str]:
        return [arg for d in self.dirs for arg in ("--cgroup", d)]

    def leaf(self, name: str, limits: Limits) -> Leaf:
        """A new leaf with `limits` beside the command's own."""
        paths = []
        for d, h in zip(self.dirs, self.hierarchies):
            path = os.path.join(d, name)
            os.mkdir(path)
            _set_limits(path, h, limits)
            paths.append(path)
        return Leaf(tuple(paths))


@dataclass(frozen=True)
class Leaf:
    """A leaf cgroup (one dir per hierarchy) that the bot moves a process into and removes."""

    dirs: tuple[str, ...]

    def adopt(self, pid: int) -> None:
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def end(self) -> None:
        """Kill what is in it and remove it (what cannot be removed yet goes with its group)."""
        for d in self.dirs:
            kill_cgroup(d)
            remove_cgroup(d)


def _set_limits(path: str, h: Hierarchy, limits: Limits) -> None:
    for name, value in h.limit_files(limits):
        file = os.path.join(path, name)
        if name in ("memory.swap.max", "memory.memsw.limit_in_bytes", "memory.oom.group") and not os.path.exists(file):
            continue  # no swap accounting (or group OOM) here: nothing to turn off
        _write(file, value)


def new_group(limits: Limits) -> Group | None:
    """The cgroups a fenced command starts in (its `main` leaf holding `limits`); None where the host
    gives no cgroupfs. Made here, removed by the fence when the command ends."""
    host = probe()
    if not host.hierarchies:
        return None
    name = f"{GROUP_PREFIX}{os.getpid()}-{next(_count)}"
    dirs: list[str] = []
    try:
        for h in host.hierarchies:
            group = os.path.join(h.base, name)
            os.mkdir(group)
            dirs.append(group)
            if h.version == 2:
                _write(os.path.join(group, "cgroup.subtree_control"), "+memory +pids")
            os.mkdir(os.path.join(group, LEAF))
            _set_limits(os.path.join(group, LEAF), h, limits)
    except OSError:
        for group in dirs:
            remove_cgroup(group)
        raise
    return Group(tuple(dirs), host.hierarchies)


def systemd_prefix(limits: Limits) -> list[str]:
    """The systemd-run words that put a command in a scope with `limits` (empty: not this method)."""
    host = probe()
    if not host.systemd:
        return []
    props = [f"--unit={GROUP_PREFIX}{os.getpid()}-{next(_count)}"]  # its memory.stat is read by name
    if limits.memory_bytes:
        props += ["-p", f"MemoryMax={hard_memory(limits.memory_bytes)}", "-p", "MemorySwapMax=0"]
    if limits.tasks:
        props += ["-p", f"TasksMax={limits.tasks}"]
    return [*host.systemd, *props, "--"]


# -- what the watch reads -----------------------------------------------------------------------


def _memory_cgroup(pid: int) -> str | None:
    """The dir of `pid`'s memory cgroup when it is one the bot made (a command's group, leaf or
    scope), else None."""
    paths = _own_paths(pid)
    key = "memory" if "memory" in paths else ""
    path = paths.get(key)
    if path is None:
        return None
    tail = path.rstrip("/").split("/")[-2:]
    if not any(p.startswith(GROUP_PREFIX) and p != f"{GROUP_PREFIX}bot" for p in tail):
        return None
    for mount, root, fstype, opts in _mounts():
        if (fstype == "cgroup2") if key == "" else (fstype == "cgroup" and key in opts):
            found = _under(mount, root, path)
            if found and os.path.isdir(found):
                return found
    return None


def held_memory(pids: Sequence[int]) -> int:
    """Anonymous and tmpfs bytes of the bot's cgroups that hold `pids` (what resident memory misses:
    a trial's /dev/shm, an escapee's); 0 where there are none."""
    total = 0
    if not probe().active:
        return 0
    for leaf in {leaf for pid in pids if (leaf := _memory_cgroup(pid))}:
        stat = dict(
            line.split()[:2] for line in _read(os.path.join(leaf, "memory.stat")).splitlines() if len(line.split()) >= 2
        )
        keys = ("anon", "shmem") if "anon" in stat else ("total_rss", "total_shmem")
        total += sum(int(stat.get(k, 0)) for k in keys)
    return total


def own_groups() -> list[str]:
    """The cgroup dirs this bot made that are still there (a fence killed under its command leaves its own)."""
    prefix = f"{GROUP_PREFIX}{os.getpid()}-"
    out = []
    for h in probe().hierarchies:
        try:
            out += [os.path.join(h.base, n) for n in sorted(os.listdir(h.base)) if n.startswith(prefix)]
        except OSError:
            continue
    return out


def end_leaf(leaf: Leaf | None) -> None:
    """A forked worker's leaf, when it has one, emptied and removed."""
    if leaf is not None:
        leaf.end()


__all__ = [
    "CgroupHost",
    "Group",
    "Leaf",
    "Limits",
    "end_leaf",
    "hard_memory",
    "held_memory",
    "new_group",
    "own_groups",
    "probe",
    "systemd_prefix",
]

"""The first process inside a sandbox: set up its mount view, drop every capability, exec the command.

    unshare --user --map-root-user --mount --pid --net --fork --kill-child --mount-proc \\
        python -I -S sandbox_init.py [--rw DIR]... [--hide PATH]... [--git-config FILE]... [--shm-mb N] \\
        [--probe] -- COMMAND ARG...

Run by path (stdlib only, nothing of bisector is imported, like fence.py). `unshare` gives it new
user, mount, PID and network namespaces and a /proc that shows only the sandbox's processes (no
ancestor's environ). Here, with the capabilities it holds in its own user namespace:

1. every mount is made read-only (mount_setattr, recursively; older kernels: one remount each), but
   the namespace's own /proc, which CUDA needs writable (its kernel-wide parts stay read-only);
2. each --rw dir is bound onto itself writable (the trial's dirs, its JIT cache, its scratch);
3. each --hide dir is covered by an empty read-only tmpfs (the bot's own package, credential dirs
   such as ~/.config/gh), each --hide file by a read-only /dev/null (~/.git-credentials, ~/.netrc);
4. /dev/shm becomes a private tmpfs of --shm-mb MiB, gone with the sandbox;
5. each --git-config file that holds credentials (a persisted `http.extraheader`, a credential
   helper, a URL with a password) is covered by a read-only copy without them;
6. the loopback interface of the new network namespace comes up: the only one there, so nothing
   of the host (its TCP listeners, its abstract unix sockets, the bot's dask scheduler) is reachable;
7. the bounding set, ambient and permitted capabilities are dropped and no_new_privs set, so the
   command (uid 0 of the namespace, the caller's uid outside) cannot undo any of it; mounts made
   here are locked for any user namespace it creates itself;
8. a seccomp filter refuses ptrace, process_vm_readv/writev and pidfd_getfd (EPERM) and every
   syscall of another ABI (x32, i386), so no process here reads or writes another's memory (the
   zygote's, another trial's) whatever its dumpable flag.

It stays as PID 1 of the namespace (reaping orphans) and runs the command as its child, so the
command's signals behave as anywhere else (PID 1 ignores its own SIGABRT); when the command exits
this process exits with its status and the kernel kills every process left in the namespace
(setsid and double-forked ones too). Device nodes (/dev/nvidia*, /dev/kfd,
/dev/dri) stay usable: a read-only mount does not stop writes to a device node.
`--probe` does all of that, checks it, prints one JSON line and exits instead of exec'ing.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import socket
import struct
import sys
from collections.abc import Sequence

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
CAPABILITY_V3 = 0x20080522
# statvfs f_flag bits -> the mount flags a bind remount must repeat (a locked flag may not be dropped)
_KEEP = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (getattr(os, "ST_NOATIME", 1024), MS_NOATIME),
    (getattr(os, "ST_NODIRATIME", 2048), MS_NODIRATIME),
    (getattr(os, "ST_RELATIME", 4096), MS_RELATIME),
)

libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise SetupError(f"{what}: {os.strerror(ctypes.get_errno())}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:

    def enc(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    _check(
        libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {source or fstype} on {target}",
    )


def set_readonly(path: str, readonly: bool, recursive: bool) -> None:
    """mount_setattr(2) where the kernel has it (5.12+), else a bind remount of each mount."""
    attr = MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    ret = libc.syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))
    )
    if ret == 0:
        return
    if ctypes.get_errno() not in (38, 22):  # ENOSYS, EINVAL (an older kernel's or arch's answer)
        _check(ret, f"mount_setattr {path}")
    points = [p for p in mount_points() if p == path or p.startswith(path.rstrip("/") + "/")] if recursive else [path]
    for point in points:
        try:
            kept = os.statvfs(point).f_flag
        except OSError:
            continue
        flags = MS_REMOUNT | MS_BIND | (MS_RDONLY if readonly else 0)
        flags |= sum(ms for st, ms in _KEEP if kept & st)
        mount(None, point, None, flags)


def mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4].replace("\\040", " ") for line in fh]
    return sorted(set(points), key=len)


def drop_capabilities() -> None:
    """Nothing this process execs can hold a capability: empty bounding set, no ambient ones,
    no permitted ones, no_new_privs (setuid binaries gain nothing)."""
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _check(-1, f"drop capability {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_V3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.syscall(126 if os.uname().machine == "x86_64" else 91, header, data), "capset")


def loopback_up() -> None:
    """Bring up `lo`, the only interface of the sandbox's own network namespace."""
    siocgifflags, siocsifflags, iff_up, iff_running = 0x8913, 0x8914, 0x1, 0x40
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(sock, siocgifflags, req))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh14x", b"lo", flags | iff_up | iff_running))


def network_view() -> dict[str, object]:
    """The interfaces this process sees, and whether loopback is up."""
    names = [name for _, name in socket.if_nameindex()]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sh14x", fcntl.ioctl(sock, 0x8913, struct.pack("16sh14x", b"lo", 0)))[1]
    return {"interfaces": names, "lo_up": bool(flags & 1)}


# seccomp: a classic BPF program over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
CLONE_NEWUSER = 0x10000000
# native audit arch, its syscall numbers, and the flag bit of x86_64's x32 ABI
_ARCH = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "unshare": 272,
            "clone": 56,
            "clone3": 435,
        },
        0x40000000,
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "unshare": 97,
            "clone": 220,
            "clone3": 435,
        },
        0,
    ),
}
NO_MEMORY_ACCESS = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def seccomp_program(refused: tuple[str, ...], new_user_ns: bool = True) -> list[tuple[int, int, int, int]]:
    """The filter: `refused` syscalls fail with EPERM, so does any syscall of a foreign ABI; with
    `new_user_ns` False also unshare/clone asking for CLONE_NEWUSER (EPERM) and clone3 (ENOSYS, so
    that libc falls back to clone): what a host that forbids user namespaces answers."""
    arch, numbers, x32 = _ARCH[os.uname().machine]
    deny = (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM)
    body: list[tuple[int, int, int, int]] = []
    for name in refused:
        body += [(BPF_JEQ_K, 0, 1, numbers[name]), deny]
    if not new_user_ns:
        for name in ("unshare", "clone"):
            body += [
                (BPF_JEQ_K, 0, 4, numbers[name]),
                (BPF_LD_W_ABS, 0, 0, 16),  # args[0], low word
                (BPF_JSET_K, 0, 1, CLONE_NEWUSER),
                deny,
                (BPF_LD_W_ABS, 0, 0, 0),
            ]
        body += [(BPF_JEQ_K, 0, 1, numbers["clone3"]), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)]
    head = [(BPF_LD_W_ABS, 0, 0, 4), (BPF_JEQ_K, 1, 0, arch), deny, (BPF_LD_W_ABS, 0, 0, 0)]
    if x32:
        head += [(BPF_JGE_K, 0, 1, x32), deny]
    return [*head, *body, (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]


def install_seccomp(refused: tuple[str, ...] = NO_MEMORY_ACCESS, new_user_ns: bool = True) -> None:
    """Install `seccomp_program` on this process and all it will start (needs no_new_privs)."""
    prog = seccomp_program(refused, new_user_ns)
    insns = (SockFilter * len(prog))(*(SockFilter(*i) for i in prog))
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(SockFprog(len(prog), insns)), 0, 0), "seccomp")


def hide(path: str) -> None:
    """Cover a dir with an empty read-only tmpfs, a file with a read-only /dev/null."""
    if os.path.isdir(path):
        mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    elif os.path.lexists(path):
        mount("/dev/null", path, None, MS_BIND)
        set_readonly(path, True, recursive=False)


# git config keys that carry a credential, and a password in a URL
_SECRET_KEY = re.compile(r"^\s*(extraheader|helper|password|token|username|usehttppath|cookiefile)\s*(=|$)", re.I)
_URL_PASSWORD = re.compile(r"(\w+://)[^/@\s]+@")


def scrubbed_git_config(text: str) -> str | None:
    """`text` without credentials (None when it holds none): keys of [credential] sections, every
    `extraheader` (a persisted checkout token), credential-like keys, user:password@ in URLs."""
    out, changed, in_credential = [], False, False
    for line in text.splitlines(keepends=True):
        head = re.match(r"^\s*\[\s*([A-Za-z0-9.-]+)", line)
        if head:
            in_credential = head.group(1).lower().startswith("credential")
        if (in_credential and not head) or (not head and _SECRET_KEY.match(line)):
            changed = True
            continue
        clean = _URL_PASSWORD.sub(r"\1", line)
        changed |= clean != line
        out.append(clean)
    return "".join(out) if changed else None


def cover_git_configs(paths: list[str]) -> None:
    """Each git config holding a credential covered by a read-only copy without it. The copy is
    written to the sandbox's private /dev/shm, bound over the original and unlinked there."""
    for n, path in enumerate(paths):
        try:
            with open(path, errors="replace") as fh:
                clean = scrubbed_git_config(fh.read())
        except OSError:
            continue
        if clean is None:
            continue
        if not os.path.isdir("/dev/shm"):
            hide(path)
            continue
        copy = f"/dev/shm/.bisector-git-config-{n}"
        with open(copy, "w") as fh:
            fh.write(clean)
        mount(copy, path, None, MS_BIND)
        set_readonly(path, True, recursive=False)
        os.unlink(copy)


# The kernel-wide parts of /proc, kept read-only when the rest of the namespace's own /proc is made
# writable again (the paths container runtimes keep read-only).
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


def writable_proc() -> None:
    """The sandbox's own /proc (it shows only the sandbox's processes) writable, but for
    PROC_READONLY. CUDA does not initialize with a read-only /proc (cudaGetDeviceCount: error 304 on
    an H200; every other mount read-only it does: studies/results/h200-sandbox-cuda.txt)."""
    set_readonly("/proc", False, recursive=False)
    for path in PROC_READONLY:
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            set_readonly(path, True, recursive=True)


def setup(
    rw: list[str], hide_paths: list[str], shm_mb: int, git_configs: Sequence[str] = (), own_network: bool = True
) -> None:
    set_readonly("/", True, recursive=True)
    writable_proc()
    for path in rw:
        if os.path.isdir(path):
            mount(path, path, None, MS_BIND | MS_REC)
            set_readonly(path, False, recursive=True)
    for path in hide_paths:
        hide(path)
    if shm_mb and os.path.isdir("/dev/shm"):
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={shm_mb}m,mode=1777")
    cover_git_configs(list(git_configs))
    if own_network:
        loopback_up()
    try:  # the cwd was resolved before the binds: walk to it again, onto the writable mount
        os.chdir(os.getcwd())
    except OSError:
        pass
    drop_capabilities()
    install_seccomp()


def probe(rw: list[str], hidden: list[str]) -> dict[str, object]:
    """What the sandbox holds, checked from inside it."""

    def writable(path: str) -> bool:
        try:
            fd = os.open(os.path.join(path, f".probe-{os.getpid()}"), os.O_CREAT | os.O_WRONLY, 0o600)
        except OSError:
            return False
        os.close(fd)
        os.unlink(os.path.join(path, f".probe-{os.getpid()}"))
        return True

    with open("/proc/self/status") as fh:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
    return {
        "pid": os.getpid(),
        "uid": os.getuid(),
        "cap_eff": status.get("CapEff", "").strip(),
        "cap_bnd": status.get("CapBnd", "").strip(),
        "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "rw_ok": all(writable(p) for p in rw),
        "hidden": all(_empty(p) for p in hidden),
        "root_ro": not writable(os.path.dirname(os.path.abspath(__file__))),
        "proc_sys_ro": all(os.statvfs(p).f_flag & os.ST_RDONLY for p in PROC_READONLY if os.path.exists(p)),
        "shm_tmpfs": os.statvfs("/dev/shm").f_blocks > 0 if os.path.isdir("/dev/shm") else False,
        "seccomp": status.get("Seccomp", "").strip(),
        "ptrace_refused": _ptrace_refused(),
        **network_view(),
    }


def _empty(path: str) -> bool:
    if os.path.isdir(path):
        return not os.listdir(path)
    try:
        with open(path, "rb") as fh:
            return not fh.read(1)
    except OSError:
        return True


def _ptrace_refused() -> bool:
    """PTRACE_ATTACH on this process's parent (the namespace's init is this process: its child asks)."""
    pid = os.fork()
    if pid == 0:
        ret = libc.ptrace(16, os.getppid(), None, None)  # PTRACE_ATTACH
        os._exit(0 if ret == -1 and ctypes.get_errno() == EPERM else 1)
    return os.waitpid(pid, 0)[1] == 0


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(
            "usage: sandbox_init.py [--rw DIR]... [--hide PATH]... [--git-config FILE]... [--shm-mb N] [--probe] "
            "-- COMMAND...",
            file=sys.stderr,
        )
        return 2
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1 :]
    rw = [opts[i + 1] for i, o in enumerate(opts) if o == "--rw"]
    hidden = [opts[i + 1] for i, o in enumerate(opts) if o == "--hide"]
    git_configs = [opts[i + 1] for i, o in enumerate(opts) if o == "--git-config"]
    shm_mb = int(opts[opts.index("--shm-mb") + 1]) if "--shm-mb" in opts else 0
    try:
        setup(rw, hidden, shm_mb, git_configs, own_network="--host-network" not in opts)
    except (SetupError, OSError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 125
    if "--probe" in opts:
        print(json.dumps(probe(rw, hidden)))
        return 0
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"sandbox: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    os.closerange(3, 1 << 16)  # the command's sockets are its own: none held open here
    return wait_for(child)


def wait_for(child: int) -> int:
    """Reap every orphan until `child` ends; its status as a shell gives it (128 + N: signal N)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 127
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The sandbox around code under test (trials, build steps, import checks), and what this host allows.

Every command that runs upstream code is started as

    fence -> unshare --user --map-root-user --mount --pid --net --fork --kill-child --mount-proc
          -> sandbox_init.py (mount view, loopback, capabilities dropped, seccomp) -> COMMAND

so that it sees none of its ancestors in /proc (no environ to read), writes only its own dirs,
cannot see the bot's package nor the credential files of $HOME (nor a checkout's persisted token),
reaches no socket of the host (its own network namespace, loopback only; the host's pathname unix
sockets covered, but a GPU runtime's), cannot read or write another process's memory (ptrace and
process_vm_* refused: not the zygote's, not another trial's), has a private bounded /dev/shm, and
leaves nothing behind: when COMMAND exits the kernel kills the rest of its PID namespace. `probe()`
runs that once per bot process and says what held; where it fails (no unshare, user namespaces
forbidden), commands run unsandboxed and `Isolation.describe()` says so (the fence and the
subreapers still kill escapees), unless the run requires the sandbox (`[sandbox] require`, a fork's
code: `enforce`, `required`): then it stops with one line instead.
Memory and task limits are cgroups' (bisector/isolation/cgroups.py), probed apart and named here.

BISECTOR_SANDBOX=off turns the sandbox off (a debugging aid; the isolation line then says so);
BISECTOR_SANDBOX_WRITABLE (dirs separated by os.pathsep) names more dirs it may write (a ccache
dir, a probe's output dir in tests): the operator's choice, never a config's.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bisector.errors import SandboxUnavailable
from bisector.isolation import cgroups

if TYPE_CHECKING:
    from bisector.config import Config

INIT = str(Path(__file__).with_name("sandbox_init.py"))
UNSHARE_FLAGS = ("--user", "--map-root-user", "--mount", "--pid", "--net", "--fork", "--kill-child", "--mount-proc")
# What a user's home keeps credentials in (files or dirs): hidden from code under test, like the bot's package.
HOME_CREDENTIALS = (
    ".git-credentials",
    ".netrc",
    "_netrc",
    ".pypirc",
    ".npmrc",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
)
# Git configs read for credentials (a token in a URL, a helper, an extraheader): covered by a copy without them.
HOME_GIT_CONFIGS = (".gitconfig", ".config/git/config")
SHM_MB = 1024  # a trial's (or build step's) private /dev/shm
SWITCH_ENV = "BISECTOR_SANDBOX"
# Whether the GPU's driver initializes inside a sandbox, asked once per bot process (a few ms: no
# torch). On an H200 host it did not while /proc was read-only (error 304; sandbox_init keeps the
# namespace's own /proc writable since). Where it does not, GPU trials run in the fence only.
GPU_INIT = """import ctypes, sys
for lib, init in (("libcuda.so.1", "cuInit"), ("libamdhip64.so", "hipInit")):
    try:
        fn = getattr(ctypes.CDLL(lib), init)
    except (OSError, AttributeError):
        continue
    print(lib, fn(0)); sys.exit(0)
print("no GPU driver")
"""
WRITABLE_ENV = "BISECTOR_SANDBOX_WRITABLE"


@dataclass(frozen=True)
class Isolation:
    """What a run's code under test was confined by, as probed on this host at start."""

    sandboxed: bool
    reason: str = ""  # why not, when not
    uid: int = 0  # the bot's uid
    cgroup: str = "none"  # "v2", "v1" (or hybrid), "none": what the host offers
    shm_mb: int = SHM_MB
    # How each command's memory and tasks are limited (bisector/isolation/cgroups.py), or why they are not
    limits: str = "memory watched from the bot only (no cgroup limits)"

    def describe(self) -> str:
        limits = self.limits
        if not self.sandboxed:
            return f"no sandbox ({self.reason}); fence and subreapers only, {limits}"
        return (
            f"sandbox: user+mount+PID+network namespaces (uid {self.uid} outside, no capabilities inside, "
            f"loopback only, no ptrace), read-only mounts but the run's trial/JIT/build dirs, bot package "
            f"and home credentials hidden, private /dev/shm {self.shm_mb} MiB; {limits}"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "sandboxed": self.sandboxed,
            "reason": self.reason,
            "uid": self.uid,
            "cgroup": self.cgroup,
            "shm_mb": self.shm_mb,
            "limits": self.limits,
            "summary": self.describe(),
        }


def cgroup_kind() -> str:
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "v2"
    if Path("/sys/fs/cgroup/memory").exists() or Path("/sys/fs/cgroup/unified").exists():
        return "v1"
    return "none"


def command(
    argv: Sequence[str],
    writable: Sequence[str | Path] = (),
    hidden: Sequence[str | Path] = (),
    shm_mb: int = SHM_MB,
    probe: bool = False,
    git_configs: Sequence[str | Path] = (),
    network: bool = False,
) -> list[str]:
    """`argv` run inside a new sandbox, whether or not this host allows one (see `wrap`).
    `network`: share the host's network namespace (a build step that downloads; never a trial)."""
    unshare = shutil.which("unshare") or "unshare"
    opts: list[str] = []
    for path in writable:
        opts += ["--rw", str(Path(path).resolve())]
    for path in hidden:
        opts += ["--hide", str(Path(path).resolve())]
    for path in git_configs:
        opts += ["--git-config", str(Path(path).resolve())]
    flags = [f for f in UNSHARE_FLAGS if not (network and f == "--net")]
    return [
        unshare,
        *flags,
        "--",
        sys.executable,
        "-I",
        "-S",
        INIT,
        *opts,
        "--shm-mb",
        str(shm_mb),
        *(["--probe"] if probe else []),
        *(["--host-network"] if network else []),
        "--",
        *argv,
    ]


def homes() -> list[Path]:
    """The bot's home dirs: $HOME and its user's entry in the password database."""
    found = [os.environ.get("HOME", "")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return list(dict.fromkeys(Path(h) for h in found if h and os.path.isdir(h)))


def credentials() -> list[Path]:
    """The credential files and dirs of the bot's homes that exist (hidden from code under test)."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    found = [home / rel for home in homes() for rel in HOME_CREDENTIALS]
    if xdg:
        found += [Path(xdg) / rel for rel in ("gh", "hub", "git/credentials", "gcloud")]
    return [p for p in dict.fromkeys(found) if os.path.lexists(p)]


# Pathname unix sockets a GPU's runtime may need (MPS, persistence daemon): left reachable.
GPU_SOCKETS = ("nvidia-mps", "nvidia-persistenced", "nvidia-fabricmanager")


def host_unix_sockets() -> list[str]:
    """The pathname unix sockets bound on this host (its network namespace's /proc/net/unix): a
    network namespace does not separate those (docker.sock, a session bus, a journal), so each is
    covered in the sandbox, where it stays a file, no longer a socket anyone listens on."""
    try:
        with open("/proc/net/unix") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return []
    paths = {line.split(None, 7)[7] for line in lines if len(line.split(None, 7)) == 8}
    return sorted(p for p in paths if p.startswith("/") and not any(g in p for g in GPU_SOCKETS) and os.path.exists(p))


_GUARDED_REPOS: set[Path] = set()


def guard_repo(path: str | Path) -> None:
    """Have every later sandbox cover `path`'s git config with a copy without credentials, when it
    holds any (actions/checkout persists the job's token as `http.<url>.extraheader`)."""
    config = repo_config(Path(path))
    if config is not None:
        _GUARDED_REPOS.add(config)


def repo_config(path: Path) -> Path | None:
    """The shared config file of the repository at `path` (a checkout, a worktree or a bare repo)."""
    dotgit = path / ".git"
    if dotgit.is_dir():
        git_dir = dotgit
    elif dotgit.is_file():
        text = dotgit.read_text(errors="replace").strip()
        if not text.startswith("gitdir:"):
            return None
        git_dir = (path / text[len("gitdir:") :].strip()).resolve()
        common = git_dir / "commondir"
        if common.is_file():
            git_dir = (git_dir / common.read_text().strip()).resolve()
    elif (path / "objects").is_dir() and (path / "config").is_file():
        git_dir = path
    else:
        return None
    return git_dir / "config" if (git_dir / "config").is_file() else None


def git_configs() -> list[Path]:
    """The git configs a sandbox scrubs: the user's, the system's, the guarded repositories', and
    those of the checkouts the bot runs from (its cwd, its package)."""
    found = [home / rel for home in homes() for rel in HOME_GIT_CONFIGS] + [Path("/etc/gitconfig")]
    if os.environ.get("XDG_CONFIG_HOME"):
        found.append(Path(os.environ["XDG_CONFIG_HOME"]) / "git" / "config")
    from bisector.isolation.instrument import bot_roots

    try:
        starts = [Path.cwd()]
    except OSError:
        starts = []
    for start in [*starts, *map(Path, bot_roots())]:
        for where in (start, *start.parents):
            config = repo_config(where)
            if config is not None:
                found.append(config)
                break
    return [p for p in dict.fromkeys([*found, *sorted(_GUARDED_REPOS)]) if p.is_file()]


@lru_cache(maxsize=1)
def probe() -> Isolation:
    """Start one sandbox and check from inside what held: its own /proc, no capabilities, a
    writable dir writable, a hidden dir empty, the rest read-only."""
    common: dict[str, Any] = {"uid": os.getuid(), "cgroup": cgroup_kind(), "limits": cgroups.probe().describe()}
    if os.environ.get(SWITCH_ENV, "").lower() in ("0", "off", "no", "false"):
        return Isolation(False, f"{SWITCH_ENV}=off", **common)
    if not sys.platform.startswith("linux"):
        return Isolation(False, "not Linux", **common)
    if shutil.which("unshare") is None:
        return Isolation(False, "no unshare (util-linux) on PATH", **common)
    with tempfile.TemporaryDirectory(prefix="bisector-probe-") as tmp:
        rw, hide = Path(tmp, "rw"), Path(tmp, "hide")
        rw.mkdir()
        hide.mkdir()
        (hide / "secret").write_text("x")
        try:
            out = subprocess.run(
                command(["true"], [rw], [hide], probe=True),
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Isolation(False, f"unshare failed: {exc}", **common)
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return Isolation(False, f"namespaces refused here: {said}", **common)
    try:
        seen = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Isolation(False, f"the probe said nothing readable: {out.stdout[-200:]!r}", **common)
    problems = [
        what
        for what, ok in (
            ("own PID namespace", seen.get("pid") == 1),
            ("no capabilities", int(seen.get("cap_eff") or "1", 16) == 0),
            ("writable dirs", seen.get("rw_ok")),
            ("hidden dirs", seen.get("hidden")),
            ("read-only root", seen.get("root_ro")),
            ("read-only /proc/sys", seen.get("proc_sys_ro")),
            ("own network namespace", seen.get("interfaces") == ["lo"] and seen.get("lo_up")),
            ("seccomp filter", seen.get("seccomp") == "2" and seen.get("ptrace_refused")),
        )
        if not ok
    ]
    if problems:
        return Isolation(False, "the probe found no " + ", ".join(problems), **common)
    return Isolation(True, **common)


@lru_cache(maxsize=1)
def gpu_inside() -> str:
    """ "" when a GPU driver initializes inside the sandbox (or there is none to ask), else why not."""
    if not probe().sandboxed:
        return probe().reason
    try:
        out = subprocess.run(
            command([sys.executable, "-I", "-S", "-c", GPU_INIT]),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the GPU probe failed: {exc}"
    said = (out.stdout.strip().splitlines() or [""])[-1]
    if out.returncode == 0 and (said.endswith(" 0") or said == "no GPU driver"):
        return ""
    return f"the GPU driver did not initialize inside the namespaces ({said or out.stderr.strip()[-200:]})"


def applies(gpu: bool) -> bool:
    """Whether commands of a run on this device are sandboxed: where the host allows it, and for a
    GPU's trials where its driver initializes inside."""
    return probe().sandboxed and (not gpu or not gpu_inside())


def trial_isolation(gpu: bool) -> str:
    """The isolation one trial record names."""
    if applies(gpu):
        return "sandbox"
    return f"none: {probe().reason}" if not probe().sandboxed else f"fence only: GPU trials: {gpu_inside()}"


def run_isolation(device: str) -> str:
    """The report header's isolation line for a run on `device` ("cpu", "cuda", "rocm")."""
    text = probe().describe()
    if device == "cpu" or applies(gpu=True) or not probe().sandboxed:
        return text
    return f"{text}; GPU trials: fence and subreapers only ({gpu_inside()})"


def wrap(
    argv: Sequence[str],
    writable: Sequence[str | Path],
    hidden: Sequence[str | Path] | None = None,
    gpu: bool = False,
    network: bool = False,
) -> list[str]:
    """`argv` inside a sandbox where this host allows one (and not for a GPU's trials), else `argv`
    as it is, or SandboxUnavailable where the run requires one (`required`). `hidden` defaults to the
    bot's own package dir; the credentials of its home are hidden always. `network`: the host's
    network (a build step allowed to download, `[sandbox] build_network`), else loopback only."""
    if not applies(gpu):
        if _REQUIRED:
            raise SandboxUnavailable(unavailable(gpu))
        return list(argv)
    writable = [*writable, *(p for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p)]
    if hidden is None:
        from bisector.isolation.instrument import installed_package_dirs

        hidden = installed_package_dirs()
    covered = [*hidden, *credentials(), *host_unix_sockets()]
    return command(argv, writable, covered, git_configs=git_configs(), network=network)


_REQUIRED = False


def is_required() -> bool:
    """Whether the code under test run now must be sandboxed (inside `required`)."""
    return _REQUIRED


def unavailable(gpu: bool) -> str:
    """The one line a run that requires the sandbox stops with, where there is none."""
    probe_ = probe()
    why = probe_.reason if not probe_.sandboxed else f"GPU trials would run in the fence only ({gpu_inside()})"
    return (
        f"no sandbox for code under test on this host ({why}); this run requires one "
        f"([sandbox] require = true): not run"
    )


def prepare(config: Config) -> None:
    """Before any code under test of `config` runs: its upstream's git config scrubbed in every
    sandbox (a checkout, or the mirror of a URL), and `enforce`."""
    from bisector import gitrepo

    up = config.upstream.repo
    guard_repo(gitrepo.mirror_path(up) if gitrepo.is_url(up) else Path(up).expanduser())
    enforce(config)


def enforce(config: Config) -> None:
    """Stop now (SandboxUnavailable, one line) where the config says `[sandbox] require = true` and
    this host gives its code under test no sandbox: every run of it, fork code or not."""
    if config.sandbox.require and not applies(config.device != "cpu"):
        raise SandboxUnavailable(unavailable(config.device != "cpu"))


@contextlib.contextmanager
def required(gpu: bool) -> Iterator[None]:
    """Fail closed for what runs inside: SandboxUnavailable now where this host gives code under
    test no sandbox (the real probe says so), and from any `wrap` that would run a command
    unsandboxed meanwhile."""
    global _REQUIRED
    if not applies(gpu):
        raise SandboxUnavailable(unavailable(gpu))
    before, _REQUIRED = _REQUIRED, True
    try:
        yield
    finally:
        _REQUIRED = before


def sandbox_env(env: Mapping[str, str], scratch: str | Path) -> dict[str, str]:
    """A sandboxed command's temp files go to its writable scratch dir (/tmp is read-only there)."""
    out = dict(env)
    if probe().sandboxed:
        Path(scratch).mkdir(parents=True, exist_ok=True)
        for name in ("TMPDIR", "TEMP", "TMP"):
            out[name] = str(scratch)
    return out


def outer_pid(inner: int, root: int | None) -> int:
    """The pid, as this bot sees it, of the process that calls itself `inner` inside a sandbox
    under `root` (the fence's pid); `inner` itself when there is no namespace in between."""
    if root is None:
        return inner
    from bisector.isolation.memwatch import tree

    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/status") as fh:
                nspid = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if nspid and int(nspid[-1]) == inner and (len(nspid) > 1 or pid == inner):
            return pid
    return inner


__all__ = [
    "Isolation",
    "command",
    "credentials",
    "enforce",
    "git_configs",
    "guard_repo",
    "host_unix_sockets",
    "is_required",
    "outer_pid",
    "prepare",
    "probe",
    "required",
    "sandbox_env",
    "wrap",
]

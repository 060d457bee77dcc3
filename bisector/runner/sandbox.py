"""The sandbox around code under test (trials, build steps, import checks), and what this host allows.

Every command that runs upstream code is started as

    fence -> unshare --user --map-root-user --mount --pid --fork --kill-child --mount-proc
          -> sandbox_init.py (mount view, capabilities dropped) -> COMMAND (PID 1 of its namespace)

so that it sees none of its ancestors in /proc (no environ to read), writes only its own dirs,
cannot see the bot's package, has a private bounded /dev/shm, and leaves nothing behind: when
COMMAND exits the kernel kills the rest of its PID namespace. `probe()` runs that once per bot
process and says what held; where it fails (no unshare, user namespaces forbidden), commands run
unsandboxed and `Isolation.describe()` says so (the fence and the subreapers still kill escapees).
Memory and task limits are cgroups' (bisector/runner/cgroups.py), probed apart and named here.

BISECTOR_SANDBOX=off turns the sandbox off (a debugging aid; the isolation line then says so);
BISECTOR_SANDBOX_WRITABLE (dirs separated by os.pathsep) names more dirs it may write (a ccache
dir, a probe's output dir in tests): the operator's choice, never a config's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

from bisector.runner import cgroups

INIT = str(Path(__file__).with_name("sandbox_init.py"))
UNSHARE_FLAGS = ("--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc")
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
    # How each command's memory and tasks are limited (bisector/runner/cgroups.py), or why they are not
    limits: str = "memory watched from the bot only (no cgroup limits)"

    def describe(self) -> str:
        limits = self.limits
        if not self.sandboxed:
            return f"no sandbox ({self.reason}); fence and subreapers only, {limits}"
        return (f"sandbox: user+mount+PID namespaces (uid {self.uid} outside, no capabilities inside), "
                f"read-only mounts but the run's trial/JIT/build dirs, bot package hidden, "
                f"private /dev/shm {self.shm_mb} MiB; {limits}")

    def as_dict(self) -> dict[str, object]:
        return {"sandboxed": self.sandboxed, "reason": self.reason, "uid": self.uid, "cgroup": self.cgroup,
                "shm_mb": self.shm_mb, "limits": self.limits, "summary": self.describe()}


def cgroup_kind() -> str:
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "v2"
    if Path("/sys/fs/cgroup/memory").exists() or Path("/sys/fs/cgroup/unified").exists():
        return "v1"
    return "none"


def command(argv: Sequence[str], writable: Sequence[str | Path] = (), hidden: Sequence[str | Path] = (),
            shm_mb: int = SHM_MB, probe: bool = False) -> list[str]:
    """`argv` run inside a new sandbox, whether or not this host allows one (see `wrap`)."""
    unshare = shutil.which("unshare") or "unshare"
    opts: list[str] = []
    for path in writable:
        opts += ["--rw", str(Path(path).resolve())]
    for path in hidden:
        opts += ["--hide", str(Path(path).resolve())]
    return [unshare, *UNSHARE_FLAGS, "--", sys.executable, "-I", "-S", INIT, *opts, "--shm-mb", str(shm_mb),
            *(["--probe"] if probe else []), "--", *argv]


@lru_cache(maxsize=1)
def probe() -> Isolation:
    """Start one sandbox and check from inside what held: its own /proc, no capabilities, a
    writable dir writable, a hidden dir empty, the rest read-only."""
    common = {"uid": os.getuid(), "cgroup": cgroup_kind(), "limits": cgroups.probe().describe()}
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
            out = subprocess.run(command(["true"], [rw], [hide], probe=True), capture_output=True, text=True,
                                 timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Isolation(False, f"unshare failed: {exc}", **common)
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return Isolation(False, f"namespaces refused here: {said}", **common)
    try:
        seen = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Isolation(False, f"the probe said nothing readable: {out.stdout[-200:]!r}", **common)
    problems = [what for what, ok in (("own PID namespace", seen.get("pid") == 1),
                                      ("no capabilities", int(seen.get("cap_eff") or "1", 16) == 0),
                                      ("writable dirs", seen.get("rw_ok")), ("hidden dirs", seen.get("hidden")),
                                      ("read-only root", seen.get("root_ro")),
                                      ("read-only /proc/sys", seen.get("proc_sys_ro"))) if not ok]
    if problems:
        return Isolation(False, "the probe found no " + ", ".join(problems), **common)
    return Isolation(True, **common)


@lru_cache(maxsize=1)
def gpu_inside() -> str:
    """"" when a GPU driver initializes inside the sandbox (or there is none to ask), else why not."""
    if not probe().sandboxed:
        return probe().reason
    try:
        out = subprocess.run(command([sys.executable, "-I", "-S", "-c", GPU_INIT]), capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL)
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


def wrap(argv: Sequence[str], writable: Sequence[str | Path], hidden: Sequence[str | Path] | None = None,
         gpu: bool = False) -> list[str]:
    """`argv` inside a sandbox where this host allows one (and not for a GPU's trials), else `argv`
    as it is. `hidden` defaults to the bot's own package dir."""
    if not applies(gpu):
        return list(argv)
    writable = [*writable, *(p for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p)]
    if hidden is None:
        from bisector.runner.instrument import installed_package_dirs

        hidden = installed_package_dirs()
    return command(argv, writable, hidden)


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
    from bisector.runner.memwatch import tree

    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/status") as fh:
                nspid = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if nspid and int(nspid[-1]) == inner and (len(nspid) > 1 or pid == inner):
            return pid
    return inner


__all__ = ["Isolation", "command", "outer_pid", "probe", "sandbox_env", "wrap"]

"""Modules of the environment that a library's trials import, imported once in the zygote instead.

A trial process is forked from a zygote that has imported torch and Triton (benches/worker.py). On the
real libraries each trial then imported seconds more in its first call: Liger-Kernel 8.3-9.0 s, fla
6.7 s a trial (studies/results/real-device-sections-h100-3.txt), every trial again, while the device
waited for setups (busy 14% of Liger's range). What a library imports from the environment (not from
its checkout) is the same at every commit, so the bot asks its zygote to import it once (`zygote_load`)
and every later fork starts with it.

The names come from trials, that is from code under test, so the zygote takes none on trust: a name
must be a dotted identifier, resolve to a file under this interpreter's own install dirs (never the
checkout, a JIT cache or the working dir), and import in a forked child (`probe`) without touching the
device driver (a device file opened, libcuda mapped) or starting a Python thread, either of which
would break every later fork. Imports nothing from `bisector`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import site
import sys
import sysconfig
import threading
import time
from collections.abc import Iterable, Sequence

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_NAMES = 64  # a trial names at most this many (the topmost new modules; a library imports a few dozen)
MAX_NAME_LEN = 100
PROBE_TIMEOUT_S = 120.0


def topmost(names: Iterable[str]) -> list[str]:
    """The names whose parent package is not among them. A submodule that importing its parent does
    not import is named again by a later trial, its parent then preloaded (a second, small round)."""
    have = set(names)
    return sorted(n for n in have if n.rpartition(".")[0] not in have)


def env_roots() -> list[str]:
    """This interpreter's install dirs (stdlib, site-packages; a distribution's dist-packages too), resolved."""
    paths = sysconfig.get_paths()
    dirs = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # a virtualenv's old site.py
        pass
    return sorted({os.path.realpath(d) for d in dirs})


def _origin(name: str) -> str | None:
    """The file (or package dir) `name` would be imported from; its parents are imported to find it."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return os.path.realpath(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    return os.path.realpath(locations[0]) if locations else None


def under(path: str, roots: Sequence[str]) -> bool:
    """Whether `path`, resolved, lies in one of the (resolved) `roots`."""
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def driver_loaded() -> bool:
    """Whether this process has a GPU driver open (a device file: cuInit, NVML, ROCm's KFD) or its
    library mapped: after the first, a fork's device calls fail."""
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri")):
                    return True
            except OSError:
                continue
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line or "libamdhip64.so" in line for line in maps)
    except OSError:
        return False


def threads() -> int:
    """Python threads alive: one started at import holds whatever it holds when the zygote forks, and
    its locks stay held in every child. Native pools are not counted: a BLAS library starts its
    threads when it is loaded and re-arms them in a fork through its own atfork handlers (as torch's
    DataLoader workers rely on)."""
    return threading.active_count()


def check_and_import(names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Import each acceptable name here, in order; stop at the first that touched the driver or
    started a thread (this process is then unfit to fork from). Returns (imported, rejected: why)."""
    roots = env_roots()
    done: list[str] = []
    rejected: dict[str, str] = {}
    start_threads, had_driver = threads(), driver_loaded()  # a CUDA torch may map it at its own import
    for name in names[:MAX_NAMES]:
        if not isinstance(name, str) or len(name) > MAX_NAME_LEN or not NAME.fullmatch(name):
            rejected[str(name)[:MAX_NAME_LEN]] = "not a module name"
            continue
        if name in sys.modules:
            continue
        try:
            origin = _origin(name)
            if origin is None or not under(origin, roots):
                rejected[name] = "not from this interpreter's install dirs"
                continue
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - an environment module may raise anything at import
            rejected[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        if driver_loaded() and not had_driver:
            rejected[name] = "its import loaded the GPU driver"
            break
        if threads() > start_threads:
            rejected[name] = "its import started a thread"
            break
        done.append(name)
    return done, rejected


def probe(names: Sequence[str], timeout_s: float = PROBE_TIMEOUT_S) -> tuple[list[str], dict[str, str]]:
    """`check_and_import` in a forked child, so that a module that kills, hangs or taints its
    process does so to the child: the names it imported cleanly, and the rejected ones with why."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        code = 1
        try:
            done, rejected = check_and_import(names)
            os.write(write_fd, json.dumps({"done": done, "rejected": rejected}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    data = b""
    try:
        os.set_blocking(read_fd, False)
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                break
            if chunk:
                data += chunk
            elif time.monotonic() > deadline:
                os.kill(pid, 9)
                break
            else:
                time.sleep(0.01)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    try:
        got = json.loads(data or b"{}")
    except ValueError:
        got = {}
    if not isinstance(got, dict) or "done" not in got:
        return [], {"*": "the probe did not finish (it died, hung or wrote nothing)"}
    return [str(n) for n in got["done"]], {str(k): str(v) for k, v in dict(got.get("rejected", {})).items()}


def zygote_load(names: Sequence[str]) -> dict[str, object]:
    """What the zygote does with a `preload` request: probe the names in a child, then import those
    it imported cleanly here (in the same order). The answer for the bot's log."""
    start, had_threads, had_driver = time.perf_counter(), threads(), driver_loaded()
    fresh = [n for n in names if isinstance(n, str) and n not in sys.modules]
    ok, rejected = probe(fresh) if fresh else ([], {})
    loaded, late = check_and_import(ok)
    rejected.update(late)
    # what its probe did not do, done here: forks from this process would be unfit (the bot renews it)
    tainted = (driver_loaded() and not had_driver) or threads() > had_threads
    return {"loaded": loaded, "rejected": rejected, "s": round(time.perf_counter() - start, 3), "tainted": tainted}


def reported(modules: Iterable[str]) -> list[str]:
    """What a trial reports for its zygote to import: the topmost of the environment's modules it
    imported, at most MAX_NAMES."""
    return topmost(n for n in modules if NAME.fullmatch(n))[:MAX_NAMES]

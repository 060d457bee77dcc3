"""Running build commands: one log per step, a timeout that kills the whole process group.

Every step's output goes to its own file (linkable from reports) and is appended to the build's
combined log, so a failure can be shown as a tail without reading the files again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bisector.isolation import sandbox
from bisector.isolation.cgroups import DEFAULT_TASKS, Limits
from bisector.isolation.fence import OOM_LINE
from bisector.isolation.fenced import fenced
from bisector.isolation.instrument import without_bot
from bisector.isolation.memwatch import WATCH

TAIL_LINES = 40


@dataclass(frozen=True)
class StepOutcome:
    name: str
    ok: bool
    seconds: float
    log_path: str
    reason: str = ""  # "exit 2 (its last output line)", "timeout after 30s"


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_step(
    name: str,
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    log_path: Path,
    combined_log: Path,
    memory_bytes: int = 0,
    writable: Sequence[Path] | None = None,
    max_tasks: int = DEFAULT_TASKS,
    network: bool = False,
) -> StepOutcome:
    """Run `argv` inside the fence (bisector/isolation/fence.py: it dies with the bot and takes the
    step's whole process tree), under a memory limit and at most `max_tasks` processes and threads
    (a cgroup of its own where the host allows it, bisector/isolation/cgroups.py); stdout and stderr
    go to `log_path`, then to the combined log. With `writable` (upstream code: build steps, import
    checks) it runs in the sandbox (bisector/isolation/sandbox.py) where only those dirs can be written,
    in a network namespace of its own (loopback only) unless `network`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    reason = ""
    with open(log_path, "wb") as log:
        log.write(f"$ {' '.join(argv)}\n# cwd {cwd}\n".encode())
        log.flush()
        inner = list(argv) if writable is None else sandbox.wrap(argv, writable, network=network)
        proc = subprocess.Popen(
            fenced(inner, limits=Limits(memory_bytes, max_tasks)),
            cwd=cwd,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        breach = WATCH.watch(proc.pid, memory_bytes, kill=proc.terminate)
        try:
            code = proc.wait(timeout=timeout_s)
            if breach:
                reason = breach[0].describe()
            elif code != 0 and _kernel_killed(log_path):
                reason = (
                    f"killed: over the memory limit of {memory_bytes / 2**30:.1f} GiB (stopped by the kernel's "
                    "cgroup limit: tmpfs included; `build.memory_gb` sets it)"
                )
            elif code != 0:
                reason = f"exit {code}"
        except subprocess.TimeoutExpired:
            _stop(proc)
            reason = f"timeout after {timeout_s:g}s"
        except BaseException:
            _stop(proc)  # our own interruption: leave no orphan build behind
            raise
        finally:
            WATCH.forget(proc.pid)
    return _logged(name, log_path, combined_log, time.monotonic() - start, reason)


def _logged(name: str, log_path: Path, combined_log: Path, seconds: float, reason: str) -> StepOutcome:
    """The step's outcome, its own log appended to the combined one; a failure says its last line."""
    if reason:
        said = last_output_line(log_path)
        reason += f" ({said})" if said else ""
    with open(combined_log, "a", errors="replace") as out:
        out.write(f"===== {name} ({seconds:.1f}s{', ' + reason if reason else ''}) =====\n")
        out.write(log_path.read_text(errors="replace"))
        out.write("\n")
    return StepOutcome(name=name, ok=not reason, seconds=seconds, log_path=str(log_path), reason=reason)


def _kernel_killed(log_path: Path) -> bool:
    """The fence said the kernel's cgroup memory limit killed some of the step's processes."""
    head = OOM_LINE.split("{", 1)[0]
    return any(line.startswith(head) for line in tail(log_path, 5).splitlines())


def last_output_line(path: Path, limit: int = 200) -> str:
    """The step's last non-empty output line (its own complaint, as a report line), capped."""
    lines = [line.strip() for line in tail(path, 10).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("$ ", "# cwd "))]
    last = lines[-1] if lines else ""
    return last if len(last) <= limit else last[: limit - 1] + "…"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the fence (it kills the step's session), then make sure it is gone."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def python_path_env(base: Mapping[str, str], paths: Sequence[str]) -> dict[str, str]:
    """`base` with `paths` first on PYTHONPATH; the host's site-packages (torch) stay visible,
    the bot's own package does not (bisector/isolation/instrument.py)."""
    env = dict(base)
    old = without_bot(env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join([*paths, *([old] if old else [])])
    return env


def import_argv(module: str) -> list[str]:
    return [sys.executable, "-c", f"import {module}; print({module}.__file__)"]

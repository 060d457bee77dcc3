"""Whether a process a test started (or one of its descendants) still runs."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while `pid` exists and is neither a zombie nor dead (state X: it has exited and is being
    torn down; a fresh clone's run saw a killed bot's trial in that state after 30 s, its parent
    the sandbox's init being torn down too). The process may end between any two reads of /proc:
    any error reading its stat means it is gone."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
    except FileNotFoundError:
        return True  # no /proc here (not Linux), but the signal reached it
    except (ProcessLookupError, OSError, IndexError):
        return False
    return state not in ("Z", "X")


def host_pid(inner: int, marker: str) -> int:
    """The pid, as this test sees it, of the process that calls itself `inner` inside a sandbox's
    PID namespace and whose environment holds `marker`; `inner` itself when there is none."""
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                nspid = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read().decode(errors="replace")
        except OSError:
            continue
        if len(nspid) > 1 and int(nspid[-1]) == inner and marker in environ:
            return int(name)
    return inner


def _cmdline(pid: int, limit: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")[:limit]


def describe(pid: int) -> str:
    """A live process in one line, for a failure's message: its name, state, parent and command."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        cmd = _cmdline(pid, 200)
    except OSError as exc:
        return f"pid {pid}: {exc}"
    parent = int(fields.get("PPid", "0") or 0)
    try:
        parent_cmd = _cmdline(parent, 160)
    except OSError:
        parent_cmd = "gone"
    return (
        f"pid {pid} {fields.get('Name', '').strip()} state {fields.get('State', '').strip()} "
        f"parent {parent} ({parent_cmd}): {cmd}"
    )

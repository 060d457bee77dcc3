"""Whether a process a test started (or one of its descendants) still runs."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie. The process may end between any two reads of
    /proc: any error reading its stat means it is gone."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
    except FileNotFoundError:
        return True  # no /proc here (not Linux), but the signal reached it
    except (ProcessLookupError, OSError, IndexError):
        return False
    return state != "Z"

"""A command line that runs COMMAND inside the fence (bisector/isolation/fence.py): it dies with
this bot and takes its whole process tree, in a cgroup of its own where the host allows one.

Every process that runs upstream code is started through here: trial workers and zygotes
(bisector/runner/workers.py), build steps and import checks (bisector/build/steps.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bisector.isolation import cgroups, survivors

FENCE = str(Path(__file__).with_name("fence.py"))


def fenced(command: Sequence[str], pass_fds: Sequence[int] = (), limits: cgroups.Limits | None = None) -> list[str]:
    """COMMAND run inside the fence: it dies with this bot, taking its whole process tree; with
    `limits`, in a cgroup of its own where the host allows one (bisector/isolation/cgroups.py)."""
    return fenced_in(command, pass_fds, limits)[0]


def fenced_in(
    command: Sequence[str], pass_fds: Sequence[int] = (), limits: cgroups.Limits | None = None
) -> tuple[list[str], cgroups.Group | None]:
    """`fenced`, and the cgroups made for the command (the fence removes them when it ends)."""
    survivors.adopt_orphans()  # what outlives its fence comes back to this bot, to be killed
    fds = ",".join(str(fd) for fd in pass_fds)
    group = cgroups.new_group(limits) if limits is not None else None
    inner = [*cgroups.systemd_prefix(limits), *command] if limits is not None else list(command)
    return [
        sys.executable,
        "-I",
        FENCE,
        "--bot",
        str(os.getpid()),
        *(["--pass-fds", fds] if fds else []),
        *(group.fence_args() if group else []),
        "--",
        *inner,
    ], group

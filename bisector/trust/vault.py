"""The secrets a command needs for publishing, held in this process's memory and nowhere else.

`bisector.trust.start` fills the vault before the command runs: it reads the secrets, hands them
to the re-executed process through an inherited pipe (never the environment, argv or a file) and
seals them here. While it holds a secret the process is marked non-dumpable on Linux, so a process
of the same user (a trial, a build script) can neither attach to it nor read its memory or /proc
files. Publishing asks `publishing_env()` for the token, never `os.environ`.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Mapping
from types import MappingProxyType

from bisector.errors import BisectorError

PR_SET_DUMPABLE = 4
# Far more than a few tokens, far less than any pipe's buffer: the writer never blocks.
MAX_BYTES = 4096

_sealed: Mapping[str, str] | None = None


class VaultError(BisectorError):
    """The secrets could not be handed over or protected; the command does not run with them."""


def seal(values: Mapping[str, str]) -> None:
    """Make `values` the only source of secrets for this process (called once, at CLI start)."""
    global _sealed
    _sealed = MappingProxyType(dict(values))


def is_sealed() -> bool:
    return _sealed is not None


def publishing_env() -> Mapping[str, str]:
    """Where publishing reads the token: the vault once the CLI entry sealed it (`os.environ` then
    holds no secret at all). A caller that never went through the entry (a library user, a test
    invoking a command in-process) has an unscrubbed environment and reads that."""
    return _sealed if _sealed is not None else os.environ


def forbid_dumps() -> None:
    """prctl(PR_SET_DUMPABLE, 0): no ptrace attach, no /proc/<pid>/mem or environ for same-user
    processes, no core file. Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise VaultError(f"cannot mark the process non-dumpable (prctl: {os.strerror(err)}): refusing to hold a secret")


def is_dumpable() -> bool:
    """PR_GET_DUMPABLE; True off Linux (nothing was changed there)."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))


def hand_over(values: Mapping[str, str]) -> int:
    """A pipe's read end holding `values` as JSON, inheritable across exec; the write end is closed."""
    data = json.dumps(dict(values)).encode()
    if len(data) > MAX_BYTES:
        raise VaultError(f"the secrets to keep are {len(data)} bytes, more than the {MAX_BYTES} a pipe hand-over takes")
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    os.set_inheritable(read, True)
    return read


def take_over(fd: int) -> dict[str, str]:
    """Read what `hand_over` wrote and close the pipe, so no child inherits or reopens it."""
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise VaultError(f"cannot read the secrets handed over on fd {fd}: {exc.strerror}") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        values = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        raise VaultError(f"the secrets handed over on fd {fd} are not JSON") from None
    if not isinstance(values, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        raise VaultError(f"the secrets handed over on fd {fd} are not a name -> value object")
    return values

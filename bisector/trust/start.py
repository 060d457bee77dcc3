"""The console-script entry: no command runs with a secret in its environment.

    bisector ...  ->  secrets in os.environ?  --no-->  run the command
                          | yes
                          v
       keep the token(s) this command line may publish with, write them into a pipe,
       os.execve(the same command line, scrubbed environment + BISECTOR_VAULT_FD=<read end>)
                          |
                          v
       (same pid, /proc/self/environ now clean) mark non-dumpable, read the pipe into the vault,
       close it, run the command: every child (git, builds, import checks, trials) inherits a
       clean os.environ by construction

The re-exec, not an in-place `del os.environ[...]`, is what matters: /proc/<pid>/environ shows the
environment the process was started with, and every trial can read its parent's.
The click group itself does none of this, so tests that invoke commands in-process are unaffected.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Sequence

from bisector.trust import vault
from bisector.trust.filter import DEFAULT_TOKEN_ENV, scrub, secrets_in

VAULT_FD_ENV = "BISECTOR_VAULT_FD"
NOTHING_KEPT = "-"  # the re-executed process holds no secret
# Commands that can post to GitHub, unless their flags say they only measure or only write files.
PUBLISHING = frozenset({"publish", "nightly", "handle-comment", "run"})

reexecuted = False  # True in the process that the entry re-executed (for tests and diagnostics)


def _flags(args: Sequence[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def config_token_env(args: Sequence[str]) -> str | None:
    """publish.token_env of the --config file on the command line, if it can be read; the command
    itself reports a bad config."""
    path = None
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            value = tomllib.load(fh).get("publish", {}).get("token_env")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def needed_names(argv: Sequence[str]) -> frozenset[str]:
    """The token variables this command line may publish with; none when it only measures."""
    if not argv or argv[0] not in PUBLISHING:
        return frozenset()
    command, args = argv[0], argv[1:]
    flags = _flags(args)
    if "--dry-run" in flags or "--plan-out" in flags:
        return frozenset()
    if command == "run" and "--publish" not in flags:
        return frozenset()
    configured = config_token_env(args)
    return frozenset({DEFAULT_TOKEN_ENV, *([configured] if configured else [])})


def prepare(argv: Sequence[str]) -> None:
    """Seal the vault; re-execute first when the environment holds a secret. Returns only in a
    process whose environment, as the kernel shows it, holds none."""
    global reexecuted
    marker = os.environ.pop(VAULT_FD_ENV, None)
    if marker is not None:
        reexecuted = True
        left = sorted(secrets_in(os.environ))
        if left:  # only a hand-set marker gets here: our own re-exec scrubbed the environment
            raise vault.VaultError(f"{VAULT_FD_ENV} is set but the environment still holds {', '.join(left)}")
        if marker == NOTHING_KEPT:
            vault.seal({})
            return
        try:
            fd = int(marker)
        except ValueError:
            fd = -1
        if fd < 3:
            raise vault.VaultError(f"{VAULT_FD_ENV}={marker!r}: not the pipe the entry hands over")
        vault.forbid_dumps()  # before the secret enters this process's memory
        vault.seal(vault.take_over(fd))
        return
    env = os.environ
    names = needed_names(argv)
    found = {**secrets_in(env), **{n: env[n] for n in names if n in env}}
    if not found:
        vault.seal({})
        return
    keep = {n: found[n] for n in sorted(names) if n in found and found[n].strip()}
    clean = {k: v for k, v in scrub(env).items() if k not in names}
    if not hasattr(os, "execve") or sys.platform == "win32":  # no /proc to protect: scrub in place
        for name in found:
            os.environ.pop(name, None)
        vault.seal(keep)
        return
    clean[VAULT_FD_ENV] = str(vault.hand_over(keep)) if keep else NOTHING_KEPT
    argv_exec = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv_exec, clean)
    except OSError as exc:
        raise vault.VaultError(
            f"cannot re-execute {sys.executable} with a scrubbed environment: {exc.strerror}"
        ) from None


def main() -> None:
    """`bisector` (console script) and `python -m bisector`."""
    try:
        prepare(sys.argv[1:])
    except vault.VaultError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    from bisector.cli import main as cli_main

    cli_main()

"""One root error with fixed exit codes, so the CLI never prints a traceback for a known failure."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_NO_SANDBOX = 3  # the run requires a sandbox for code under test and this host gives none


class BisectorError(Exception):
    """Root of every error the CLI turns into a one-line message."""

    exit_code = EXIT_FAILURE


class BadInput(BisectorError):
    """The user gave us something we cannot use: a file, key, ref or argument."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInput):
    """A config file is missing, unparsable, or has a bad key; the message names file and key."""

    def __init__(self, path: object, key: str, problem: str) -> None:
        self.path, self.key, self.problem = str(path), key, problem
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {problem}")


class RefError(BadInput):
    """A git ref or range that does not resolve, or is not ordered as asked."""


class GitError(BisectorError):
    """A git operation failed for a reason other than bad user input."""


class BuildError(BisectorError):
    """A build step failed; the bisection treats the commit as SKIP."""


class TrialError(BisectorError):
    """A trial process could not be started or its result could not be read."""


class StoreError(BisectorError):
    """The result store is unreadable or from a newer schema."""


class PublishError(BisectorError):
    """Publishing to GitHub failed after retries."""


class BackendUnavailable(BisectorError):
    """A subject or control backend cannot run here; the message says why."""


class SandboxUnavailable(BisectorError):
    """The run requires a sandbox for code under test (`[sandbox] require`) and this host has none."""

    exit_code = EXIT_NO_SANDBOX

"""Keeping secrets away from code under test.

Everything that runs upstream code (builds, import checks, `git apply`, trials) must run where no
token can be read. `filter` decides what is a secret; `vault` holds the few the command needs for
publishing in memory only; `start` is the console-script entry that re-executes the command with a
scrubbed environment, so every child inherits a clean one by construction.
"""

from bisector.trust.filter import DEFAULT_TOKEN_ENV, is_secret, scrub

__all__ = ["DEFAULT_TOKEN_ENV", "is_secret", "scrub"]

"""A local GitHub REST server for tests (see server.py); PyGithub talks to it with base_url=fake.url."""

from tests.fakegithub.server import FakeGitHub, HTTPError, Recorded

__all__ = ["FakeGitHub", "HTTPError", "Recorded"]

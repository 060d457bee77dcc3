"""A campaign's key: the config's name and its upstream as anyone knows it, never a path of this machine.

Results are comparable within one config measuring one upstream. The key used to hold
`upstream.repo` as written, an absolute path for a local upstream (`demo:/tmp/x/upstream`): the
store then named a directory of the machine that made it, and a store moved to another machine, or
an upstream moved on this one, resumed nothing. Now a local upstream (a path or a file:// URL) is
known by its directory's name, a remote one by its URL without credentials; the store's migration
5 renames the keys older stores hold the same way, so their runs resume.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse

_NETWORK = re.compile(r"(?i)^(https?|ssh|git)://")


def upstream_id(repo: str) -> str:
    """`repo` (a path, or a git URL) as a campaign names it."""
    text = repo.strip()
    if _NETWORK.match(text):
        parts = urllib.parse.urlsplit(text)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))
    if re.match(r"(?i)^file://", text):
        text = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
    elif re.match(r"^[\w.-]+@[\w.-]+:", text):  # scp-like git@host:org/lib.git: no path of this machine
        return text
    name = posixpath.basename(text.replace("\\", "/").rstrip("/"))
    return name if name not in ("", ".", "..", "~") else "upstream"


def campaign_key(name: str, repo: str) -> str:
    return f"{name}:{upstream_id(repo)}"


def renamed(key: str) -> str:
    """The key a campaign of an older store gets (`demo:/tmp/x/upstream` -> `demo:upstream`)."""
    name, sep, repo = key.partition(":")
    return campaign_key(name, repo) if sep and repo else key


__all__ = ["campaign_key", "renamed", "upstream_id"]

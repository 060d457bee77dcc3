"""Paths made machine-independent wherever a report, `trials.csv` or a store leaves the machine.

A report, its CSV and the store are read on other machines and committed to repositories; an
absolute path (`/tmp/d/work/jit/<sha>/...`, `/home/ada/...`) names a directory of the machine that
made them, tells the reader nothing there and leaks a user name. So paths under the work dir are
stored relative to it (`trials/<sha>/.../log.txt`, `jit/<sha>/triton_cache_dir`), paths in text
(tracebacks) are written from named roots (`<work>/...`, `<bisector>/benches/trial.py`, `~/...`),
and a command line shows its paths relative to the report, as the report shows the upstream.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from bisector.paths import shown

__all__ = [
    "Roots",
    "command",
    "exported_row",
    "machine_free",
    "relative_to",
    "restore",
    "roots",
    "scrub",
    "scrub_value",
]

Roots = Mapping[str, str]  # absolute directory -> how it is written ("<work>", "~")

_BISECTOR = str(Path(__file__).resolve().parent.parent)  # the checkout or site-packages holding bisector


def roots(work: str | os.PathLike[str] | None = None, **named: str | os.PathLike[str] | None) -> dict[str, str]:
    """The roots a text is written from: the work dir, `named` ones (label -> directory), bisector's
    own install, the home directory. Longest first, so the innermost root names a path."""
    found = {os.fspath(p): f"<{label}>" for label, p in named.items() if p}
    if work:
        found[os.fspath(work)] = "<work>"
        found.setdefault(str(Path(work).resolve()), "<work>")
    found.setdefault(_BISECTOR, "<bisector>")
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        found.setdefault(home, "~")
    return dict(sorted(found.items(), key=lambda kv: -len(kv[0])))


def relative_to(value: str, base: str | os.PathLike[str]) -> str:
    """`value` relative to `base` when it is a path under it, else `value` unchanged."""
    b = os.fspath(base).rstrip(os.sep)
    return value[len(b) + 1 :] if value.startswith(b + os.sep) else value


def scrub(text: str, where: Roots) -> str:
    """`text` with every path under a root written from the root's name."""
    for root, label in where.items():
        root = root.rstrip(os.sep)
        if root and root in text:  # most strings hold no path: no pattern compiled or run for them
            text = re.sub(re.escape(root) + r"(?=[/\s\"'),:;]|$)", label.replace("\\", r"\\"), text)
    return text


def restore(text: str, where: Roots) -> str:
    """A path written from a root's name (`<work>/builds/x`) as this machine has it; others unchanged."""
    for root, label in where.items():
        if text == label or text.startswith(label + "/"):
            return root.rstrip(os.sep) + text[len(label) :]
    return text


def scrub_value(value: object, where: Roots, base: str | os.PathLike[str] | None = None) -> object:
    """A JSON-like value with every string scrubbed; a string that is a path under `base` made
    relative to it (a trial's log or JIT dir under the work dir)."""
    if isinstance(value, str):
        if base is not None:
            rel = relative_to(value, base)
            if rel != value:
                return rel
        return scrub(value, where)
    if isinstance(value, Mapping):
        return {k: scrub_value(v, where, base) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_value(v, where, base) for v in value)
    return value


def command(line: str, report_dir: str | os.PathLike[str]) -> str:
    """A command line with its absolute paths (`--dir /tmp/d`, `--config=/home/a/c.toml`) shown as
    the report shows paths: relative to the report when near it, else by their last part."""
    try:
        words: Sequence[str] = shlex.split(line)
    except ValueError:
        return scrub(line, roots())
    out = []
    for word in words:
        flag, eq, value = word.partition("=") if word.startswith("--") and "=" in word else ("", "", word)
        if os.path.isabs(value):
            value = shown(value, report_dir)
        out.append(shlex.quote(f"{flag}{eq}{value}"))
    return " ".join(out)


# A path of some machine that no named root covers: under these it names a user, a checkout, a temp dir.
_MACHINE = re.compile(
    r"(?<![\w.~<>-])/(?:tmp|home|root|work|Users|var/folders|private|mnt|scratch)"
    r"(?:/[^\s\"'`()\[\]{},;:<>|]*)?"
)


_MACHINE_DIRS = ("tmp", "home", "root", "work", "Users", "var", "folders", "private", "mnt", "scratch")


def _unnamed(match: re.Match[str]) -> str:
    parts = [p for p in match.group(0).split("/") if p]
    keep = parts[-2:] if len(parts) > 3 else parts[-1:] if len(parts) > 1 else []
    while keep and keep[0] in _MACHINE_DIRS:
        keep = keep[1:]
    return "/".join(["…", *keep])


def machine_free(value: object, where: Roots | None = None, base: str | None = None) -> object:
    """A JSON-like value with no absolute path of a machine left: under `base` relative to it, under
    a root from the root's name, anything else under /tmp, /home, /root, /work (...) as `…/` and
    its last parts."""
    return _unnamed_paths(scrub_value(value, where if where is not None else roots(), base))


def _unnamed_paths(value: object) -> object:
    """Every string of a JSON-like value with the machine paths no root covered cut to `…/` and
    their last parts."""
    if isinstance(value, str):
        return _MACHINE.sub(_unnamed, value)
    if isinstance(value, Mapping):
        return {k: _unnamed_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_unnamed_paths(v) for v in value)
    return value


def exported_row(row: Mapping[str, object]) -> dict[str, object]:
    """One stored trial as `store export` writes it: its work dir read from its log's path (rows of
    an older bisector kept absolute ones), then no path of any machine."""
    protocol = row.get("protocol")
    log = protocol.get("log_path") if isinstance(protocol, Mapping) else None
    work = log.split("/trials/", 1)[0] if isinstance(log, str) and log.startswith("/") and "/trials/" in log else None
    return cast("dict[str, object]", machine_free(dict(row), roots(work), work))  # a dict in, a dict out

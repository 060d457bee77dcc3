"""Pure parsing of a PR comment into a frozen command; no I/O.

    /bisect GOOD..BAD [--suite fa|gemm] [--shapes a,b]
    /perf [--suite fa|gemm] [--shapes a,b]

Only the first line that starts with `/bisect` or `/perf` counts, so a command quoted further down
in a discussion never runs twice. Anything malformed becomes `Usage`, which carries the reason
and the usage text the bot posts back.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from bisector.config import SUITES

USAGE = """\
Usage (maintainers only: write, maintain or admin permission):

    /bisect GOOD..BAD [--suite fa|gemm] [--shapes NAME,NAME]
        localize every performance step between two commits (refs or SHAs) and post the table
    /perf [--suite fa|gemm] [--shapes NAME,NAME]
        A/B of this PR's head against its merge base: faster / slower / same / not sure, per shape
"""

VERBS = ("/bisect", "/perf")
# A ref as a user may type it: no leading dash (never an option to git), no spaces or shell syntax.
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]{0,199}")
_SHAPE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,99}")


@dataclass(frozen=True)
class Selection:
    suite: str | None = None
    shapes: tuple[str, ...] = ()

    def only(self) -> tuple[str, ...]:
        """What `pipeline.select_shapes` takes: shape names (qualified by the suite when given), or the suite."""
        if self.shapes:
            if self.suite:
                return tuple(s if "/" in s else f"{self.suite}/{s}" for s in self.shapes)
            return self.shapes
        return (self.suite,) if self.suite else ()


@dataclass(frozen=True)
class BisectCommand:
    good: str
    bad: str
    selection: Selection = Selection()

    @property
    def verb(self) -> str:
        return "/bisect"


@dataclass(frozen=True)
class PerfCommand:
    selection: Selection = Selection()

    @property
    def verb(self) -> str:
        return "/perf"


@dataclass(frozen=True)
class Usage:
    """A command the bot recognised but could not read: `problem` says why."""

    problem: str
    line: str
    text: str = USAGE


Command = BisectCommand | PerfCommand


def command_line(body: str) -> str | None:
    """The first line whose first word is /bisect or /perf, stripped; None if there is none."""
    for raw in body.splitlines():
        line = raw.strip()
        word = line.split(maxsplit=1)[0] if line else ""
        if word in VERBS:
            return line
    return None


def parse(body: str) -> Command | Usage | None:
    """None when the comment holds no command at all (the bot stays silent)."""
    line = command_line(body)
    if line is None:
        return None
    try:
        words = shlex.split(line)
    except ValueError as exc:
        return Usage(f"cannot split the command: {exc}", line)
    verb, args = words[0], words[1:]
    positional, options, problem = _split(args)
    if problem:
        return Usage(problem, line)
    selection, problem = _selection(options)
    if problem:
        return Usage(problem, line)
    if verb == "/perf":
        if positional:
            return Usage(f"/perf takes no range, got {' '.join(positional)!r}", line)
        return PerfCommand(selection)
    if len(positional) != 1:
        return Usage("/bisect needs exactly one range GOOD..BAD", line)
    good, sep, bad = positional[0].partition("..")
    if not sep or bad.startswith("."):
        return Usage(f"not a range GOOD..BAD: {positional[0]!r}", line)
    for name, ref in (("GOOD", good), ("BAD", bad)):
        if not _REF.fullmatch(ref):
            return Usage(f"{name} is not a ref or SHA: {ref!r}", line)
    return BisectCommand(good, bad, selection)


def _split(args: list[str]) -> tuple[list[str], dict[str, str], str]:
    positional: list[str] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name not in ("suite", "shapes"):
                return [], {}, f"unknown option --{name}"
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    return [], {}, f"--{name} needs a value"
                value, i = args[i + 1], i + 1
            if name in options:
                return [], {}, f"--{name} given twice"
            options[name] = value
        elif arg.startswith("-"):
            return [], {}, f"unknown option {arg}"
        else:
            positional.append(arg)
        i += 1
    return positional, options, ""


def _selection(options: dict[str, str]) -> tuple[Selection, str]:
    suite = options.get("suite")
    if suite is not None and suite not in SUITES:
        return Selection(), f"--suite must be one of {'|'.join(SUITES)}, got {suite!r}"
    shapes = tuple(s.strip() for s in options.get("shapes", "").split(",") if s.strip())
    if "shapes" in options and not shapes:
        return Selection(), "--shapes needs at least one name"
    bad = [s for s in shapes if not _SHAPE.fullmatch(s)]
    if bad:
        return Selection(), f"not a shape name: {bad[0]!r}"
    return Selection(suite, shapes), ""

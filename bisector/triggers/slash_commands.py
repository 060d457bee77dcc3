"""Pure parsing of a PR comment into a frozen command; no I/O.

    /bisect GOOD..BAD [--suite fa|gemm] [--shapes a,b]
    /perf [--suite fa|gemm] [--shapes a,b]

Only the first line that starts with `/bisect` or `/perf` counts, so a command quoted further down
in a discussion never runs twice. Anything malformed becomes `Usage`, which carries the reason
and the usage text the bot posts back.

The work is bounded by construction, whatever the body: only its first MAX_BODY characters are read
(GitHub's own limit on a comment), a command line longer than MAX_LINE is refused before it is
split (shlex grew with the square of a long word: a 5 MB line was not parsed in 120 s), and what
is echoed back (`Usage.line`, values quoted in `Usage.problem`) is capped at MAX_ECHO characters.
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
MAX_BODY = 65536  # characters read from a comment body (GitHub caps comments at 65536)
MAX_LINE = 1000  # a real command is a few dozen characters
MAX_ECHO = 120  # characters of the user's text quoted back in an answer
# A ref as a user may type it: no leading dash (never an option to git), no spaces or shell syntax.
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]{0,199}")
_SHAPE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,99}")


@dataclass(frozen=True)
class Selection:
    suite: str | None = None
    shapes: tuple[str, ...] = ()

    def only(self) -> tuple[str, ...]:
        """What `config.select_shapes` takes: shape names (qualified by the suite when given), or the suite."""
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


def shown(text: str, limit: int = MAX_ECHO) -> str:
    """User text as it may be quoted back: at most `limit` characters, an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _quoted(value: str) -> str:
    return repr(shown(value, MAX_ECHO // 2))


def command_line(body: str) -> str | None:
    """The first line whose first word is /bisect or /perf, stripped; None if there is none.
    Reads at most MAX_BODY characters of the body, each a bounded number of times."""
    longest = max(len(v) for v in VERBS)
    for raw in body[:MAX_BODY].splitlines():
        line = raw.strip()
        if line[: longest + 1].split(maxsplit=1)[:1] in ([v] for v in VERBS):
            return line
    return None


def parse(body: str) -> Command | Usage | None:
    """None when the comment holds no command at all (the bot stays silent)."""
    line = command_line(body)
    if line is None:
        return None
    if len(line) > MAX_LINE:
        return Usage(f"the command line is {len(line)} characters long (at most {MAX_LINE})", shown(line))
    try:
        words = shlex.split(line)
    except ValueError as exc:
        return Usage(f"cannot split the command: {exc}", shown(line))
    read = _read(words)
    return Usage(read, shown(line)) if isinstance(read, str) else read


def _read(words: list[str]) -> Command | str:
    """The command the words make, or the problem with them."""
    verb, args = words[0], words[1:]
    positional, options, problem = _split(args)
    if problem:
        return problem
    selection, problem = _selection(options)
    if problem:
        return problem
    if verb == "/perf":
        if positional:
            return f"/perf takes no range, got {_quoted(' '.join(positional))}"
        return PerfCommand(selection)
    if len(positional) != 1:
        return "/bisect needs exactly one range GOOD..BAD"
    good, sep, bad = positional[0].partition("..")
    if not sep or bad.startswith("."):
        return f"not a range GOOD..BAD: {_quoted(positional[0])}"
    for name, ref in (("GOOD", good), ("BAD", bad)):
        if not _REF.fullmatch(ref):
            return f"{name} is not a ref or SHA: {_quoted(ref)}"
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
                return [], {}, f"unknown option --{shown(name, MAX_ECHO // 2)}"
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    return [], {}, f"--{name} needs a value"
                value, i = args[i + 1], i + 1
            if name in options:
                return [], {}, f"--{name} given twice"
            options[name] = value
        elif arg.startswith("-"):
            return [], {}, f"unknown option {shown(arg, MAX_ECHO // 2)}"
        else:
            positional.append(arg)
        i += 1
    return positional, options, ""


def _selection(options: dict[str, str]) -> tuple[Selection, str]:
    suite = options.get("suite")
    if suite is not None and suite not in SUITES:
        return Selection(), f"--suite must be one of {'|'.join(SUITES)}, got {_quoted(suite)}"
    shapes = tuple(s.strip() for s in options.get("shapes", "").split(",") if s.strip())
    if "shapes" in options and not shapes:
        return Selection(), "--shapes needs at least one name"
    bad = [s for s in shapes if not _SHAPE.fullmatch(s)]
    if bad:
        return Selection(), f"not a shape name: {_quoted(bad[0])}"
    return Selection(suite, shapes), ""

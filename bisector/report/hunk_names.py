"""The hunk search's finding in words a kernel engineer reads at a glance: what was found, in which
unit (whole hunks, or statements of hunks when the threading was applied as a base), pieces named
compactly (the file once, then `@@-81 -84-85, -87`), and the reasons subsets would not run, grouped.

Pure: reads the finding (bisector/why/culprit_hunks.py) and its labels as the hunk splitter writes
them (`path @@ -81,73 +95,87 @@` for a hunk, `... lines -84-85` for a statement piece of one); a
label of another shape is shown as it is."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bisector.why.culprit_hunks import HunkFinding, HunkTry

#: the label every subset on top of the threading base starts with (culprit_hunks._Rounds.labels)
BASE = "plumbing base"
_HUNK = re.compile(r"^(?P<path>.+) @@ -(?P<old>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@(?: lines (?P<lines>\S+))?$")
_WHOLE_FILE = re.compile(r"^(?P<path>.+) \(whole file\)$")
#: where one reason ends and the next begins in a refused subset's error: each names its file
_NEXT_REASON = re.compile(r"; (?=[\w./+-]+\.py: )")
#: the prefixes that a refused subset's error carries (hunk_plumbing.Plan.compile_error): never built
REFUSED = ("would not run:", "does not compile:")


def compact(labels: Sequence[str]) -> str:
    """Labels named compactly, in order: each file once (in backticks), then its hunks by their old
    start line, each with the lines kept of it: "`k.py` @@-43 +51; @@-81 -84-85, -87 · `b.py` @@-3"."""
    files: dict[str, dict[str, list[str]]] = {}
    for label in labels:
        m, w = _HUNK.match(label), _WHOLE_FILE.match(label)
        if m:
            spans = files.setdefault(m["path"], {}).setdefault(f"@@-{m['old']}", [])
            if m["lines"]:
                spans.append(m["lines"])
        elif w:
            files.setdefault(w["path"], {})["(whole file)"] = []
        else:
            files.setdefault(label, {})
    parts = []
    for path, hunks in files.items():
        named = "; ".join(f"{h} {', '.join(spans)}".rstrip() for h, spans in hunks.items())
        parts.append(f"`{path}` {named}".rstrip())
    return " · ".join(parts)


def on_base(t: HunkTry) -> tuple[bool, tuple[str, ...]]:
    """Whether the subset sits on the threading base, and its own pieces."""
    on = bool(t.hunks) and t.hunks[0] == BASE
    return on, t.hunks[1:] if on else t.hunks


def subset_name(t: HunkTry) -> str:
    """ "the base alone", "base + `k.py` @@-43 +51", or the hunks' compact names."""
    on, own = on_base(t)
    if on and not own:
        return "the base alone"
    return ("base + " if on else "") + compact(own)


@dataclass(frozen=True)
class Named:
    """What the finding names, in one unit: `found` of `searched` statements (through the threading
    base) or hunks, lying in `in_hunks` whole hunks; `phrase` is the cell a table shows."""

    found: int
    unit: str  # "statements" or "hunks"
    searched: int
    in_hunks: int
    phrase: str


def named(f: HunkFinding) -> Named:
    """The finding's count in one unit, said as the report's prose says it ("within 14 of the 25
    behaviour-changing statements of 6 hunks; stopped early: builds", "4 of 5 hunks")."""
    stopped = "" if f.complete or not f.stopped_at else f"; stopped early: {f.stopped_at}"
    n = len(f.hunks)
    if f.cannot_split:
        return Named(0, "hunks", f.n_hunks - f.n_aside, 0, f"cannot split the {f.n_hunks - f.n_aside} hunks")
    if f.base_carries:
        return Named(
            n, "statements", n, f.n_plumbing, f"the threading base alone ({f.n_plumbing} hunks and lines of others)"
        )
    if f.n_behaviour:
        if not f.complete:
            phrase = f"within {n} of the {f.n_pieces} behaviour-changing statements of {f.n_behaviour} hunks"
        else:
            phrase = f"{f.found_hunks} of {f.n_behaviour} behaviour-changing hunks" + (
                f", {n} of their {f.pieces_in_found} statements" if f.pieces_in_found > n else ""
            )
        return Named(n, "statements", f.n_pieces, f.found_hunks, phrase + stopped)
    phrase = f"{'within ' if not f.complete else ''}{n} of {f.n_hunks} hunk{'s' * (f.n_hunks != 1)}"
    return Named(n, "hunks", f.n_hunks - f.n_aside, n, phrase + stopped)


def refused(t: HunkTry) -> bool:
    """The subset was never built: its Python would not compile or run (checked before building)."""
    return t.carries is None and t.error.startswith(REFUSED)


def _refusal(error: str) -> tuple[str, list[str]]:
    """A refused subset's error as its prefix ("would not run:") and its reasons, each naming its
    file; ("", [error]) for any other error."""
    head = next((p for p in REFUSED if error.startswith(p)), "")
    return (head, _NEXT_REASON.split(error.removeprefix(head).strip())) if head else ("", [error])


def reason(error: str) -> str:
    """A subset's error with its file named once when every reason is in the same file:
    "would not run: `k.py`: name 'n' is not defined (NameError); name 'm' ..."."""
    head, clauses = _refusal(error)
    paths = {c.split(": ", 1)[0] for c in clauses}
    if not head or len(paths) != 1 or not all(": " in c for c in clauses):
        return error
    return f"{head} `{paths.pop()}`: " + "; ".join(c.split(": ", 1)[1] for c in clauses)


def reason_groups(tries: Sequence[HunkTry]) -> list[tuple[str, int]]:
    """The unresolved subsets' reasons, identical ones counted once: those of subsets that were built
    and then failed first (a crash, a wrong result: what a build cost), then those refused before
    building; most subsets first, then in the order they were first met."""
    counts = Counter(reason(t.error or "did not run") for t in tries if t.carries is None)
    return sorted(counts.items(), key=lambda kv: (kv[0].startswith(REFUSED), -kv[1]))


def single_reasons(tries: Sequence[HunkTry]) -> list[tuple[str, int]]:
    """Each reason on its own (a subset may have several), with how many refused subsets give it:
    which names tie the statements together."""
    counts: Counter[str] = Counter()
    for t in tries:
        if refused(t):
            for clause in _refusal(t.error)[1]:
                counts[clause.split(": ", 1)[-1]] += 1
    return sorted(counts.items(), key=lambda kv: -kv[1])


def counted(n: int, what: str) -> str:
    """ "1 subset", "12 subsets"."""
    return f"{n} {what}{'s' * (n != 1)}"


def group_line(error: str, n: int) -> str:
    """ "12 subsets would not run: ...": the count, then the reason as a verb when it is one."""
    verb = error.startswith(("would not", "does not", "did not", "wrong result"))
    if error.startswith("wrong result"):
        error = f"gave a {error}"
    return f"{counted(n, 'subset')}{' ' if verb else ': '}{error}"

"""A commit's diff as hunks, patches of any subset of them, and the search for the hunk of a step.

A step localized to a commit that touches ten places is only half an answer: the hunk that carries
it is what the kernel engineer reads. The parent is rebuilt with halves of the commit's hunks
applied (patched builds, cached by patch hash); the part that reproduces the step is split again,
and when no part does alone, parts are dropped one at a time (delta debugging), down to hunks that
carry the step only together.

Pure: parsing, composing and the search take text and callables; the pipeline measures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Hunk", "HunkSearch", "OutOfBudget", "chunks", "split", "patch_of", "search"]

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


@dataclass(frozen=True)
class Hunk:
    """One hunk of one file, or a whole file section that has no hunks (binary, mode, rename)."""

    path: str
    file_header: str  # "diff --git ..." up to the first "@@", newline-terminated
    header: str  # the "@@ ... @@" line ("" for a whole-file section)
    body: str  # the hunk's lines after its header, newline-terminated

    @property
    def label(self) -> str:
        return f"{self.path} {self.header.split(' @@')[0]} @@" if self.header else f"{self.path} (whole file)"

    @property
    def delta(self) -> int:
        """Lines this hunk adds minus lines it removes."""
        lines = self.body.splitlines()
        return sum(ln.startswith("+") for ln in lines) - sum(ln.startswith("-") for ln in lines)


def split(diff: str) -> tuple[Hunk, ...]:
    """The hunks of a `git diff` text, in order."""
    hunks: list[Hunk] = []
    for section in re.split(r"(?m)^(?=diff --git )", diff):
        if not section.startswith("diff --git "):
            continue
        lines = section.splitlines(keepends=True)
        first = next((i for i, ln in enumerate(lines) if ln.startswith("@@ ")), None)
        path = _path(lines)
        if first is None or any(ln.startswith("GIT binary patch") for ln in lines):
            hunks.append(Hunk(path, "".join(lines), "", ""))
            continue
        file_header = "".join(lines[:first])
        starts = [i for i in range(first, len(lines)) if lines[i].startswith("@@ ")] + [len(lines)]
        for a, b in zip(starts, starts[1:]):
            hunks.append(Hunk(path, file_header, lines[a].rstrip("\n"), "".join(lines[a + 1 : b])))
    return tuple(hunks)


def _path(lines: Sequence[str]) -> str:
    for ln in lines:
        if ln.startswith("+++ ") and not ln.startswith("+++ /dev/null"):
            return ln[4:].strip().removeprefix("b/")
        if ln.startswith("--- ") and not ln.startswith("--- /dev/null"):
            return ln[4:].strip().removeprefix("a/")
    return lines[0].split(" b/", 1)[-1].strip()


def patch_of(hunks: Sequence[Hunk]) -> str:
    """A patch applying exactly `hunks` (a subset of one commit's, in its order) to the parent.

    A hunk's new-side start line moves by what the chosen hunks before it in its file add or remove,
    so the headers are rewritten for the subset rather than left for `git apply` to guess."""
    out: list[str] = []
    current, shift = None, 0
    for h in hunks:
        if h.file_header != current:
            current, shift = h.file_header, 0
            out.append(h.file_header)
        if not h.header:
            continue
        m = _HEADER.match(h.header)
        if m is None:
            raise ValueError(f"not a hunk header: {h.header!r}")
        old_start, old_len, _, new_len, tail = m.groups()
        # git's convention: an empty side's start names the line before it
        new_start = int(old_start) + shift + (old_len == "0") - (new_len == "0")
        old = f"{old_start},{old_len}" if old_len is not None else old_start
        new = f"{new_start},{new_len}" if new_len is not None else str(new_start)
        out.append(f"@@ -{old} +{new} @@{tail}\n")
        out.append(h.body)
        shift += h.delta
    return "".join(out)


@dataclass(frozen=True)
class HunkSearch:
    """Which hunks carry a step: `found` (indices into what was searched: hunks, or groups of
    them), whether one carries it `alone` (False: `found` carries it only together), and every
    subset measured with its outcome, in order: True carries the step, False does not, None is
    unresolved (did not build, import, run or give right results: it neither carries nor clears)."""

    found: tuple[int, ...]
    alone: bool
    tried: tuple[tuple[tuple[int, ...], bool | None], ...]
    complete: bool = True  # False: stopped at the build budget; the step is within `found`

    @property
    def unresolved(self) -> tuple[tuple[int, ...], ...]:
        return tuple(s for s, ok in self.tried if ok is None)

    @property
    def shown_minimal(self) -> bool:
        """Each of `found` was shown needed: without any one of them, the rest measured and did not
        carry the step (an unresolved removal shows nothing)."""
        if len(self.found) < 2:
            return True
        outcome = dict(self.tried)
        return all(outcome.get(tuple(x for x in self.found if x != y)) is False for y in self.found)


def search(
    n_hunks: int,
    carries_many: Callable[[Sequence[tuple[int, ...]]], Sequence[bool | None]],
    budget: int | None = None,
    look_again: Callable[[Sequence[tuple[int, ...]]], Sequence[bool | None]] | None = None,
    free: Callable[[tuple[int, ...]], bool] | None = None,
) -> HunkSearch:
    """Zeller's delta debugging (ddmin) over the commit's hunks (or groups of hunks that must travel
    together, bisector/why/hunk_groups.py): keep a chunk, or drop one, while what is left still
    reproduces the step (`carries_many`: for each subset, does the parent with it applied move as
    the commit did: True, False, or None when unresolved). Only a subset that carries the step
    narrows the search; an unresolved one is neither evidence for the step nor against it
    (Zeller and Hildebrandt's '?' outcome), and the result says whether the last removals were
    resolved. Each level's chunks are asked for at once, so they are built together and measured
    side by side in one round with the parent (its drift is measured once per round, not once per
    subset). One hunk costs 2 ceil(log2 n) builds at most; hunks that only work together end as a
    set none of which can go. `budget` caps the subsets measured, and `carries_many` may raise
    OutOfBudget (its trials are spent): the search then stops at the smallest set known to carry
    the step. A subset `free` says is never built (its code would not compile or run) is not
    counted against `budget`: on a real culprit such subsets spent the budget before a single
    behaviour-changing statement was measured ("stopped early: builds"). `look_again`: the same
    question on fresh trials, asked again of the removals that read "does not carry" (`_second_looks`)."""
    tried: dict[tuple[int, ...], bool | None] = {}  # the latest outcome of each subset
    record: list[tuple[tuple[int, ...], bool | None]] = []  # every look, in the order measured
    best = tuple(range(n_hunks))  # the whole commit carries its own step

    def note(subsets: Sequence[tuple[int, ...]], outcomes: Sequence[bool | None]) -> None:
        nonlocal best
        for subset, ok in zip(subsets, outcomes):
            tried[subset] = ok
            record.append((subset, ok))
            if ok is True and len(subset) < len(best):
                best = subset

    def test(subsets: Sequence[tuple[int, ...]]) -> list[bool]:
        new = list(dict.fromkeys(s for s in subsets if s not in tried))
        if new:
            costs = [s for s in [*tried, *new] if free is None or not free(s)]
            if budget is not None and len(costs) > budget:
                raise OutOfBudget
            note(new, carries_many(new))
        return [tried[s] is True for s in subsets]

    try:
        found = _ddmin(best, test)
        if look_again is not None:
            found = _second_looks(found, look_again, tried, record, note, test)
    except OutOfBudget:
        return HunkSearch(best, False, tuple(record), complete=False)
    return HunkSearch(found, len(found) == 1, tuple(record))


def _second_looks(
    found: tuple[int, ...],
    look_again: Callable[[Sequence[tuple[int, ...]]], Sequence[bool | None]],
    tried: dict[tuple[int, ...], bool | None],
    record: list[tuple[tuple[int, ...], bool | None]],
    note: Callable[[Sequence[tuple[int, ...]], Sequence[bool | None]], None],
    test: Callable[[Sequence[tuple[int, ...]]], list[bool]],
) -> tuple[int, ...]:
    """`found` after a second look guards "only together", the one answer a single misread decides:
    with one wrong "does not carry" on a busy machine, ddmin ends at the carrying hunk and an inert
    one together (seen on 2 loaded cores: parent + the carrying hunk read +7.7% over 6 trials
    against a -25% step). Each removal that read "does not carry" is measured once more; where the
    two looks disagree a third decides, so a true "only together" and a true "alone" both need two
    misreads to come out wrong. OutOfBudget from a search again goes to the caller."""
    looked: set[tuple[int, ...]] = set()
    while len(found) >= 2:
        removals = [tuple(x for x in found if x != y) for y in found]
        doubted = [r for r in removals if tried.get(r) is False and r not in looked]
        if not doubted:
            break
        looked.update(doubted)
        try:
            second = dict(zip(doubted, look_again(doubted)))
            disputed = [r for r in doubted if second[r] is True]
            third = dict(zip(disputed, look_again(disputed))) if disputed else {}
        except OutOfBudget:
            break  # the first looks stand
        record.extend(second.items())
        tried.update((r, False) for r in doubted)  # an unresolved second look says nothing new
        note(list(third), list(third.values()))
        carrying = [r for r in disputed if tried[r] is True]
        if not carrying:
            break
        found = _ddmin(carrying[0], test)
    return found


class OutOfBudget(Exception):
    """The build or trial budget is spent."""


def chunks(cands: Sequence[int], parts: int = 2) -> list[tuple[int, ...]]:
    """`cands` cut into `parts` runs of near-equal length: ddmin's subsets at one level (with the
    default, what the search measures first)."""
    size = len(cands) / parts
    return [tuple(cands[round(i * size) : round((i + 1) * size)]) for i in range(parts)]


def _ddmin(cands: tuple[int, ...], test: Callable[[Sequence[tuple[int, ...]]], list[bool]]) -> tuple[int, ...]:
    parts = 2
    while len(cands) >= 2:
        level = chunks(cands, parts)
        kept = next((c for c, ok in zip(level, test(level)) if ok), None)
        if kept is not None:
            cands, parts = kept, 2
            continue
        if parts > 2:  # with two chunks each complement is the other chunk, already tried
            rests = [tuple(x for x in cands if x not in c) for c in level]
            rest = next((r for r, ok in zip(rests, test(rests)) if ok), None)
            if rest is not None:
                cands, parts = rest, max(parts - 1, 2)
                continue
        if parts >= len(cands):
            break
        parts = min(len(cands), 2 * parts)
    return cands

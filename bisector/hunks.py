"""A commit's diff as hunks, patches of any subset of them, and the search for the hunk of a step.

A step localized to a commit that touches ten places is only half an answer: the hunk that carries
it is what the kernel engineer reads. The parent is rebuilt with halves of the commit's hunks
applied (patched builds, cached by patch hash), and the half that reproduces the step alone is
split again. When neither half does, the step needs hunks of both (an interaction), and the search
stops there and says so.

Pure: parsing, composing and the search take text and callables; the pipeline measures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["Hunk", "HunkSearch", "split", "patch_of", "search"]

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
            hunks.append(Hunk(path, file_header, lines[a].rstrip("\n"), "".join(lines[a + 1:b])))
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
    """Which hunks carry a step: `found` (indices into the commit's hunks), whether they carry it
    `alone` (False: the smallest set tried that does; the step needs hunks from both of its halves),
    and every subset tried with its verdict, in order."""

    found: tuple[int, ...]
    alone: bool
    tried: tuple[tuple[tuple[int, ...], bool], ...]


def search(n_hunks: int, carries: Callable[[tuple[int, ...]], bool]) -> HunkSearch:
    """Halve the commit's hunks while one half alone reproduces the step (`carries`: the parent
    with that subset applied moves as the commit did). ceil(log2 n) to 2 ceil(log2 n) builds."""
    cands = tuple(range(n_hunks))
    tried: list[tuple[tuple[int, ...], bool]] = []
    if not cands:
        return HunkSearch((), False, ())
    while len(cands) > 1:
        half = len(cands) // 2
        for part in (cands[:half], cands[half:]):
            ok = carries(part)
            tried.append((part, ok))
            if ok:
                cands = part
                break
        else:  # neither half alone: the step needs hunks of both
            return HunkSearch(cands, False, tuple(tried))
    return HunkSearch(cands, True, tuple(tried))

"""Which of a culprit's files its trials loaded, and the hunks set aside because none did.

Each trial records the checkout's files its process loaded (`protocol.imported`,
benches/import_trace.py): modules imported and the files Triton compiled kernels from. A hunk in a
Python file that no trial of the culprit or of its parent loaded (a test, a benchmark script, an
unused module) cannot carry a step the trials measured: it is set aside and named, never split or
built. Other files (a C++ source compiled in, a config, documentation) are searched as before: a
trial can read them without importing them, and a doc hunk costs one build at most. On a real culprit (one kernel line, plus tests and a benchmark script)
statement-level splits of the test and benchmark files spent the build budget on subsets that did not
parse. Where a side has no trace (a store from before the trace), nothing is set aside.

Pure: trial records and hunks in, indices and paths out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from bisector.model import TrialRecord
from bisector.why.hunks import Hunk

__all__ = ["Aside", "loaded_files", "set_aside"]

# files the trials load only by importing them: a hunk there is judged by the trace
_CODE = (".py", ".pyi")


def _traced(trials: Iterable[TrialRecord]) -> set[str] | None:
    files: set[str] | None = None
    for t in trials:
        got = t.protocol.get("imported")
        if isinstance(got, list):
            files = (files or set()) | {str(p) for p in got}
    return files


def loaded_files(parent: Iterable[TrialRecord], culprit: Iterable[TrialRecord]) -> frozenset[str] | None:
    """The files either side's trials loaded (relative to the checkout); None when a side has no
    trace: then nothing can be said about what was not loaded."""
    a, b = _traced(parent), _traced(culprit)
    return None if a is None or b is None else frozenset(a | b)


def _loaded(path: str, files: frozenset[str]) -> bool:
    """A hunk's path was loaded: recorded as is, or installed under a prefix (`pkg/mod.py` for
    `src/pkg/mod.py`)."""
    return path in files or any(path.endswith("/" + f) for f in files)


@dataclass(frozen=True)
class Aside:
    """The hunks kept for the search (indices into the commit's hunks) and the files set aside."""

    kept: tuple[int, ...]
    files: tuple[str, ...]  # paths of files no trial loaded, in commit order
    hunks: int  # hunks in them


def set_aside(parts: Sequence[Hunk], files: frozenset[str] | None) -> Aside:
    """Hunks of Python files no trial loaded set aside; every hunk kept when there is no trace, or
    when nothing would be left to search."""
    everything = Aside(tuple(range(len(parts))), (), 0)
    if files is None:
        return everything
    out = [i for i, h in enumerate(parts) if h.path.endswith(_CODE) and not _loaded(h.path, files)]
    kept = tuple(i for i in range(len(parts)) if i not in out)
    if not out or not kept:
        return everything
    return Aside(kept, tuple(dict.fromkeys(parts[i].path for i in out)), len(out))

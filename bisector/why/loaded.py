"""Which of a culprit's files its trials loaded, and the hunks set aside because none did.

Each trial records the checkout's files its process loaded (`protocol.imported`,
benches/import_trace.py): modules imported and the files Triton compiled kernels from. A hunk in a
Python file that no trial of the culprit or of its parent loaded (a test, a benchmark script, an
unused module) cannot carry a step the trials measured: it is set aside and named, never split or
built. A data file of a benchmark or test directory (a results table) is set aside with or without a
trace: no trial reads it as code, yet a real culprit's three hunks of one were searched as units.
Other files are judged by where they lie: a C++ source or build file compiled in, or a file beside
modules the trials loaded (a package's own data), are searched as before; one in a directory where
no trial loaded anything is set aside. A doc hunk at the top costs one build at most. On a real culprit
(one kernel line, plus tests and a benchmark script)
statement-level splits of the test and benchmark files spent the build budget on subsets that did not
parse. Where a side has no trace (a store from before the trace), only data files are set aside.

Pure: trial records and hunks in, indices and paths out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bisector.model import TrialRecord
from bisector.why.hunks import Hunk

__all__ = ["Aside", "loaded_files", "set_aside"]

# files the trials load only by importing them: a hunk there is judged by the trace
_CODE = (".py", ".pyi")
# sources and build files of a compiled extension: a trial runs them without the trace naming them
_BUILT = (
    ".c",
    ".cc",
    ".cpp",
    ".cxx",
    ".cu",
    ".cuh",
    ".h",
    ".hh",
    ".hpp",
    ".hxx",
    ".hip",
    ".inc",
    ".inl",
    ".cl",
    ".mlir",
    ".td",
    ".ptx",
    ".cmake",
    ".toml",
    ".cfg",
    ".in",
    ".txt",
    ".sh",
)
_BUILD_NAMES = ("Makefile", "CMakeLists.txt", "setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in")
# data no trial reads as code, in directories of benchmarks and tests (a results table, fixtures)
_DATA = (".csv", ".tsv", ".json", ".jsonl", ".parquet", ".npy", ".npz", ".pkl", ".png", ".svg", ".log")
_DATA_DIRS = {"benchmark", "benchmarks", "bench", "benches", "test", "tests", "testing"}


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


def _data(path: str) -> bool:
    """A data file of a benchmark or test directory (`benchmark/data/all_benchmark_data.csv`)."""
    *dirs, name = path.split("/")
    return name.lower().endswith(_DATA) and bool(_DATA_DIRS & {d.lower() for d in dirs})


def _unread(path: str, files: frozenset[str]) -> bool:
    """No trial could have read the file: a Python file it did not load, or another file that is
    not an extension's source or build file, in a directory where no trial loaded anything (a
    package's own data beside its loaded modules is kept: it may be opened, not imported)."""
    if path.endswith(_CODE):
        return not _loaded(path, files)
    if path.endswith(_BUILT) or path.rsplit("/", 1)[-1] in _BUILD_NAMES:
        return False
    if "/" not in path:
        return False  # at the top (a README, a config): a doc hunk costs one build at most
    parts = path.split("/")[:-1]
    tails = ["/".join(parts[k:]) for k in range(len(parts))]  # as is, or installed under a prefix
    dirs = {f.rsplit("/", 1)[0] for f in files if "/" in f}
    return not any(d == t or d.startswith(t + "/") for d in dirs for t in tails)


def set_aside(parts: Sequence[Hunk], files: frozenset[str] | None) -> Aside:
    """Hunks no trial reads set aside: data files of benchmark and test directories always, and,
    where a trace exists, files no trial loaded (`_unread`); every hunk kept when nothing would be
    left to search."""
    everything = Aside(tuple(range(len(parts))), (), 0)
    out = [i for i, h in enumerate(parts) if _data(h.path) or (files is not None and _unread(h.path, files))]
    kept = tuple(i for i in range(len(parts)) if i not in out)
    if not out or not kept:
        return everything
    return Aside(kept, tuple(dict.fromkeys(parts[i].path for i in out)), len(out))

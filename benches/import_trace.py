"""Which files of the checkout this trial process loaded: every imported module's `__file__` under
one of the spec's source dirs, and the Python files Triton compiled kernels from (the locations in
the JIT cache's TTIR/TTGIR).

The hunk search (bisector/why/culprit_hunks.py) sets aside the hunks of files no trial of a culprit
or its parent loaded: a test or a benchmark script the trial never imports cannot carry a step,
and split into statements it only costs builds. Paths are relative to their source dir (under a
pip prefix, to its site-packages), so nothing of this machine is recorded. Runs inside the trial
process: imports nothing from `bisector`.
"""

from __future__ import annotations

import gzip
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from benches import env_preload

__all__ = ["ImportTrace", "loaded_files", "kernel_sources"]

# `loc("/path/file.py":12:0)` in Triton's MLIR: the file a kernel's code came from
_LOC = re.compile(r'loc\("([^"]+\.py)":\d+')
_LEVELS = (".ttir", ".ttgir", ".ttir.gz", ".ttgir.gz")
_CACHE_ENV = "TRITON_CACHE_DIR"


def _relative(path: str, roots: Sequence[Path]) -> str | None:
    """`path` relative to the first root holding it (after site-packages, when under one); None
    when no root does, or when the path is relative (a module that names no real file: resolved
    against the working directory it would seem to lie in the checkout)."""
    if not os.path.isabs(path):
        return None
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):
        return None
    for root in roots:
        try:
            rel = real.relative_to(root).as_posix()
        except ValueError:
            continue
        return rel.split("site-packages/", 1)[-1]
    return None


def _module_items() -> dict[str, str]:
    """Module name -> its `__file__` (a compiled cache's pointing at its source), for those with one."""
    out = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if isinstance(name, str) and isinstance(path, str) and path:
            out[name] = path[:-1] if path.endswith(".pyc") else path
    return out


def _read(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode(errors="replace")


def _kernel_files(cache_dir: str | None) -> list[Path]:
    """The TTIR/TTGIR files in a Triton JIT cache dir."""
    if not cache_dir or not os.path.isdir(cache_dir):
        return []
    return [Path(d) / name for d, _, names in os.walk(cache_dir) for name in names if name.endswith(_LEVELS)]


def _locations(files: Iterable[Path]) -> set[str]:
    found: set[str] = set()
    for path in files:
        try:
            found.update(_LOC.findall(_read(path)))
        except (OSError, EOFError, ValueError):
            continue
    return found


def kernel_sources(cache_dir: str | None) -> list[str]:
    """The Python files the kernels in a Triton JIT cache dir were compiled from."""
    return sorted(_locations(_kernel_files(cache_dir)))


class ImportTrace:
    """`loaded_files` in two looks: one in the trial's setup, off the device, and one after its
    device section that reads only the modules and kernel files that are new since. Why: the whole
    look after the release took 0.22-0.47 s a trial on the real libraries (their JIT cache dirs
    hold many kernels, each read and unzipped), and the next trial waits for this process to end
    (bisector/runner/executor.py TEARDOWN_GRACE_S): more device time than the timed work."""

    def __init__(self, source_dirs: Iterable[str], cache_dir: str | None = None) -> None:
        self.roots = [Path(d).resolve() for d in source_dirs if d]
        self.cache = cache_dir if cache_dir is not None else os.environ.get(_CACHE_ENV)
        self._before = set(sys.modules)  # what the process had imported when the trace began (its preload)
        self._modules: set[str] = set()
        self._kernel_files: set[Path] = set()
        self.files: set[str] = set()
        self._env_roots = env_preload.env_roots()
        self.env_modules: set[str] = set()  # imported since it began, from the interpreter's install dirs

    def look(self) -> list[str]:
        """The checkout's files loaded so far, relative to their source dir, sorted."""
        modules = {n: p for n, p in _module_items().items() if n not in self._modules}
        kernels = set(_kernel_files(self.cache)) - self._kernel_files
        self._modules |= set(modules)
        self._kernel_files |= kernels
        for name, path in modules.items():
            if (rel := _relative(path, self.roots)) is not None:
                self.files.add(rel)
            elif name not in self._before and os.path.isabs(path) and env_preload.under(path, self._env_roots):
                self.env_modules.add(name)
        for path in _locations(sorted(kernels)):
            if (rel := _relative(path, self.roots)) is not None:
                self.files.add(rel)
        return sorted(self.files)


def loaded_files(source_dirs: Iterable[str], cache_dir: str | None = None) -> list[str]:
    """The checkout's files this process loaded, relative to their source dir, sorted."""
    return ImportTrace(source_dirs, cache_dir).look()

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

__all__ = ["loaded_files", "module_files", "kernel_sources"]

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


def module_files() -> list[str]:
    """The `__file__` of every module imported so far (compiled caches pointing at their source)."""
    out = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path:
            out.append(path[:-1] if path.endswith(".pyc") else path)
    return out


def _read(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode(errors="replace")


def kernel_sources(cache_dir: str | None) -> list[str]:
    """The Python files the kernels in a Triton JIT cache dir were compiled from."""
    if not cache_dir or not os.path.isdir(cache_dir):
        return []
    found: set[str] = set()
    for dirpath, _, names in os.walk(cache_dir):
        for name in names:
            if name.endswith(_LEVELS):
                try:
                    found.update(_LOC.findall(_read(Path(dirpath) / name)))
                except (OSError, EOFError, ValueError):
                    continue
    return sorted(found)


def loaded_files(source_dirs: Iterable[str], cache_dir: str | None = None) -> list[str]:
    """The checkout's files this process loaded, relative to their source dir, sorted."""
    roots = [Path(d).resolve() for d in source_dirs if d]
    if not roots:
        return []
    cache = cache_dir if cache_dir is not None else os.environ.get(_CACHE_ENV)
    paths = module_files() + kernel_sources(cache)
    return sorted({rel for p in paths if (rel := _relative(p, roots)) is not None})

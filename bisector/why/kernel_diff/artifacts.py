"""A JIT cache's compiled kernels: found, read, and kept next to the report.

Triton writes one directory per compiled kernel variant, `<cache>/<hash>/<name>.json` beside the
IR of every stage (`.ttir`, `.ttgir`, `.llir`, then `.ptx` and `.cubin`, or `.amdgcn` and `.hsaco`).
Each commit's trials compile into the commit's own cache (bisector/runner/env.py `jit_dir`), which
the next run of the same commit empties. So the pipeline keeps a copy of the caches of every
verified step's parent and culprit in the report directory (`kernels/<sha12>/`): the text stages
gzipped, the binaries replaced by what the tools say about them (bisector/why/kernel_diff/resources.py).
An offline re-make of the report reads those copies; a report directory moved elsewhere keeps them.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from bisector import portable
from bisector.isolation.safe_fs import is_real_dir, read_regular
from bisector.why.kernel_diff import resources

__all__ = ["LEVELS", "Kernel", "find_kernels", "keep", "read_text", "other_files"]

#: IR levels in compile order; a change is reported at the first one that differs
LEVELS = ("ttir", "ttgir", "llir", "ptx", "amdgcn")
_TEXT = (*LEVELS, "json")
_BINARY = ("cubin", "hsaco")
CUOBJDUMP = "cuobjdump.txt"  # suffixes of the kept tool outputs
PTXAS = "ptxas.txt"


def _regular(path: Path) -> bool:
    """A regular file itself, not a link: a JIT dir is written by trials, and a link planted there
    (to an ancestor's environ, say) would carry what it points at into the report."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_text(path: Path) -> str | None:
    """The file, or its gzipped copy (`<path>.gz`), as text; None when neither exists (or either
    is not a regular file: bisector/isolation/safe_fs.py)."""
    data = read_regular(path)
    if data is not None:
        return data.decode(errors="replace")
    packed = read_regular(path.with_name(path.name + ".gz"))
    if packed is not None:
        try:
            return gzip.decompress(packed).decode(errors="replace")
        except (OSError, EOFError):
            return None
    return None


@dataclass(frozen=True)
class Kernel:
    """One compiled variant of a kernel: the directory holding its stages and its metadata."""

    name: str
    directory: Path
    metadata: Mapping[str, object]

    def text(self, level: str) -> str | None:
        return read_text(self.directory / f"{self.name}.{level}")

    def levels(self) -> tuple[str, ...]:
        return tuple(lv for lv in LEVELS if self._has(lv))

    def _has(self, ext: str) -> bool:
        base = self.directory / f"{self.name}.{ext}"
        return _regular(base) or _regular(base.with_name(base.name + ".gz"))

    def tool_output(self, suffix: str) -> str | None:
        return read_text(self.directory / f"{self.name}.{suffix}")


def _metadata_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.json*")):
        name = path.name.removesuffix(".gz")
        if name.endswith(".json") and not name.startswith("__grp__"):
            yield path


def find_kernels(root: Path) -> tuple[Kernel, ...]:
    """Every kernel variant under `root` (a JIT dir or its kept copy), in path order; none where
    `root` is a link (rglob below follows no link to a dir)."""
    if not is_real_dir(root):
        return ()
    out = []
    for meta_path in _metadata_files(root):
        stem = meta_path.name.removesuffix(".gz").removesuffix(".json")
        text = read_text(meta_path.with_name(stem + ".json"))
        try:
            meta = json.loads(text) if text else None
        except json.JSONDecodeError:
            continue
        if not isinstance(meta, dict):
            continue
        kernel = Kernel(str(meta.get("name", stem)), meta_path.parent, meta)
        if kernel.name == stem and kernel.levels():
            out.append(kernel)
    return tuple(out)


def other_files(root: Path) -> int:
    """Files under `root` that no kernel claims (a JIT cache of a format not read here)."""
    if not is_real_dir(root):
        return 0
    claimed = {k.directory for k in find_kernels(root)}
    return sum(1 for p in root.rglob("*") if _regular(p) and p.parent not in claimed)


def keep(src: Path, dest: Path) -> int:
    """Copy the kernels under `src` to `dest` (same relative layout): text stages gzipped, and the
    tools' view of each binary as text. Returns the kernels kept; `dest` is replaced as a whole, so
    a re-run keeps exactly what the cache now holds."""
    kernels = find_kernels(src)
    if not kernels:
        return 0
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    # the IR's locations name the commit's worktree: written from the work dir (<work>/jit/<sha>)
    where = portable.roots(src.resolve().parents[1]) if len(src.resolve().parents) > 1 else portable.roots()
    for kernel in kernels:
        out = tmp / kernel.directory.relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for ext in _TEXT:
            text = read_text(kernel.directory / f"{kernel.name}.{ext}")
            if text is not None:
                _write_gz(out / f"{kernel.name}.{ext}.gz", portable.scrub(text, where))
        _describe_binaries(kernel, out)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return len(kernels)


def _write_gz(path: Path, text: str) -> None:
    """gzip without a timestamp or name in the header: the same text gives the same bytes."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as f:
        f.write(text.encode())


def _describe_binaries(kernel: Kernel, out: Path) -> None:
    """What cuobjdump and ptxas say of an NVIDIA kernel, kept as their own text (nothing without the tools)."""
    cubin = kernel.directory / f"{kernel.name}.cubin"
    if _regular(cubin):
        text = resources.run_cuobjdump(cubin)
        if text:
            (out / f"{kernel.name}.{CUOBJDUMP}").write_text(text)
    ptx = kernel.directory / f"{kernel.name}.ptx"
    target = re.search(r"^\s*\.target\s+(sm_\w+)", read_text(ptx) or "", re.M)
    if target and _regular(ptx):  # the PTX's own target (sm_90a for wgmma): ptxas refuses a lesser one
        text = resources.run_ptxas(ptx, target.group(1))
        if text:  # without the compile time, which differs from run to run
            text = "".join(ln for ln in text.splitlines(keepends=True) if "Compile time" not in ln)
            (out / f"{kernel.name}.{PTXAS}").write_text(text)

"""The instrument the trial runs: a read-only copy of `benches` alone, never the bot's checkout.

The trial used to get the bot's checkout on its PYTHONPATH (for `benches`), and with it the bot's
own package: code under test could import `bisector`, find its files and append to one that the
bot imports later, with the token in memory. Here the trial's path holds a snapshot of the
`benches` package (content-addressed in the user's cache, byte-compiled, files read-only; each run
checks its sources against the bot's before using it), and every PYTHONPATH entry that would show
the bot's package is dropped.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import platformdirs

SKIP_DIRS = {"__pycache__", "results"}
# One bot asks from several threads at once (the executor and the warmer open their workers
# together): they share one copy, made once. The copy's temporary dir is unique per call, so that
# two bots (processes) making it side by side never delete each other's files.
_MAKING = threading.Lock()


def _files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath) / name


def benches_package() -> Path:
    """The `benches` package this bot ships."""
    import benches

    return Path(next(iter(benches.__path__))).resolve()


def snapshot(cache: Path | None = None) -> Path:
    """<cache>/instrument/<digest> (default: the user's cache dir): a dir holding only a read-only
    copy of `benches`, made once per content, for the trial's PYTHONPATH."""
    source = benches_package()
    files = {path.relative_to(source): path.read_bytes() for path in _files(source)}
    digest = hashlib.sha256()
    for rel, data in files.items():
        digest.update(str(rel).encode() + b"\0" + data + b"\0")
    base = Path(cache) if cache is not None else Path(platformdirs.user_cache_dir("bisector"))
    root = base.resolve() / "instrument" / digest.hexdigest()[:16]
    with _MAKING:
        if (root / ".complete").exists() and all(_same(root / "benches" / rel, data) for rel, data in files.items()):
            return root
        if root.exists():  # incomplete, or changed since it was made: made again
            _writable(root)
            shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=root.name + ".tmp-", dir=root.parent))
        for rel, data in files.items():
            dest = tmp / "benches" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        compileall.compile_dir(tmp / "benches", quiet=1, workers=1)
        for dirpath, _, filenames in os.walk(tmp):
            for name in filenames:
                os.chmod(Path(dirpath) / name, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        (tmp / ".complete").write_text("")
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would keep a sandboxed trial of another uid out
        try:
            os.replace(tmp, root)
        except OSError:  # another bot made it first
            _writable(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        return root


def _same(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def _writable(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            os.chmod(Path(dirpath) / name, stat.S_IRUSR | stat.S_IWUSR)


def bot_roots() -> set[str]:
    """Dirs that hold the `bisector` package this bot runs, or an installed copy of it."""
    import bisector

    roots = {os.path.dirname(os.path.dirname(os.path.abspath(bisector.__file__)))}
    roots |= {os.path.dirname(p) for p in installed_package_dirs()}
    return roots


def installed_package_dirs() -> list[str]:
    """The `bisector` package dir of this bot and of an editable install (its direct_url.json)."""
    import json
    from importlib import metadata

    import bisector

    dirs = [os.path.dirname(os.path.abspath(bisector.__file__))]
    try:
        url = json.loads(metadata.distribution("bisector").read_text("direct_url.json") or "{}").get("url", "")
    except (metadata.PackageNotFoundError, ValueError):
        url = ""
    if url.startswith("file://") and os.path.isdir(os.path.join(url[7:], "bisector")):
        dirs.append(os.path.realpath(os.path.join(url[7:], "bisector")))
    return sorted(set(dirs))


def without_bot(pythonpath: str) -> str:
    """`pythonpath` less every entry from which `import bisector` would find the bot."""
    roots = {os.path.realpath(r) for r in bot_roots()}
    kept = [p for p in pythonpath.split(os.pathsep) if p and os.path.realpath(p) not in roots]
    return os.pathsep.join(kept)


__all__ = ["snapshot", "without_bot", "installed_package_dirs", "bot_roots"]

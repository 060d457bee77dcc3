"""Which store `bisector store info` / `store export` read when `--store` is not given.

After `bisector demo` the trials are in `bisector-demo/results.sqlite`, not in the user cache
dir, and `store info` looked in the cache and found nothing. So `run` and `demo` record the store
they use in the user cache dir, and the readers look, in order, at: `$BISECTOR_STORE`, the store
the last `run` or `demo` used, `./bisector-demo/results.sqlite`, the user cache dir's store. They
say which one they read, or everywhere they looked.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from bisector.paths import absolute
from bisector.store import MissingStore, default_path

DEMO_STORE = Path("bisector-demo") / "results.sqlite"


def record_file() -> Path:
    return Path(platformdirs.user_cache_dir("bisector")) / "last-store"


def remember(store: str | os.PathLike[str]) -> None:
    """Note the store a command is about to use; a cache dir that cannot be written is no error."""
    try:
        record_file().parent.mkdir(parents=True, exist_ok=True)
        record_file().write_text(absolute(store) + "\n", encoding="utf-8")
    except OSError:
        pass


def recorded() -> Path | None:
    try:
        text = record_file().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(text) if text else None


def find() -> tuple[Path, str]:
    """The store to read and why that one; MissingStore (exit 2) naming every place looked at."""
    env = os.environ.get("BISECTOR_STORE")
    if env:
        return Path(absolute(env)), "$BISECTOR_STORE"
    last = recorded()
    looked = []
    for path, why in (
        (last, "the store the last `bisector run` or `demo` used"),
        (Path(absolute(DEMO_STORE)), "the demo's store in the current directory"),
        (Path(absolute(default_path())), "the user cache dir's store"),
    ):
        if path is None:
            looked.append(f"no store recorded in {record_file()}")
            continue
        if path.is_file():
            return path, why
        looked.append(str(path))
    raise MissingStore("no store found; looked at " + ", ".join(looked) + " (pass --store)")

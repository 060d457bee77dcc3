"""The vendored descriptions of real upstream ranges (`benches/real/<lib>/range.toml`).

A description says where a public library's range is (its upstream, the good and bad commits), which
config measures it, and which real steps were found in it by hand and how they were confirmed: the
culprit, the sign and size of the step per shape, the files and lines a reader would fix. The study
(`studies/real_ranges.py`) runs the bot over each range and holds its answer against this; the CPU
tests check that the range resolves, builds and plans hunks on a copy of the upstream.

Read here with `tomllib` only: `benches` imports nothing of `bisector`. A bad file raises
`DescriptionError` whose message is one line, `<file>: <key>: <problem>`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RANGES_DIR = Path(__file__).resolve().parent
SHA = re.compile(r"[0-9a-f]{40}")
KINDS = ("regression", "improvement")
STATUSES = ("confirmed", "candidate")


class DescriptionError(ValueError):
    """A range description that does not hold: the message names the file and the key."""


@dataclass(frozen=True)
class Step:
    culprit: str
    title: str
    kind: str  # "regression" | "improvement"
    shapes: dict[str, float]  # shape key -> expected change of the subject's time, e.g. -0.12 = 12% faster
    files: tuple[str, ...]  # the files of the culprit's diff that carry the step
    lines: str  # the lines a reader would fix, in words
    threaded: bool  # the step rides on a threaded argument or a signature change
    confirmed: str  # how it was confirmed: the do_bench figures at both ends
    status: str = "confirmed"  # "confirmed" (measured here at both ends) | "candidate" (not yet measured here)
    # The hunk search's expected plan (optional): the checkout's files a trial of the step loads (its
    # import trace), the hunks then searched (labels: path and header) and the files set aside.
    loaded: tuple[str, ...] = ()
    searched: tuple[str, ...] = ()
    aside: tuple[str, ...] = ()


@dataclass(frozen=True)
class RangeDescription:
    path: Path
    lib: str
    upstream: str  # "owner/name" on GitHub
    url: str
    config: Path
    good: str
    bad: str
    commits: int  # first-parent commits from good to bad, both included
    steps: tuple[Step, ...]

    @property
    def culprits(self) -> tuple[str, ...]:
        return tuple(s.culprit for s in self.steps)


def _get(path: Path, data: dict[str, Any], key: str, kind: type, where: str = "") -> Any:
    name = f"{where}{key}"
    if key not in data:
        raise DescriptionError(f"{path}: {name}: missing")
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DescriptionError(f"{path}: {name}: must be {kind.__name__}, got {value!r}"[:300])
    return value


def _sha(path: Path, data: dict[str, Any], key: str, where: str = "") -> str:
    value = _get(path, data, key, str, where)
    if not SHA.fullmatch(value):
        raise DescriptionError(f"{path}: {where}{key}: must be a full 40-hex commit id, got {value!r}")
    return value


def _step(path: Path, data: Any, where: str) -> Step:
    if not isinstance(data, dict):
        raise DescriptionError(f"{path}: {where.rstrip('.')}: must be a table")
    known = {
        "culprit",
        "title",
        "kind",
        "shapes",
        "files",
        "lines",
        "threaded",
        "confirmed",
        "status",
        "loaded",
        "searched",
        "aside",
    }
    extra = sorted(set(data) - known)
    if extra:
        raise DescriptionError(f"{path}: {where}{extra[0]}: unknown key (known: {', '.join(sorted(known))})")
    kind = _get(path, data, "kind", str, where)
    if kind not in KINDS:
        raise DescriptionError(f"{path}: {where}kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    shapes = _get(path, data, "shapes", dict, where)
    for key, value in shapes.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DescriptionError(f"{path}: {where}shapes.{key}: must be a number (the change of the time)")
        if (value < 0) != (kind == "improvement"):
            raise DescriptionError(
                f"{path}: {where}shapes.{key}: {value} does not match kind {kind!r} (a time change: negative is faster)"
            )
    status = data.get("status", "confirmed")
    if status not in STATUSES:
        raise DescriptionError(f"{path}: {where}status: must be one of {', '.join(STATUSES)}, got {status!r}")
    files = _get(path, data, "files", list, where)
    if not files or not all(isinstance(f, str) and f for f in files):
        raise DescriptionError(f"{path}: {where}files: must be a non-empty list of paths")
    plan = {}
    for key in ("loaded", "searched", "aside"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise DescriptionError(f"{path}: {where}{key}: must be a list of non-empty strings")
        plan[key] = tuple(value)
    return Step(
        _sha(path, data, "culprit", where),
        _get(path, data, "title", str, where),
        kind,
        {k: float(v) for k, v in shapes.items()},
        tuple(files),
        _get(path, data, "lines", str, where),
        bool(data.get("threaded", False)),
        _get(path, data, "confirmed", str, where),
        status,
        **plan,
    )


def load(path: Path) -> RangeDescription:
    """Read and check one description."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DescriptionError(f"{path}: cannot read: {type(exc).__name__}: {exc}"[:300]) from None
    known = {"lib", "upstream", "url", "config", "good", "bad", "commits", "steps"}
    extra = sorted(set(data) - known)
    if extra:
        raise DescriptionError(f"{path}: {extra[0]}: unknown key (known: {', '.join(sorted(known))})")
    config = path.parent / _get(path, data, "config", str)
    if not config.is_file():
        raise DescriptionError(f"{path}: config: no file {config}")
    steps = _get(path, data, "steps", list)
    if not steps:
        raise DescriptionError(f"{path}: steps: must list at least one confirmed step")
    upstream = _get(path, data, "upstream", str)
    if upstream.count("/") != 1:
        raise DescriptionError(f"{path}: upstream: must be 'owner/name', got {upstream!r}")
    commits = _get(path, data, "commits", int)
    if commits < 2:
        raise DescriptionError(f"{path}: commits: must be at least 2, got {commits}")
    return RangeDescription(
        path,
        _get(path, data, "lib", str),
        upstream,
        _get(path, data, "url", str),
        config,
        _sha(path, data, "good"),
        _sha(path, data, "bad"),
        commits,
        tuple(_step(path, s, f"steps[{i}].") for i, s in enumerate(steps)),
    )


def load_all(root: Path = RANGES_DIR) -> list[RangeDescription]:
    """Every `<lib>/range.toml` under `root`, in name order."""
    return [load(p) for p in sorted(Path(root).glob("*/range.toml"))]

"""Triton's autotune choices across a step: which config each commit's autotuner chose, per kernel and
tuning key, and how long it timed. A changed choice is a cause the IR alone does not show: the
cache holds every config the autotuner compiled, not which one it launched.

Where they come from: with the choices kept per commit (`Config.keeps_autotune`), Triton writes
`<kernel>.autotune.json` into the commit's JIT cache dir: the tuning key and every config's timing.
They are read from there as the kernels are kept (collect.keep_commit), through the readers that
follow no link (a JIT dir is written by trials), reduced to what is shown, and kept next to the
report's kernels (`KEPT`), which the comparison and an offline re-make read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bisector.isolation.safe_fs import is_real_dir
from bisector.why.kernel_diff.artifacts import read_text
from bisector.why.kernel_diff.signature import LAUNCH_OPTIONS

__all__ = ["Choice", "ChoiceChange", "read_dir", "keep", "kept", "compare", "SUFFIX", "KEPT"]

SUFFIX = ".autotune.json"  # Triton's name for a kernel's kept choices
KEPT = "autotune-choices.json"  # the kept copy beside a commit's kernels in the report
MAX_FILES = 512  # choices read from one JIT dir at most (a trial writes that dir)


@dataclass(frozen=True)
class Choice:
    """One kernel's autotuner choice for one tuning key (its size arguments and dtypes)."""

    kernel: str
    key: str  # the tuning key as Triton wrote it
    chosen: str  # "BLOCK=128, num_warps=8, num_stages=3"
    ms: float | None  # the chosen config's timing (Triton's first measured value)
    configs: int  # configs the autotuner timed


@dataclass(frozen=True)
class ChoiceChange:
    """A kernel and tuning key across a step: the parent's choice and the culprit's (None: not tuned there)."""

    kernel: str
    key: str
    before: Choice | None
    after: Choice | None

    @property
    def changed(self) -> bool:
        return (self.before.chosen if self.before else None) != (self.after.chosen if self.after else None)


def _config_text(config: Mapping[str, object]) -> str:
    kwargs = config.get("kwargs")
    parts = [f"{k}={v}" for k, v in sorted(kwargs.items())] if isinstance(kwargs, dict) else []
    shown = [k for k in LAUNCH_OPTIONS if config.get(k) is not None and not (k == "num_ctas" and config[k] == 1)]
    parts += [f"{k}={config[k]}" for k in shown]
    return ", ".join(parts)


def _first(timing: object) -> float | None:
    """Triton's timing of a config: a number, or its measured quantiles (the first is the median)."""
    value = timing[0] if isinstance(timing, list) and timing else timing
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def parse(kernel: str, text: str) -> Choice | None:
    """One `<kernel>.autotune.json`; None where it is not what Triton writes."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    timed = data.get("configs_timings") if isinstance(data, dict) else None
    if not isinstance(timed, list):
        return None
    pairs = [
        (c, t)
        for item in timed
        if isinstance(item, list)
        and len(item) == 2
        and isinstance(c := item[0], dict)
        and (t := _first(item[1])) is not None
    ]
    if not pairs:
        return None
    best, ms = min(pairs, key=lambda p: p[1])
    return Choice(kernel, json.dumps(data.get("key"))[:200], _config_text(best)[:300], ms, len(pairs))


def read_dir(root: Path) -> tuple[Choice, ...]:
    """The choices kept in a JIT cache dir, by kernel and key; none where `root` is a link."""
    if not is_real_dir(root):
        return ()
    found: list[Choice] = []
    for path in sorted(root.rglob(f"*{SUFFIX}"))[:MAX_FILES]:
        text = read_text(path)
        choice = parse(path.name.removesuffix(SUFFIX), text) if text else None
        if choice is not None:
            found.append(choice)
    return tuple(sorted(found, key=lambda c: (c.kernel, c.key)))


def keep(src: Path, dest: Path) -> int:
    """The choices of JIT dir `src` written to `dest`/KEPT (a commit's kept kernels dir); how many."""
    choices = read_dir(src)
    if choices:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / KEPT).write_text(json.dumps([asdict(c) for c in choices], indent=1))
    return len(choices)


def kept(dest: Path) -> tuple[Choice, ...]:
    """The choices kept beside a commit's kernels in the report (none kept: empty)."""
    text = read_text(dest / KEPT)
    try:
        rows = json.loads(text) if text else []
        return tuple(Choice(**row) for row in rows)
    except (json.JSONDecodeError, TypeError):
        return ()


def compare(before: Sequence[Choice], after: Sequence[Choice]) -> tuple[ChoiceChange, ...]:
    """Each kernel and key either side tuned, changed choices first."""
    b = {(c.kernel, c.key): c for c in before}
    a = {(c.kernel, c.key): c for c in after}
    out = [ChoiceChange(k, key, b.get((k, key)), a.get((k, key))) for k, key in sorted(b.keys() | a.keys())]
    return tuple(sorted(out, key=lambda c: not c.changed))

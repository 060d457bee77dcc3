"""Config + BuildResult + suite -> the trial spec JSON of docs/CONTRACTS.md. Pure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bisector.config import Config
from bisector.config.subjects import Subject
from bisector.errors import BadInput
from bisector.model import BuildResult, Shape, for_shape


def shape_spec(shape: Shape) -> dict[str, Any]:
    params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in shape.params}  # tile, varlen, groups
    return {"key": shape.key, "suite": shape.suite, "name": shape.name, "params": params}


def source_dirs(build: BuildResult) -> list[str]:
    """The commit's source dir first, then its pip prefix (site-packages) when it has one."""
    dirs = [build.source_dir]
    if build.prefix:
        dirs.append(build.prefix)
    return [str(Path(d).resolve()) for d in dirs]


def build_spec(
    config: Config, build: BuildResult, suite: str | None, *, seed: int, shapes: tuple[Shape, ...] | None = None
) -> dict[str, Any]:
    """The trial's spec; `suite=None` measures every suite of `shapes` in one process."""
    if suite is not None and suite not in config.subjects:
        raise BadInput(f"{config.path}: subject.{suite}: no subject for suite {suite!r}")
    chosen = [s for s in (shapes if shapes is not None else config.shapes) if suite in (None, s.suite)]
    if not chosen:
        raise BadInput(f"{config.path}: suites.{suite}: no shapes")
    subjects = {s.suite: config.subjects[s.suite] for s in chosen}
    tolerances = {k: list(v) for k, v in config.thresholds.tolerances.items()}
    spec: dict[str, Any] = {
        "sha": build.sha,
        "suite": suite if suite is not None else ",".join(subjects),
        "shapes": [shape_spec(s) for s in chosen],
        "subjects": {name: subject_spec(sub) for name, sub in subjects.items()},
        "control": config.control,
        "device": config.device,
        "source_dirs": source_dirs(build),
        "reps": config.protocol.reps,
        "warmup": config.protocol.warmup,
        "graph_reads": {
            s.key: for_shape(s.key, config.protocol.graph_reads, config.protocol.graph_reads_by) for s in chosen
        },
        "graph_heat_ms": {
            s.key: for_shape(s.key, config.protocol.graph_heat_ms, config.protocol.graph_heat_ms_by) for s in chosen
        },
        "settle_ms": {s.key: for_shape(s.key, config.protocol.settle_ms, config.protocol.settle_ms_by) for s in chosen},
        "flush_mb": config.protocol.flush_mb,
        "cpu_clock": config.protocol.cpu_clock,
        "seed": seed,
        "tolerances": tolerances,
        "timing": {name: config.thresholds.timing_of(name) for name in subjects},
    }
    modules = {
        name: {"module": m.module, "path": m.path} for name, m in config.suite_modules.items() if name in subjects
    }
    if modules:  # only when there are: the spec of a config without brought suites is as it was
        spec["suite_modules"] = modules
    if any(name in config.caches for name in subjects):  # suites timed warm too (config/warm_cache_key.py)
        spec["cache"] = {name: config.caches[name] for name in subjects if name in config.caches}
    return spec


def subject_spec(sub: Subject) -> dict[str, Any]:
    """A subject as the trial reads it; the mapping and the pytest tests only when given."""
    out: dict[str, Any] = {
        "entry": sub.entry,
        "adapter": sub.adapter,
        "layout": sub.layout,
        "options": dict(sub.options),
    }
    if sub.args or sub.kwargs:
        out.update(args=list(sub.args), kwargs=dict(sub.kwargs))
    if sub.pytest:
        out["pytest"] = list(sub.pytest)
    return out


def benches_root() -> str:
    """The directory holding the `benches` package, so the child imports this very copy."""
    import benches

    return os.path.dirname(os.path.abspath(next(iter(benches.__path__))))

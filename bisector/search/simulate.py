"""A step model over a real commit list, and a simulated probe that the search cannot tell apart.

The model file (TOML):

    [shapes]                      # TFLOP/s at GOOD, one entry per shape
    fa_s4096 = 480.0
    [[steps]]                     # each step multiplies the named shapes from that commit on
    commit = "1a2b3c4d"           # any unambiguous SHA prefix within the range
    factors = { fa_s4096 = 0.95 }
    [[fails]]                     # optional: commits that do not build (SKIP)
    commit = "5e6f7a8b"

A simulated trial is the shape's TFLOP/s at that commit divided by its TFLOP/s at GOOD (the product
of the factors of the steps at or before the commit) times lognormal noise of mean 1 and the given
coefficient of variation: the same kind of ratio a real trial reports against its control.
Parsing reads a file; everything else here is pure.
"""

from __future__ import annotations

import hashlib
import math
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bisector.errors import BadInput, ConfigError
from bisector.model import Commit, Measurement, Probe, ProbeStatus, SearchResult
from bisector.search import SearchSettings, localize
from bisector.search.prober import ProbeBase
from bisector.search.schedule import Clocked
from bisector.userfile import UserFileError, read_text

__all__ = ["StepModel", "SimStep", "load_model", "parse_model", "SimulatedProbe", "resolve_prefix", "run_simulation"]


@dataclass(frozen=True)
class SimStep:
    commit: str  # full SHA
    factors: Mapping[str, float]


@dataclass(frozen=True)
class StepModel:
    shapes: Mapping[str, float]  # TFLOP/s at GOOD
    steps: tuple[SimStep, ...]
    fails: frozenset[str]  # full SHAs that do not build


def resolve_prefix(prefix: str, commits: Sequence[str], where: str = "") -> str:
    """The one commit of the range that starts with `prefix`; BadInput naming it otherwise."""
    p = prefix.strip().lower()
    hits = [c for c in commits if c.startswith(p)] if len(p) >= 4 else []
    label = f"{where}: " if where else ""
    if len(p) < 4:
        raise BadInput(f"{label}SHA prefix {prefix!r} is too short (need at least 4 hex digits)")
    if not hits:
        raise BadInput(f"{label}SHA prefix {prefix!r} is not a commit in the range")
    if len(set(hits)) > 1:
        raise BadInput(f"{label}SHA prefix {prefix!r} is ambiguous ({len(set(hits))} commits in the range)")
    return hits[0]


def load_model(path: str | Path, commits: Sequence[str]) -> StepModel:
    path = Path(path)
    try:
        data = tomllib.loads(read_text(path))
    except UserFileError as exc:
        raise ConfigError(path, "", exc.problem) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, "", f"invalid TOML: {exc}") from None
    return parse_model(data, commits, path)


def _number(path: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(path, key, f"must be a positive number, got {value!r}")
    return float(value)


def parse_model(data: Mapping[str, Any], commits: Sequence[str], path: str | Path = "<model>") -> StepModel:
    """Validate a step model against the range's full SHAs, oldest first."""
    path = Path(path)
    for key in data:
        if key not in ("shapes", "steps", "fails", "description", "name"):
            raise ConfigError(path, key, "unknown key (known: shapes, steps, fails)")
    shapes_raw = data.get("shapes")
    if not isinstance(shapes_raw, Mapping) or not shapes_raw:
        raise ConfigError(path, "shapes", "must be a table with at least one shape = TFLOP/s")
    shapes = {name: _number(path, f"shapes.{name}", v) for name, v in shapes_raw.items()}

    steps: list[SimStep] = []
    raw_steps = data.get("steps", [])
    if not isinstance(raw_steps, list):
        raise ConfigError(path, "steps", "must be an array of tables ([[steps]])")
    for i, raw in enumerate(raw_steps):
        key = f"steps[{i}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(path, key, "must be a table")
        for k in raw:
            if k not in ("commit", "factors", "note"):
                raise ConfigError(path, f"{key}.{k}", "unknown key (known: commit, factors)")
        commit = _commit(path, f"{key}.commit", raw.get("commit"), commits)
        if commit == commits[0]:
            raise ConfigError(path, f"{key}.commit", "is GOOD itself: a step must come after GOOD")
        factors_raw = raw.get("factors")
        if not isinstance(factors_raw, Mapping) or not factors_raw:
            raise ConfigError(path, f"{key}.factors", "must be a table of shape = factor")
        factors = {}
        for name, v in factors_raw.items():
            if name not in shapes:
                raise ConfigError(path, f"{key}.factors.{name}", "not a shape in [shapes]")
            factors[name] = _number(path, f"{key}.factors.{name}", v)
        steps.append(SimStep(commit, factors))

    fails: set[str] = set()
    raw_fails = data.get("fails", [])
    if not isinstance(raw_fails, list):
        raise ConfigError(path, "fails", "must be an array of tables ([[fails]])")
    for i, raw in enumerate(raw_fails):
        if not isinstance(raw, Mapping):
            raise ConfigError(path, f"fails[{i}]", "must be a table")
        fails.add(_commit(path, f"fails[{i}].commit", raw.get("commit"), commits))
    return StepModel(shapes=shapes, steps=tuple(steps), fails=frozenset(fails))


def _commit(path: Path, key: str, value: Any, commits: Sequence[str]) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(path, key, "missing or not a string SHA prefix")
    try:
        return resolve_prefix(value, commits)
    except BadInput as exc:
        raise ConfigError(path, key, str(exc)) from None


class SimulatedProbe(ProbeBase):
    """probe(sha, repeats) over a step model: cumulative, deterministic per (seed, sha)."""

    shapes_alone = True

    def __init__(
        self,
        commits: Sequence[str],
        model: StepModel,
        noise_cv: float = 0.01,
        seed: int = 0,
        wrong: Mapping[str, frozenset[str]] | None = None,
        wild: float = 0.0,
        wild_pct: tuple[float, float] = (5.0, 10.0),
        lineage_bias: Mapping[str, float] | None = None,
        biased_lineage: int = 0,
    ) -> None:
        """`wild`: the share of trials read `wild_pct` percent off (either way, uniform in the range)
        on top of the noise, as a GPU host reads a trial whose timed section another process
        disturbed (studies/results/h200-setup-parts.txt). `lineage_bias`: commit -> a factor on
        every trial of it made in worker lineage `biased_lineage` (0: the run's first, outside
        `independent`; k: the k-th opened), as a neutral CPU build read 21% slow in all its trials
        forked from one zygote, and a step's parent ~2x slow in the verification's only."""
        if noise_cv < 0:
            raise BadInput(f"noise CV must be >= 0, got {noise_cv}")
        if not 0.0 <= wild < 1.0:
            raise BadInput(f"wild trial share must be in [0, 1), got {wild}")
        self.model, self.seed = model, seed
        self.wild, self.wild_pct = wild, wild_pct
        self.lineage_bias, self.biased_lineage, self.lineage = dict(lineage_bias or {}), biased_lineage, 0
        self.opened = 0  # lineages opened so far
        self.sigma = math.sqrt(math.log1p(noise_cv**2))
        self.wrong = dict(wrong or {})
        self.level: dict[str, dict[str, float]] = {}
        index = {sha: k for k, sha in enumerate(commits)}
        at = {index[s.commit]: s for s in model.steps}
        current = {name: 1.0 for name in model.shapes}
        for k, sha in enumerate(commits):
            if k in at:
                for name, f in at[k].factors.items():
                    current[name] *= f
            self.level[sha] = dict(current)
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.rngs: dict[str, np.random.Generator] = {}
        self.calls: list[tuple[str, int]] = []

    def __call__(self, sha: str, repeats: int) -> Measurement:
        self.calls.append((sha, repeats))
        if sha in self.model.fails:
            return Measurement(sha, ProbeStatus.SKIP, reason="simulated build failure")
        have = self.samples.setdefault(sha, {name: [] for name in self.model.shapes})
        missing = repeats - min(len(v) for v in have.values())
        if missing > 0:
            noise = self._draw(sha, missing, len(have))
            for j, name in enumerate(have):
                have[name].extend(float(self.level[sha][name] * x) for x in noise[:, j])
        return Measurement(
            sha, ProbeStatus.OK, {k: tuple(v) for k, v in have.items()}, wrong=self.wrong.get(sha, frozenset())
        )

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        """Each commit's own count per shape, of those shapes only (`StoreProbe.shaped`)."""
        out = {}
        for sha, per in wants.items():
            self.calls.append((sha, max(per.values(), default=0)))
            if sha in self.model.fails:
                out[sha] = Measurement(sha, ProbeStatus.SKIP, reason="simulated build failure")
                continue
            have = self.samples.setdefault(sha, {name: [] for name in self.model.shapes})
            for name, n in per.items():
                if name in have and n > len(have[name]):
                    drawn = self._draw(sha, n - len(have[name]), 1)[:, 0]
                    have[name].extend(float(self.level[sha][name] * x) for x in drawn)
            out[sha] = Measurement(
                sha,
                ProbeStatus.OK,
                {k: tuple(have[k][: per[k]]) for k in per if k in have},
                wrong=self.wrong.get(sha, frozenset()),
            )
        return out

    def _draw(self, sha: str, rows: int, cols: int) -> np.ndarray:
        """Trial factors (noise, wild reads, the lineage's bias) for `rows` trials of `cols` shapes."""
        key = int.from_bytes(hashlib.sha1(sha.encode()).digest()[:8], "big")
        rng = self.rngs.setdefault(sha, np.random.default_rng([self.seed, key]))
        noise = np.exp(rng.normal(-(self.sigma**2) / 2, self.sigma, size=(rows, cols)))
        if self.wild:
            off = rng.uniform(*self.wild_pct, size=noise.shape) / 100.0 * rng.choice((-1.0, 1.0), size=noise.shape)
            noise *= np.where(rng.random(noise.shape) < self.wild, 1.0 + off, 1.0)
        bias = self.lineage_bias.get(sha, 1.0) if self.lineage == self.biased_lineage else 1.0
        return noise * bias

    @contextmanager
    def independent(self) -> Iterator[None]:
        """Trials drawn inside come from a new lineage (`StoreProbe.independent`)."""
        self.opened += 1
        before, self.lineage = self.lineage, self.opened
        try:
            yield
        finally:
            self.lineage = before

    def truth(self) -> list[tuple[str, Mapping[str, float]]]:
        return [(s.commit, s.factors) for s in self.model.steps]


def run_simulation(
    commits: Sequence[Commit],
    model: StepModel,
    noise_cv: float,
    seed: int,
    settings: SearchSettings,
    clock: Callable[[Probe], Clocked] | None = None,
) -> SearchResult:
    """The search over the real history `commits` (oldest first) against the step model; `clock`
    wraps the probe to count rounds and wall time (bisector/search/schedule.py)."""
    shas = [c.sha for c in commits]
    probe: Probe = SimulatedProbe(shas, model, noise_cv, seed)
    result = localize(shas, clock(probe) if clock else probe, settings)
    prs = {c.sha: c.pr for c in commits}
    return replace(
        result,
        steps=tuple(replace(s, pr=prs.get(s.commit)) for s in result.steps),
        dropped=tuple(replace(s, pr=prs.get(s.commit)) for s in result.dropped),
    )

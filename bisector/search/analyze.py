"""Find every step in an already-recorded series (the store's CSV export, or another tool's).

Input: one row per trial with columns `sha` (or `commit`), `shape`, `value` (or `ratio`), and
optionally `order` (or `date` / `commit_date`) to put commits in history order (otherwise the
order of first appearance), `status` (only `ok` rows are used; `wrong` rows mark the shape wrong
at that commit), `patch_hash` (patched A/B trials are not part of the series) and `campaign`.

The series is fully sampled, so no probing is needed: binary segmentation over commits. A segment
splits at the commit that maximises t on log values between the pooled trials before and after it
(over all shapes), when stats.compare calls that split DIFFERENT at alpha divided by shapes x
candidate splits. The per-trial noise is pooled per shape over the whole series from repeats of
the same commit (stats.log_sd), not taken from the two sides: one side may be a single commit,
and Welch's few degrees of freedom there would hide a step next to another. Each final boundary is
then reported with stats.compare between the two neighbouring segments' trials.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bisector.errors import BadInput
from bisector.model import Measurement, ProbeStatus, SearchResult, Step, Verdict
from bisector.search.stats import compare, holds, log_sd

__all__ = ["Series", "load_csv", "find_steps"]


@dataclass(frozen=True)
class Series:
    commits: tuple[str, ...]  # history order
    samples: Mapping[str, Mapping[str, tuple[float, ...]]]  # sha -> shape -> trials
    wrong: Mapping[str, frozenset[str]]
    prs: Mapping[str, int | None]

    @property
    def shapes(self) -> tuple[str, ...]:
        return tuple(sorted({s for per in self.samples.values() for s in per}))


def _pick(columns: Sequence[str], names: Sequence[str], path: Path, required: bool = True) -> str | None:
    for name in names:
        if name in columns:
            return name
    if required:
        raise BadInput(f"{path}: missing column {' or '.join(repr(n) for n in names)}")
    return None


def load_csv(path: str | Path, campaign: str | None = None) -> Series:
    """Read a trials CSV into a Series; BadInput names the file and the problem."""
    import pandas

    path = Path(path)
    try:
        df = pandas.read_csv(path, dtype={"sha": str, "commit": str, "shape": str, "status": str})
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (pandas.errors.ParserError, pandas.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    cols = list(df.columns)
    sha_col = _pick(cols, ("sha", "commit"), path)
    shape_col = _pick(cols, ("shape",), path)
    value_col = _pick(cols, ("value", "ratio"), path)
    order_col = _pick(cols, ("order", "date", "commit_date"), path, required=False)
    if "campaign" in cols:
        names = sorted(set(df["campaign"].dropna().astype(str)))
        if campaign is not None:
            df = df[df["campaign"].astype(str) == campaign]
            if df.empty:
                raise BadInput(f"{path}: no rows for campaign {campaign!r} (has: {', '.join(names)})")
        elif len(names) > 1:
            raise BadInput(f"{path}: rows of {len(names)} campaigns ({', '.join(names)}): choose one")
    if "patch_hash" in cols:
        df = df[df["patch_hash"].isna() | (df["patch_hash"].astype(str) == "")]
    status = df["status"].fillna("ok").astype(str).str.lower() if "status" in cols else None
    wrong: dict[str, set[str]] = {}
    if status is not None:
        for sha, shape in df.loc[status == "wrong", [sha_col, shape_col]].itertuples(index=False):
            wrong.setdefault(str(sha), set()).add(str(shape))
        df = df[status == "ok"]
    values = pandas.to_numeric(df[value_col], errors="coerce")
    bad = df[~(values > 0)]
    if len(bad):
        raise BadInput(f"{path}: column {value_col!r} must hold positive numbers (row {bad.index[0] + 2})")
    if df.empty:
        raise BadInput(f"{path}: no usable rows")
    df = df.assign(_v=values)
    if order_col is not None:
        key = (
            pandas.to_numeric(df[order_col], errors="coerce")
            if order_col == "order"
            else pandas.to_datetime(df[order_col], errors="coerce", utc=True)
        )
        if key.isna().any():
            raise BadInput(f"{path}: column {order_col!r} has empty or unreadable values")
        first = df.assign(_k=key).groupby(sha_col, sort=False)["_k"].min().sort_values(kind="stable")
        commits = tuple(str(s) for s in first.index)
    else:
        commits = tuple(dict.fromkeys(str(s) for s in df[sha_col]))
    samples: dict[str, dict[str, tuple[float, ...]]] = {c: {} for c in commits}
    for (sha, shape), group in df.groupby([sha_col, shape_col], sort=False):
        samples[str(sha)][str(shape)] = tuple(float(v) for v in group["_v"])
    prs: dict[str, int | None] = {}
    if "commit_pr" in cols:
        for sha, pr in df[[sha_col, "commit_pr"]].drop_duplicates(sha_col).itertuples(index=False):
            prs[str(sha)] = int(pr) if pr == pr and pr is not None else None
    return Series(commits, samples, {k: frozenset(v) for k, v in wrong.items()}, prs)


def _pooled(series: Series, lo: int, hi: int, shape: str) -> list[float]:
    out: list[float] = []
    for sha in series.commits[lo:hi]:
        if shape not in series.wrong.get(sha, ()):
            out.extend(series.samples[sha].get(shape, ()))
    return out


def _best_split(series: Series, lo: int, hi: int, shape: str, sd: float) -> tuple[int, float]:
    """Split position k in (lo, hi) with the largest |t| on logs (known noise sd), by running sums."""
    n, s1 = [0], [0.0]
    for sha in series.commits[lo:hi]:
        vals = () if shape in series.wrong.get(sha, ()) else series.samples[sha].get(shape, ())
        n.append(n[-1] + len(vals))
        s1.append(s1[-1] + float(np.log(np.asarray(vals, dtype=float)).sum()) if vals else s1[-1])
    N, S1 = np.asarray(n, dtype=float), np.asarray(s1)
    nl, nr = N[1:-1], N[-1] - N[1:-1]
    ok = (nl >= 1) & (nr >= 1)
    if not ok.any():
        return -1, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.abs((S1[-1] - S1[1:-1]) / nr - S1[1:-1] / nl)
        t = diff / (sd * np.sqrt(1.0 / nl + 1.0 / nr)) if sd > 0 else np.where(diff > 0, np.inf, 0.0)
    t = np.where(ok, t, -1.0)
    k = int(np.argmax(t))
    return lo + 1 + k, float(t[k])


def find_steps(series: Series, min_step_pct: float = 1.0, alpha: float = 0.01) -> SearchResult:
    """Every step in a fully sampled series, in the same result form as the search."""
    shapes = series.shapes
    n_shapes = max(1, len(shapes))
    noise = {}
    for shape in shapes:
        groups = [
            v
            for sha, per in series.samples.items()
            if shape not in series.wrong.get(sha, ())
            for k, v in per.items()
            if k == shape and v
        ]
        sd, df = log_sd(groups)
        noise[shape] = (sd if sd == sd else 0.0, float(max(df, 1)))
    bounds: list[int] = []

    def segment(lo: int, hi: int) -> None:
        if hi - lo < 2:
            return
        a = alpha / (n_shapes * (hi - lo - 1))
        best: tuple[float, int] | None = None
        for shape in shapes:
            k, t = _best_split(series, lo, hi, shape, noise[shape][0])
            if k < 0:
                continue
            c = compare(
                _pooled(series, lo, k, shape), _pooled(series, k, hi, shape), min_step_pct, a, shape, noise[shape]
            )
            if c.verdict is Verdict.DIFFERENT and (best is None or t > best[0]):
                best = (t, k)
        if best is not None:
            bounds.append(best[1])
            segment(lo, best[1])
            segment(best[1], hi)

    segment(0, len(series.commits))
    edges = [0, *sorted(bounds), len(series.commits)]
    steps = _steps_at(series, edges, shapes, min_step_pct, alpha / n_shapes, noise)
    measurements = {
        sha: Measurement(
            sha, ProbeStatus.OK if per else ProbeStatus.SKIP, dict(per), wrong=series.wrong.get(sha, frozenset())
        )
        for sha, per in series.samples.items()
    }
    return SearchResult(
        steps=tuple(steps),
        dropped=(),
        probes=(),
        measurements=measurements,
        skipped=tuple(sha for sha, per in series.samples.items() if not per),
        wrong={k: v for k, v in series.wrong.items() if v},
    )


def _steps_at(
    series: Series,
    edges: Sequence[int],
    shapes: Sequence[str],
    min_step_pct: float,
    alpha_each: float,
    noise: Mapping[str, tuple[float, float]],
) -> list[Step]:
    """A step at each inner edge where a shape moved between the segments either side of it."""
    steps = []
    for a, k, b in zip(edges, edges[1:], edges[2:]):
        comps = {
            s: compare(_pooled(series, a, k, s), _pooled(series, k, b, s), min_step_pct, alpha_each, s, noise[s])
            for s in shapes
            if _pooled(series, a, k, s) and _pooled(series, k, b, s)
        }
        moved = sorted(
            s
            for s, c in comps.items()
            if c.verdict is Verdict.DIFFERENT or holds(c, math.copysign(1.0, c.change_pct), min_step_pct, alpha_each)
        )
        if not moved:
            continue
        sha = series.commits[k]
        steps.append(
            Step(
                commit=sha,
                parent=series.commits[k - 1],
                shapes=tuple(moved),
                change_pct={s: comps[s].change_pct for s in moved},
                ci95={s: comps[s].ci95 for s in moved},
                p_value={s: comps[s].p_value for s in moved},
                pr=series.prs.get(sha),
            )
        )
    return steps

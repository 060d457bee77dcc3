"""Steps that interact: the reverts of verified regressions on the same shapes, combined on the tip.

The seed's engineers reverted pairs of commits by hand: dropping an L2 remap and dropping fast math
both cost the long-sequence attention shapes, and the fast-math loss was 10.4% with the remap off
but 1.4% with it on. A fix measured alone then leaves a "loose end" only the other explains. Here,
when two or more verified regressions move a shape in common, their reverts are applied to the tip
in every combination (k <= 3 steps: 2^k builds, the tip itself included; each combination's patch
is the reverts applied in turn with `git apply --3way` to a scratch index of the tip, and is built
and cached by its hash like any patched build),
and all are measured side by side with the tip in one batch, on the shapes two or more of them move.

Per pair of steps and shape, in log terms (percent of the tip): I = gain(both reverted) -
gain(a reverted) - gain(b reverted).
- add: I is within +-min_step_pct (95% interval): each revert gains the same with or without the other;
- overlap: I < 0: reverted one at a time they gain more than together; part of the loss is the
  same loss (the seed: fast math's revert gains 10.4% with the remap dropped, 1.4% with it back);
- hide: I > 0: a revert gains more once the other is reverted too; one step hides part of the
  other's loss;
- unclear: neither yet (too few trials for the noise).
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from scipy import special  # the t distribution's inverse; scipy.stats takes ~1 s to import

from bisector import gitrepo
from bisector.build.builder import patch_hash
from bisector.config import Config
from bisector.why.fixes import side_trials
from bisector.model import BuildStatus, Commit, ProbeStatus, SearchResult, Step
from bisector.runner.probe import NOT_MEASURED, StoreProbe, Taken, fresh, fresh_tflops, side_by_side
from bisector.search.samples import PooledNoise, pair_sd
from bisector.search.stats import compare
from bisector.trust.filter import scrub
from bisector.why.session import Session


MAX_STEPS = 3  # 2^3 = 8 builds; more steps on one shape: the three largest on the shared shapes

__all__ = ["MAX_STEPS", "groups", "combined_patch", "pair_effect", "measure_interactions", "expected_trials"]


@dataclass(frozen=True)
class ComboResult:
    """The tip with some reverts applied (none: the tip itself), measured side by side with the rest."""

    reverted: tuple[str, ...]  # culprit SHAs whose reverts are applied
    tflops: Mapping[str, float] = field(default_factory=dict)  # per shape, median subject TFLOP/s
    gain_pct: Mapping[str, float] = field(default_factory=dict)  # per shape, metric change against the tip
    ci95: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    error: str = ""  # did not apply, build or run


@dataclass(frozen=True)
class PairEffect:
    """How two steps combine on one shape, from the reverts measured on the tip.

    `alone_pct`: reverting `a` with `b` still in; `with_other_pct`: reverting `a` once `b` is
    reverted (the gain of both minus the gain of `b`, in log terms). `interaction_pct` is
    gain(a and b) - gain(a) - gain(b) in log terms, with its 95% interval."""

    a: str
    b: str
    shape: str
    alone_pct: float
    with_other_pct: float
    other_alone_pct: float
    other_with_pct: float
    interaction_pct: float
    ci95: tuple[float, float]
    verdict: str  # "add" | "overlap" | "hide" | "unclear"


@dataclass(frozen=True)
class Interaction:
    """Steps whose shapes overlap, their reverts measured on the tip in every combination."""

    steps: tuple[str, ...]  # culprit SHAs, oldest first
    shapes: tuple[str, ...]  # the shapes two or more of them move
    combos: tuple[ComboResult, ...] = ()  # the tip first, then every combination
    pairs: tuple[PairEffect, ...] = ()
    trials: int = 0  # side-by-side trials of each combination
    note: str = ""  # e.g. more than three steps: only the three largest were combined


def groups(steps: Sequence[Step]) -> list[tuple[list[Step], tuple[str, ...], str]]:
    """Verified one-culprit regressions linked by shared shapes: (steps, shapes two or more move, note)."""
    cands = [s for s in steps if s.is_regression and s.verified and not s.candidates]
    seen: set[str] = set()
    out = []
    for s in cands:
        if s.commit in seen:
            continue
        comp, todo = [], [s]
        while todo:
            x = todo.pop()
            if x.commit in seen:
                continue
            seen.add(x.commit)
            comp.append(x)
            todo += [y for y in cands if y.commit not in seen and set(y.shapes) & set(x.shapes)]
        if len(comp) < 2:
            continue
        note = ""
        if len(comp) > MAX_STEPS:
            shared = _shared(comp)
            comp = sorted(comp, key=lambda t: -sum(abs(t.change_pct.get(k, 0.0)) for k in shared))[:MAX_STEPS]
            note = (f"{len(seen)} steps move these shapes; the {MAX_STEPS} largest on them were combined "
                    f"({2 ** MAX_STEPS} builds)")
        order = {c.commit: i for i, c in enumerate(cands)}
        comp.sort(key=lambda t: order[t.commit])
        out.append((comp, _shared(comp), note))
    return out


def _shared(steps: Sequence[Step]) -> tuple[str, ...]:
    counts: dict[str, int] = {}
    for s in steps:
        for k in s.shapes:
            counts[k] = counts.get(k, 0) + 1
    return tuple(k for k, c in counts.items() if c >= 2)


def _git(git_dir: Path, *args: str, index: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**scrub(dict(os.environ)), "GIT_DIR": str(git_dir), "GIT_INDEX_FILE": str(index)}
    return subprocess.run(["git", *args], cwd=git_dir, input=stdin, capture_output=True, text=True, env=env)


def combined_patch(git_dir: Path, tip: str, patches: Sequence[str]) -> tuple[str, str]:
    """(patch, "") of several revert patches applied to the tip in turn (`git apply --3way`, as a
    patched build applies one), as one patch on the tip; ("", why) when they do not apply together.
    Applied to a scratch index, never a work tree: nothing of the repository changes but new objects."""
    with tempfile.TemporaryDirectory(prefix="bisector-revert-") as tmp:
        index = Path(tmp) / "index"
        step = _git(git_dir, "read-tree", tip, index=index)
        if step.returncode != 0:
            return "", (step.stderr.strip().splitlines() or ["git read-tree failed"])[-1]
        for patch in patches:
            step = _git(git_dir, "apply", "--cached", "--3way", "--whitespace=nowarn", "-", index=index, stdin=patch)
            if step.returncode != 0:
                lines = [ln for ln in (step.stderr or step.stdout).strip().splitlines() if ln.strip()]
                return "", next((ln for ln in lines if "conflict" in ln or "error" in ln), lines[-1] if lines
                                else "the reverts conflict")
        diff = _git(git_dir, "diff", "--cached", "--binary", "--full-index", tip, index=index).stdout
    return (diff if diff.endswith("\n") else diff + "\n"), ""


def pair_effect(tip: Sequence[float], a: Sequence[float], b: Sequence[float], ab: Sequence[float],
                min_step_pct: float, noise: PooledNoise | None = None,
                ) -> tuple[float, float, float, float, float, tuple[float, float], str]:
    """(gain a alone, gain a with b reverted, gain b alone, gain b with a reverted, interaction,
    its 95% interval, verdict), all in percent, from the metric's samples of the four builds. The
    interaction is the difference of differences of mean logs, with the four builds' pooled
    variance; with `noise` (the search's trial noise of the shape), that noise, or the builds' own
    where it is wider beyond chance (samples.pair_sd), on the search's degrees of freedom: two
    trials a build have 4 of their own."""
    logs = [[math.log(x) for x in g if x > 0] for g in (tip, a, b, ab)]
    if any(len(g) < 1 for g in logs):
        raise ValueError("a combination has no sample")
    m = [statistics.fmean(g) for g in logs]
    pct = lambda x: 100.0 * math.expm1(x)  # noqa: E731
    inter = m[3] - m[1] - m[2] + m[0]
    df = sum(len(g) for g in logs) - len(logs)
    own = sum(sum((x - mg) ** 2 for x in g) for g, mg in zip(logs, m)) / df if df >= 1 else 0.0
    if noise is not None:  # as the search's comparisons (samples.compare_pooled)
        pooled, df = pair_sd(noise.sd, noise.df, math.sqrt(own), df) ** 2, noise.df
    elif df < 1:
        return pct(m[1] - m[0]), pct(m[3] - m[2]), pct(m[2] - m[0]), pct(m[3] - m[1]), pct(inter), \
            (-math.inf, math.inf), "unclear"
    else:
        pooled = own
    se = math.sqrt(pooled * sum(1.0 / len(g) for g in logs))
    half = float(special.stdtrit(df, 0.975)) * se
    lo, hi = inter - half, inter + half
    floor = math.log1p(min_step_pct / 100)
    if lo > 0 and inter >= floor:
        verdict = "hide"
    elif hi < 0 and -inter >= floor:
        verdict = "overlap"
    elif -floor < lo and hi < floor:
        verdict = "add"
    else:
        verdict = "unclear"
    return (pct(m[1] - m[0]), pct(m[3] - m[2]), pct(m[2] - m[0]), pct(m[3] - m[1]), pct(inter),
            (pct(lo), pct(hi)), verdict)


def expected_trials(result: SearchResult, config: Config) -> int:
    """Trial processes the interactions take at first: n of every combination of each group's
    reverts, the tip included (an unclear pair then asks for more, up to max_trials)."""
    return sum(2 ** len(steps) * side_trials(config) for steps, _, _ in groups(result.steps))


def measure_interactions(session: Session, result: SearchResult, commits: Sequence[Commit], taken: Taken,
                         noise: Mapping[str, PooledNoise | None] | None = None) -> tuple[Interaction, ...]:
    """Every group of verified regressions on shared shapes, their reverts combined on the tip;
    `noise`: the search's trial noise per shape (samples.run_noise; `pair_effect`)."""
    return tuple(_one(session, steps, shapes, note, commits[-1].sha, taken, noise or {})
                 for steps, shapes, note in groups(result.steps))


def _one(session: Session, steps: list[Step], shape_keys: tuple[str, ...], note: str, tip: str,
         taken: Taken, noise: Mapping[str, PooledNoise | None]) -> Interaction:
    config = session.config
    shapes = tuple(s for s in config.shapes if s.key in shape_keys)
    n = side_trials(config)
    reverts = {s.commit: gitrepo.revert_patch(session.repo, s.commit) for s in steps}
    combos: list[tuple[str, ...]] = [()]
    for k in range(1, len(steps) + 1):
        combos += [tuple(s.commit for s in c) for c in itertools.combinations(steps, k)]
    probes: dict[tuple[str, ...], StoreProbe] = {}
    errors: dict[tuple[str, ...], str] = {}
    repo_dir = Path(session.repo.git_dir)
    for combo in combos:
        if not combo:
            probes[combo] = session.probe(shapes=shapes)
            continue
        if len(combo) == 1:  # the revert the fixes built: same patch, same build, fresh trials
            patch, why = reverts[combo[0]], ""
        else:  # newest culprit first, as one would revert them by hand
            patch, why = combined_patch(repo_dir, tip, [reverts[c] for c in reversed(combo)])
        if why:
            errors[combo] = f"the reverts do not apply together: {why}"
            continue
        probe = session.probe(patch=patch, patch_hash=patch_hash(patch), shapes=shapes, max_crashes=1)
        build = probe.build(tip)
        if build.status is BuildStatus.FAILED:
            lines = build.log_tail.strip().splitlines()
            errors[combo] = NOT_MEASURED if build.log_tail == NOT_MEASURED else (lines[-1] if lines else "build failed")
            continue
        probes[combo] = probe
    th = config.thresholds
    # Trials sized to the effect, as in the search: while a pair's verdict is unclear, every
    # combination gets as many trials again, side by side, up to the protocol's max_trials.
    cap = max(n, config.protocol.max_trials)
    starts = {c: taken.take(p, tip, n) for c, p in probes.items()}
    while True:
        samples = _measure(probes, tip, starts, n, shape_keys, errors)
        pairs = _pairs(steps, samples, th.min_step, noise)
        if n >= cap or not any(p.verdict == "unclear" for p in pairs):
            break
        more = min(n, cap - n)
        for combo, probe in probes.items():
            if combo not in errors:
                taken.extend(probe, tip, starts[combo], n, more)
        n += more
    base = samples.get((), {})
    results = []
    for combo in combos:
        if combo in errors or combo not in samples:
            results.append(ComboResult(combo, error=errors.get(combo, "not measured")))
            continue
        mine = samples[combo]
        cmp = {k: compare(base[k], mine[k], th.min_step(k), th.alpha, k) for k in shape_keys
               if combo and base.get(k) and mine.get(k)}
        results.append(ComboResult(combo, fresh_tflops(probes[combo], tip, starts[combo], n),
                                   {k: c.change_pct for k, c in cmp.items()}, {k: c.ci95 for k, c in cmp.items()}))
    return Interaction(tuple(s.commit for s in steps), shape_keys, tuple(results), pairs, n, note)


Combo = tuple[str, ...]  # the culprits whose reverts a build of the tip carries


def _measure(probes: Mapping[Combo, StoreProbe], tip: str, starts: Mapping[Combo, int], n: int,
             shape_keys: Sequence[str], errors: dict[Combo, str]) -> dict[Combo, dict[str, tuple[float, ...]]]:
    """Each combination's first n side-by-side samples from its start (measured where missing);
    a combination that fails or gives wrong results goes into `errors` instead."""
    live = {c: p for c, p in probes.items() if c not in errors}
    got = dict(zip(live, side_by_side([(p, tip, starts[c] + n) for c, p in live.items()])))
    samples: dict[Combo, dict[str, tuple[float, ...]]] = {}
    for combo, m in got.items():
        if m.status is not ProbeStatus.OK or m.wrong & set(shape_keys):
            errors[combo] = "wrong results" if m.wrong & set(shape_keys) else (m.reason or "did not run")[-200:]
            continue
        samples[combo] = fresh(m, starts[combo], n)
        if not any(samples[combo].values()):
            errors[combo] = m.reason or NOT_MEASURED
    return samples


def _pairs(steps: Sequence[Step], samples: Mapping[tuple[str, ...], Mapping[str, Sequence[float]]],
           min_step: Callable[[str], float], noise: Mapping[str, PooledNoise | None]) -> tuple[PairEffect, ...]:
    out = []
    for a, b in itertools.combinations(steps, 2):
        keys = [(), (a.commit,), (b.commit,), (a.commit, b.commit)]
        if not all(k in samples for k in keys):
            continue
        for shape in (k for k in a.shapes if k in b.shapes):
            groups_ = [samples[k].get(shape, ()) for k in keys]
            if not all(groups_):
                continue
            alone, with_other, b_alone, b_with, inter, ci, verdict = pair_effect(*groups_, min_step(shape),
                                                                                 noise.get(shape))
            out.append(PairEffect(a.commit, b.commit, shape, alone, with_other, b_alone, b_with, inter, ci, verdict))
    return tuple(out)

"""Steps that interact: the reverts of verified regressions on the same shapes, combined on the tip.

The seed's engineers reverted pairs of commits by hand: dropping an L2 remap and dropping fast math
both cost the long-sequence attention shapes, and the fast-math loss was 10.4% with the remap off
but 1.4% with it on. A fix measured alone then leaves a "loose end" only the other explains. Here,
when two or more verified regressions move a shape in common, their reverts are applied to the tip
in every combination (k <= 3 steps: 2^k builds, the tip itself included; each combination's patch
is the reverts applied in turn with `git apply --3way` to a scratch index of the tip, and is built
and cached by its hash like any patched build). The tip and the single reverts are the fixes
stage's; the combinations of two or more are measured in its rounds (fixes.verify_fixes), side by
side with them, on the shapes two or more of the steps move.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scipy import special  # the t distribution's inverse; scipy.stats takes ~1 s to import

from bisector.build.builder import patch_hash
from bisector.config import Thresholds
from bisector.measure.probe import NOT_MEASURED, Count, StoreProbe, fresh
from bisector.model import BuildStatus, Measurement, ProbeStatus, Step, base_shape
from bisector.search.samples import PooledNoise, compare_pooled, pair_sd
from bisector.trust.filter import scrub
from bisector.why.session import Session

MAX_STEPS = 3  # 2^3 = 8 builds; more steps on one shape: the three largest on the shared shapes

__all__ = ["MAX_STEPS", "groups", "combined_patch", "pair_effect", "Plan", "set_up", "samples_of", "result"]


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
            note = (
                f"{len(seen)} steps move these shapes; the {MAX_STEPS} largest on them were combined "
                f"({2**MAX_STEPS} builds)"
            )
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


def _git(git_dir: Path, *args: str, index: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
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
                return "", next(
                    (ln for ln in lines if "conflict" in ln or "error" in ln),
                    lines[-1] if lines else "the reverts conflict",
                )
        diff = _git(git_dir, "diff", "--cached", "--binary", "--full-index", tip, index=index).stdout
    return (diff if diff.endswith("\n") else diff + "\n"), ""


def pair_effect(
    tip: Sequence[float],
    a: Sequence[float],
    b: Sequence[float],
    ab: Sequence[float],
    min_step_pct: float,
    noise: PooledNoise | None = None,
    gains: tuple[float, float, float] | None = None,
) -> tuple[float, float, float, float, float, tuple[float, float], str]:
    """(gain a alone, gain a with b reverted, gain b alone, gain b with a reverted, interaction,
    its 95% interval, verdict), all in percent, from the metric's samples of the four builds. The
    interaction is the difference of differences of mean logs, with the four builds' pooled
    variance; with `noise` (the search's trial noise of the shape), that noise, or the builds' own
    where it is wider beyond chance (samples.pair_sd), on the search's degrees of freedom: two
    trials a build have 4 of their own. `gains`: the gains of a, b and both against the tip (percent)
    as the group's table shows them (samples.compare_pooled, wild trials left out): the points are
    read from those, so a pair's line is recomputable from its table; the spread is the samples'."""
    logs = [[math.log(x) for x in g if x > 0] for g in (tip, a, b, ab)]
    if any(len(g) < 1 for g in logs):
        raise ValueError("a combination has no sample")
    m = [statistics.fmean(g) for g in logs]
    df: float = sum(len(g) for g in logs) - len(logs)
    own = sum(sum((x - mg) ** 2 for x in g) for g, mg in zip(logs, m)) / df if df >= 1 else 0.0
    if gains is not None:  # the points as the table reads them; the spread stays the samples'
        m = [0.0, *(math.log1p(g / 100.0) for g in gains)]

    def pct(x: float) -> float:
        return 100.0 * math.expm1(x)

    inter = m[3] - m[1] - m[2] + m[0]
    if noise is not None:  # as the search's comparisons (samples.compare_pooled)
        pooled, df = pair_sd(noise.sd, noise.df, math.sqrt(own), df) ** 2, noise.df
    elif df < 1:
        return (
            pct(m[1] - m[0]),
            pct(m[3] - m[2]),
            pct(m[2] - m[0]),
            pct(m[3] - m[1]),
            pct(inter),
            (-math.inf, math.inf),
            "unclear",
        )
    else:
        pooled = own
    se = math.sqrt(pooled * sum(1.0 / len(g) for g in logs))
    half = float(special.stdtrit(df, 0.975)) * se
    lo, hi = inter - half, inter + half
    return (
        pct(m[1] - m[0]),
        pct(m[3] - m[2]),
        pct(m[2] - m[0]),
        pct(m[3] - m[1]),
        pct(inter),
        (pct(lo), pct(hi)),
        _pair_verdict(inter, lo, hi, math.log1p(min_step_pct / 100)),
    )


def _pair_verdict(inter: float, lo: float, hi: float, floor: float) -> str:
    """How two reverts combine, from the interaction (log) and its interval against the minimum step:
    one hides the other, they overlap, they add up, or unclear."""
    if lo > 0 and inter >= floor:
        return "hide"
    if hi < 0 and -inter >= floor:
        return "overlap"
    if -floor < lo and hi < floor:
        return "add"
    return "unclear"


Combo = tuple[str, ...]  # the culprits whose reverts a build of the tip carries


@dataclass(frozen=True)
class Plan:
    """A group's combinations of two or more reverts, set up on the tip. The tip itself and each
    single revert are the fixes stage's own builds, measured in the same rounds (fixes.verify_fixes):
    measured again here, they took 48 of an H200 demo's 144 fixes-stage trials."""

    steps: tuple[Step, ...]
    shapes: tuple[str, ...]  # the shapes two or more of them move
    note: str
    probes: Mapping[Combo, StoreProbe]  # the combinations of two or more that built
    errors: Mapping[Combo, str]  # those that did not apply together or did not build

    @property
    def combos(self) -> list[Combo]:
        """Every combination, the tip (no revert) first, then the single reverts, then larger."""
        out: list[Combo] = [()]
        for k in range(1, len(self.steps) + 1):
            out += [tuple(s.commit for s in c) for c in itertools.combinations(self.steps, k)]
        return out


def multi_combos(steps: Sequence[Step]) -> int:
    """How many combinations of two or more reverts a group of `steps` builds."""
    return (1 << len(steps)) - 1 - len(steps)


def set_up(
    session: Session,
    steps: Sequence[Step],
    shape_keys: tuple[str, ...],
    note: str,
    tip: str,
    reverts: Mapping[str, str],
) -> Plan:
    """The group's combined reverts (culprit -> its revert patch), each built on the tip."""
    shapes = tuple(s for s in session.config.shapes if s.key in {base_shape(k) for k in shape_keys})
    probes: dict[Combo, StoreProbe] = {}
    errors: dict[Combo, str] = {}
    repo_dir = Path(session.repo.git_dir)
    for k in range(2, len(steps) + 1):
        for group in itertools.combinations(steps, k):
            combo = tuple(s.commit for s in group)
            # newest culprit first, as one would revert them by hand
            patch, why = combined_patch(repo_dir, tip, [reverts[c] for c in reversed(combo)])
            if why:
                errors[combo] = f"the reverts do not apply together: {why}"
                continue
            probe = session.probe(patch=patch, patch_hash=patch_hash(patch), shapes=shapes, max_crashes=1)
            build = probe.build(tip)
            if build.status is BuildStatus.FAILED:
                lines = build.log_tail.strip().splitlines()
                errors[combo] = (
                    NOT_MEASURED if build.log_tail == NOT_MEASURED else (lines[-1] if lines else "build failed")
                )
                continue
            probes[combo] = probe
    return Plan(tuple(steps), shape_keys, note, probes, errors)


def samples_of(
    m: Measurement, start: Count, n: int, shape_keys: Sequence[str]
) -> tuple[dict[str, tuple[float, ...]], str]:
    """(samples start..start+n per shape, "") of a combination's measurement, or ({}, why) where it
    failed, gave wrong results or gave no sample."""
    if m.status is not ProbeStatus.OK or m.wrong & set(shape_keys):
        return {}, "wrong results" if m.wrong & set(shape_keys) else (m.reason or "did not run")[-200:]
    got = {k: v for k, v in fresh(m, start, n).items() if k in shape_keys}
    return (got, "") if any(got.values()) else ({}, m.reason or NOT_MEASURED)


def _pairs(
    plan: Plan,
    samples: Mapping[Combo, Mapping[str, Sequence[float]]],
    min_step: Callable[[str], float],
    noise: Mapping[str, PooledNoise | None],
    gains: Mapping[Combo, Mapping[str, float]] | None = None,
) -> tuple[PairEffect, ...]:
    """Every pair of the group's steps on every shape both move, where all four builds measured;
    `gains`: each combination's change against the tip as its table row shows it."""
    out = []
    for a, b in itertools.combinations(plan.steps, 2):
        keys = [(), (a.commit,), (b.commit,), (a.commit, b.commit)]
        if not all(k in samples for k in keys):
            continue
        for shape in (k for k in a.shapes if k in b.shapes):
            groups_ = [samples[k].get(shape, ()) for k in keys]
            if not all(groups_):
                continue
            shown = [(gains or {}).get(k, {}).get(shape) for k in keys[1:]]
            g_tip, g_a, g_b, g_ab = groups_
            known = [g for g in shown if g is not None]
            alone, with_other, b_alone, b_with, inter, ci, verdict = pair_effect(
                g_tip,
                g_a,
                g_b,
                g_ab,
                min_step(shape),
                noise.get(shape),
                (known[0], known[1], known[2]) if len(known) == len(shown) == 3 else None,
            )
            out.append(PairEffect(a.commit, b.commit, shape, alone, with_other, b_alone, b_with, inter, ci, verdict))
    return tuple(out)


def result(
    plan: Plan,
    samples: Mapping[Combo, Mapping[str, Sequence[float]]],
    tflops: Mapping[Combo, Mapping[str, float]],
    errors: Mapping[Combo, str],
    n: int,
    thresholds: Thresholds,
    noise: Mapping[str, PooledNoise | None],
) -> Interaction:
    """The group's Interaction: each combination against the tip, and each pair's effect, from the
    same rounds, on the search's trial noise as the reverts' checks are (samples.compare_pooled): a
    single revert's line and its check, on the same trials, read the same."""
    base = samples.get((), {})
    out, gains = [], {}
    for combo in plan.combos:
        if combo in errors or combo not in samples:
            out.append(ComboResult(combo, error=errors.get(combo, "not measured")))
            continue
        mine = samples[combo]
        cmp = {
            k: compare_pooled(base[k], mine[k], thresholds.min_step(k), thresholds.alpha, k, noise.get(k))
            for k in plan.shapes
            if combo and base.get(k) and mine.get(k)
        }
        gains[combo] = {k: c.change_pct for k, c in cmp.items()}
        out.append(
            ComboResult(
                combo,
                {k: v for k, v in tflops.get(combo, {}).items() if k in plan.shapes},
                gains[combo],
                {k: c.ci95 for k, c in cmp.items()},
            )
        )
    return Interaction(
        tuple(s.commit for s in plan.steps),
        plan.shapes,
        tuple(out),
        _pairs(plan, samples, thresholds.min_step, noise, gains),
        n,
        plan.note,
    )

"""A revert's verdict on the tip, decided by its intervals only, and when it buys more trials
(bisector/why/fixes.py, FixResult.verdict)."""

from __future__ import annotations

from bisector.model import Comparison, Step, Verdict
from bisector.search.samples import PooledNoise, compare_pooled
from bisector.search.stats import compare
from bisector.why.fixes import FixResult, later_steps, undecided

SHAPE = "fa/s16384"


def cmp(change: float, lo: float, hi: float, verdict: Verdict | None = None) -> Comparison:
    if verdict is None:
        verdict = Verdict.DIFFERENT if lo > 0 or hi < 0 else Verdict.UNKNOWN
    return Comparison(SHAPE, verdict, change, (lo, hi), 0.01, 4, 4)


def fix(own: float, vs_parent: Comparison, vs_tip: Comparison, min_step: float = 3.0) -> FixResult:
    return FixResult(
        "c" * 40,
        None,
        True,
        shapes=(SHAPE,),
        vs_parent={SHAPE: vs_parent},
        vs_tip={SHAPE: vs_tip},
        own_pct={SHAPE: own},
        min_step_pct=min_step,
    )


def test_an_interval_that_straddles_is_undecided_not_restored() -> None:
    # The H200 demo's revert of #115 on s16384: "not restored: 62.3% still missing" on -62.3%
    # against the parent, where against the tip it was +0.9% [-15.8, +20.7]: both readings fit.
    f = fix(-5.3, cmp(-62.3, -66.0, -58.2), cmp(0.9, -15.8, 20.7))
    assert f.verdict(SHAPE) == "undecided" and undecided(f, 3.0)
    # #122's revert: +1.0% [-10.3, +13.7] against the parent once read "restored".
    f = fix(-59.6, cmp(1.0, -10.3, 13.7), cmp(152.4, 115.0, 196.4))
    assert f.verdict(SHAPE) == "undecided" and undecided(f, 3.0)


def test_a_revert_that_gives_back_its_own_step_is_restored_whatever_a_later_step_took() -> None:
    # #145's step (-40.4%) undone on the tip (+70.6% [+65.3, +76.0], its give-back is +67.8%),
    # while a later step keeps the tip 20% below the parent: restored, the rest is the later step's.
    f = fix(-40.4, cmp(-20.0, -21.5, -18.4), cmp(70.6, 65.3, 76.0))
    assert round(f.expected_pct(SHAPE), 1) == 67.8
    assert f.verdict(SHAPE) == "restored" and not undecided(f, 3.0)


def test_decided_short_of_its_step() -> None:
    # Hidden by a later step: no gain on the tip, decided (the H200 demo's #115 on s32768).
    assert fix(-5.8, cmp(-61.7, -61.9, -61.5), cmp(-0.0, -0.4, 0.4)).verdict(SHAPE) == "not restored"
    # A gain, decided, and decidedly short of the step's +50%.
    assert fix(-33.3, cmp(-20.0, -22.0, -18.0), cmp(20.0, 17.0, 23.0)).verdict(SHAPE) == "partly restored"
    # Back at the parent within the threshold, decided: restored.
    assert fix(-33.3, cmp(-0.5, -1.5, 0.5, Verdict.SAME), cmp(49.0, 40.0, 58.0)).verdict(SHAPE) == "restored"
    # Slower than the tip: said first.
    assert fix(-10.0, cmp(-15.0, -16.0, -14.0), cmp(-4.0, -5.0, -3.0)).verdict(SHAPE) == "slower than the tip"


def test_short_of_the_searchs_step_but_maybe_back_at_the_parent_is_not_partly() -> None:
    # The H200 demo's revert of #145 on m54560 (2026-12-04): +54.2% [+48, +60] on the tip where the
    # search's -41.1% step gives back +69.7%, while the same rounds put it at -4.5% [-10.1, +1.5] of
    # the parent: the two intervals disagree on how large the step is, so more trials, not "partly".
    f = fix(-41.1, cmp(-4.5, -10.1, 1.5), cmp(54.2, 48.0, 60.0))
    assert f.verdict(SHAPE) == "undecided" and undecided(f, 3.0)
    assert fix(-41.1, cmp(-9.0, -12.0, -6.0), cmp(54.2, 48.0, 60.0)).verdict(SHAPE) == "partly restored"


def test_a_gain_that_may_be_some_or_none_is_undecided() -> None:
    # [-2, +30] for a step whose give-back is +100%: short of it, but nothing or a part of it.
    assert fix(-50.0, cmp(-40.0, -45.0, -35.0), cmp(12.0, -2.0, 30.0)).verdict(SHAPE) == "undecided"


def test_nothing_measured_asks_for_nothing_more() -> None:
    f = FixResult("c" * 40, None, True, shapes=(SHAPE,))
    assert f.verdict(SHAPE) == "not measured" and not undecided(f, 3.0)


def test_later_steps_are_the_verified_regressions_after_it_on_its_shapes() -> None:
    def step(sha: str, shapes: dict[str, float]) -> Step:
        return Step(
            sha, "p", tuple(shapes), shapes, {k: (v - 1, v + 1) for k, v in shapes.items()}, {k: 1e-9 for k in shapes}
        )

    a, b, c = step("a", {"x": -10.0, "y": -5.0}), step("b", {"y": -20.0}), step("c", {"x": 30.0})
    assert later_steps(a, [a, b, c], ["o", "a", "b", "c"]) == {"x": (), "y": (("b", -20.0),)}
    assert later_steps(b, [a, b, c], ["o", "a", "b", "c"]) == {"y": ()}


def test_back_at_the_parent_within_the_resolution_is_restored() -> None:
    """Seen in a CI run: the revert -6.5% [-14.1, +1.8] from its parent with a 15% resolution, its
    gain on the tip too noisy to reach the step's whole give-back: back at the parent is restored."""
    f = fix(-78.8, cmp(-6.5, -14.1, 1.8), cmp(400.0, 150.0, 700.0), min_step=15.0)
    assert f.verdict(SHAPE) == "restored"
    assert fix(-78.8, cmp(-6.5, -16.0, 1.8), cmp(400.0, 150.0, 700.0), min_step=15.0).verdict(SHAPE) == "undecided"


def test_the_runs_pooled_noise_decides_a_revert_on_two_trials_a_side() -> None:
    """verify_fixes compares with the noise the search measured (samples.compare_pooled): two trials
    a side of a quiet GPU tell "restored", where each side's own spread (Welch, t of 2.9 for the 90%
    interval at two a side) leaves it undecided and buys four times the trials."""
    parent, revert, tip = [0.994, 1.008], [1.007, 0.992], [0.949, 0.939]  # a 0.6%-noise GPU, a -5.5% step
    pool = PooledNoise(sd=0.006, raw_sd=0.006, df=40)
    alone = fix(-5.5, compare(parent, revert, 3.0, 0.01, SHAPE), compare(tip, revert, 3.0, 0.01, SHAPE))
    pooled = fix(
        -5.5,
        compare_pooled(parent, revert, 3.0, 0.01, SHAPE, pool),
        compare_pooled(tip, revert, 3.0, 0.01, SHAPE, pool),
    )
    assert undecided(alone, 3.0)
    assert pooled.verdict(SHAPE) == "restored" and not undecided(pooled, 3.0)

"""stats.compare: three-way verdicts on ratios, intervals that cover the truth, equivalence for SAME."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bisector.model import Verdict
from bisector.search.samples import pair_sd
from bisector.search.stats import compare, holds, log_sd, noise_cv, without_wild


def _noisy(rng: np.random.Generator, level: float, cv: float, n: int) -> list[float]:
    return list(level * np.exp(rng.normal(0.0, cv, n)))


def test_clear_regression_is_different_with_its_size() -> None:
    rng = np.random.default_rng(1)
    c = compare(_noisy(rng, 1.0, 0.005, 8), _noisy(rng, 0.9, 0.005, 8), min_step_pct=1.0, alpha=0.01, shape="fa")
    assert c.verdict is Verdict.DIFFERENT
    assert c.shape == "fa" and c.n_before == 8 and c.n_after == 8
    assert -11.0 < c.change_pct < -9.0
    assert c.ci95[0] < c.change_pct < c.ci95[1]
    assert c.p_value < 1e-6


def test_improvement_is_positive() -> None:
    rng = np.random.default_rng(2)
    c = compare(_noisy(rng, 1.0, 0.005, 6), _noisy(rng, 1.05, 0.005, 6), 1.0, 0.01)
    assert c.verdict is Verdict.DIFFERENT and c.change_pct > 4.0


def test_no_change_with_enough_trials_is_same() -> None:
    rng = np.random.default_rng(3)
    c = compare(_noisy(rng, 1.0, 0.005, 12), _noisy(rng, 1.0, 0.005, 12), 1.0, 0.01)
    assert c.verdict is Verdict.SAME
    assert c.ci95[0] > -1.0 and c.ci95[1] < 1.0


def test_noisy_small_sample_is_unknown() -> None:
    rng = np.random.default_rng(4)
    c = compare(_noisy(rng, 1.0, 0.05, 3), _noisy(rng, 1.0, 0.05, 3), 1.0, 0.01)
    assert c.verdict is Verdict.UNKNOWN


def test_significant_but_below_minimum_size_is_not_different() -> None:
    rng = np.random.default_rng(5)
    c = compare(_noisy(rng, 1.0, 0.0005, 20), _noisy(rng, 0.995, 0.0005, 20), 1.0, 0.01)
    assert c.p_value < 1e-6
    assert c.verdict is Verdict.SAME  # -0.5% with a tight interval: proven smaller than 1%


def test_interval_covers_the_truth_about_95_percent() -> None:
    rng = np.random.default_rng(6)
    truth = (0.97 - 1.0) * 100
    covered = sum(_covers(rng, truth) for _ in range(400))
    assert 0.91 <= covered / 400 <= 0.985


def _covers(rng: np.random.Generator, truth: float) -> bool:
    # lognormal noise: the true change of the geometric means is exactly `truth`
    c = compare(_noisy(rng, 1.0, 0.02, 6), _noisy(rng, 0.97, 0.02, 6), 1.0, 0.01)
    return c.ci95[0] <= truth <= c.ci95[1]


def test_false_different_rate_is_below_alpha() -> None:
    rng = np.random.default_rng(7)
    hits = sum(
        compare(_noisy(rng, 1.0, 0.02, 6), _noisy(rng, 1.0, 0.02, 6), 1.0, 0.01).verdict is Verdict.DIFFERENT
        for _ in range(2000)
    )
    assert hits / 2000 < 0.01


def test_constant_samples_do_not_divide_by_zero() -> None:
    same = compare([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], 1.0, 0.01)
    assert same.verdict is Verdict.SAME and same.p_value == 1.0
    diff = compare([1.0, 1.0, 1.0], [0.9, 0.9, 0.9], 1.0, 0.01)
    assert diff.verdict is Verdict.DIFFERENT and math.isclose(diff.change_pct, -10.0)


def test_single_samples_are_never_significant() -> None:
    c = compare([1.0], [0.5], 1.0, 0.01)
    assert c.verdict is Verdict.UNKNOWN and c.p_value == 1.0


def test_empty_and_non_positive_inputs() -> None:
    assert compare([], [1.0, 1.0], 1.0, 0.01).verdict is Verdict.UNKNOWN
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, 0.0], [1.0, 1.0], 1.0, 0.01, shape="gemm")


def test_holds_is_looser_on_size_than_detection() -> None:
    rng = np.random.default_rng(8)
    c = compare(_noisy(rng, 1.0, 0.002, 24), _noisy(rng, 0.9915, 0.002, 24), 1.0, 0.01)
    assert c.p_value < 1e-6 and abs(c.change_pct) < 1.0
    assert c.verdict is not Verdict.DIFFERENT
    assert holds(c, -1.0, 1.0, 0.01)  # a step seen before at >= 1% is confirmed
    assert not holds(c, +1.0, 1.0, 0.01)  # not in the opposite direction


def test_noise_cv_is_estimated_from_repeats() -> None:
    rng = np.random.default_rng(9)
    groups = [_noisy(rng, level, 0.03, 5) for level in (1.0, 0.9, 1.1, 1.2) * 25]
    assert 0.027 < noise_cv(groups) < 0.033
    assert math.isnan(noise_cv([[1.0], [2.0]]))


def test_a_wild_trial_is_left_out_only_far_out_and_only_a_few() -> None:
    quiet = [1.0, 1.002, 0.998, 1.001, 0.999, 1.0]
    assert without_wild([*quiet, 0.9], 0.002) == tuple(quiet)  # 10% off at a 0.2% noise: out
    assert without_wild([*quiet, 0.99], 0.002) == tuple([*quiet, 0.99])  # 5 sds: kept
    assert without_wild([1.0, 0.9], 0.002) == (1.0, 0.9)  # two trials: no median to trust
    split = [1.0, 1.0, 1.0, 0.9, 0.9]
    assert without_wild(split, 0.002) == tuple(split)  # two of five: bimodal, not disturbed
    assert without_wild([*quiet, 0.9], math.nan) == tuple([*quiet, 0.9])


def test_the_pooled_noise_leaves_out_a_commit_with_a_wild_trial() -> None:
    rng = np.random.default_rng(12)
    groups = [_noisy(rng, 1.0, 0.005, 3) for _ in range(40)]
    quiet, _ = log_sd(groups, screen=True)
    groups[7][1] *= 0.9
    assert log_sd(groups)[0] > 0.008  # what the wild trial made of a plain pooled sd
    assert math.isclose(log_sd(groups, screen=True)[0], quiet, rel_tol=0.05)
    assert log_sd(groups, screen=True)[1] == 78
    groups = [_noisy(rng, 1.0, 0.005, 8) for _ in range(20)]
    assert log_sd(groups, screen=True) == log_sd(groups)  # nothing wild: the same pool


def test_same_is_two_one_sided_tests_at_five_percent() -> None:
    """SAME needs the 90% interval inside +-min_step (TOST at 5% a side), not the 95% one: a change
    whose 95% interval pokes out while its 90% one fits is SAME; the reported interval stays 95%."""
    noise = (0.01, 1000.0)  # a known 1% trial noise, 4 trials a side: se 0.707%
    c = compare([1.0] * 4, [1.006] * 4, 3.0, 0.01, "x", noise)  # +0.6%: 90% to +1.77%, 95% to +2.0%
    assert c.verdict is Verdict.SAME and c.ci95[1] > 1.9
    c = compare([1.0] * 4, [1.016] * 4, 3.0, 0.01, "x", noise)  # +1.6%: 90% to +2.8%, 95% to +3.0%
    assert c.verdict is Verdict.SAME and c.ci95[1] > 3.0
    assert compare([1.0] * 4, [1.019] * 4, 3.0, 0.01, "x", noise).verdict is Verdict.UNKNOWN  # 90% to +3.1%


def test_a_pairs_own_spread_replaces_the_pool_only_beyond_chance() -> None:
    """Two trials a side have 2 degrees of freedom of their own: a spread twice the pool's is
    chance (F of 4 against a 1% point of 5.0 at 2 and 60 df), ten times is not."""
    assert pair_sd(0.01, 60.0, 0.02, 2) == 0.01
    assert pair_sd(0.01, 60.0, 0.10, 2) == 0.10
    assert pair_sd(0.01, 60.0, 0.005, 2) == 0.01  # a quieter pair never narrows the pool's interval
    assert pair_sd(0.01, 60.0, math.nan, 0) == 0.01

"""When a revert's check on the tip is decided, and when it buys more trials (bisector/why/fixes.py)."""

from __future__ import annotations

from bisector.why.fixes import undecided
from bisector.model import Comparison, Verdict
from bisector.why.fixes import FixResult


def fix(*comparisons: tuple[Verdict, float, float, float]) -> FixResult:
    vs = {f"gemm/s{i}": Comparison(f"gemm/s{i}", v, change, (lo, hi), 0.01, 4, 4)
          for i, (v, change, lo, hi) in enumerate(comparisons)}
    return FixResult("c" * 40, None, True, shapes=tuple(vs), vs_parent=vs, vs_tip={})


def test_decided_reverts_take_no_more_trials() -> None:
    assert not undecided(fix((Verdict.SAME, -1.0, -4.0, 2.0)), 10.0)  # back within +-10% of the parent
    assert not undecided(fix((Verdict.DIFFERENT, -62.0, -66.0, -58.0)), 10.0)  # a later step hides it
    assert not undecided(fix((Verdict.DIFFERENT, 30.0, 20.0, 41.0)), 10.0)  # faster than the parent
    assert not undecided(fix(), 10.0)  # nothing measured: nothing more to ask


def test_an_open_place_against_the_parent_buys_more() -> None:
    # The busy machine's case: "26% still missing", but the interval reaches -1.8%.
    assert undecided(fix((Verdict.DIFFERENT, -26.5, -45.0, -1.8)), 10.0)
    assert undecided(fix((Verdict.UNKNOWN, -3.0, -15.0, 9.0)), 10.0)
    # one open shape among decided ones is enough
    assert undecided(fix((Verdict.SAME, 0.0, -2.0, 2.0), (Verdict.UNKNOWN, 5.0, -12.0, 22.0)), 10.0)

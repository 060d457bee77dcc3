"""The progress line's forecast of a search's trials (bisector/estimate/forecast.py), fed the probe
events a real run sends: it goes up when pairs double, the line keeps a time left however far past
its first estimate the run goes, and on a whole search against a simulated probe it converges on
the trials the search took. A fake clock; no assertion on speed."""

from __future__ import annotations

import hashlib
import io
import math
import re
from collections.abc import Callable

from rich.console import Console

from bisector.commands.progress import ProgressLine
from bisector.estimate.forecast import ForecastSettings, SearchForecast
from bisector.measure.probe import ProbeEvent
from bisector.search import SearchSettings, localize
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel
from studies.estimate_accuracy import Announcing

SHAPES = ("fa/s4096", "gemm/8192")


def shas(n: int) -> list[str]:
    return [hashlib.sha1(f"forecast {i}".encode()).hexdigest() for i in range(n)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def noisy_search(observe: Callable[[ProbeEvent], None], commits: list[str], noise: float = 0.06) -> int:
    """A search of `commits` with two steps near its minimum size on a noisy machine (pairs stay
    unclear and double), its events sent to `observe`. Returns the trials it took."""
    steps = (SimStep(commits[13], {SHAPES[0]: 0.8}), SimStep(commits[52], {SHAPES[1]: 1.22}))
    probe = SimulatedProbe(commits, StepModel({s: 1.0 for s in SHAPES}, steps, frozenset({commits[30]})), noise, seed=3)
    settings = SearchSettings(min_step_pct=15.0, alpha=0.05, initial_repeats=3, max_repeats=16)
    return localize(commits, Announcing(probe, observe), settings).trials


def fed(commits: list[str], events: list[tuple[int, int, int, tuple[int, ...]]]) -> SearchForecast:
    forecast = SearchForecast(ForecastSettings(len(commits), initial=2, cap=8), commits)
    for i, k, n, partners in events:
        forecast.trial(commits[i], k, n, [commits[p][:7] for p in partners])
    return forecast


GRID = [(i, k, 2, ()) for i in (0, 40, 10, 20, 30) for k in (1, 2)]


def test_the_estimate_goes_up_when_a_pair_doubles_and_stays_low_when_it_settles() -> None:
    commits = shas(41)
    settled = fed(commits, [*GRID, (5, 1, 1, ())])  # GOOD..g1 differed at once; its middle got one trial
    quiet = settled.trials + settled.remaining()
    doubled = fed(commits, [*GRID, (0, 3, 4, (10,)), (10, 3, 4, (0,)), (10, 4, 4, (0,)), (0, 4, 4, (10,))])
    once = doubled.trials + doubled.remaining()
    for k in range(5, 9):  # unclear at 4 a side too: both up to the cap of 8
        for a, b in ((0, 10), (10, 0)):
            doubled.trial(commits[a], k, 8, [commits[b][:7]])
    twice = doubled.trials + doubled.remaining()
    # one doubling is taken to head for the cap (a pair unclear at n a side is rarely clear at 2n):
    # the second one adds nothing the first did not already expect
    assert quiet < once and abs(once - twice) <= 1
    assert doubled.level() == 8 and settled.level() == 1
    # commits still to be probed are expected at the level the pairs reached
    assert twice - doubled.trials > 2 * (quiet - settled.trials)


def test_the_whole_change_check_is_the_end_of_the_search() -> None:
    commits = shas(41)
    forecast = fed(commits, [*GRID, (0, 3, 4, (40,)), (40, 3, 4, (0,))])
    assert forecast.tail == "check" and forecast.middles_left() == 0
    assert 0 < forecast.remaining() <= 2 * 2  # what is left of the check's 2 x 2 trials


def test_without_the_order_the_forecast_still_counts_down_and_never_reaches_zero() -> None:
    forecast = SearchForecast(ForecastSettings(100, initial=3, cap=12))
    left = []
    for j in range(60):
        forecast.trial(f"c{j // 3}", j % 3 + 1, 3)
        left.append(forecast.remaining())
    assert left[-1] < left[0] and min(left) > 0


def test_a_noisy_search_converges_on_its_trials_and_the_line_always_has_an_eta() -> None:
    commits, clock, out = shas(64), Clock(), io.StringIO()
    progress = ProgressLine.for_range(
        len(commits), 3, order=commits, max_trials=16, console=Console(file=out, width=250), clock=clock, interval_s=0.0
    )
    seen: list[tuple[int, int]] = []

    def watch(event: ProbeEvent) -> None:
        clock.now += 5
        progress(event)
        seen.append((progress.trials, progress.expected_trials))

    with progress:
        final = noisy_search(watch, commits)
    first = seen[0][1]
    assert final > 2 * first  # the pairs doubled: far past what a first look could expect
    # from 3/4 of its trials on within 1.5x of what it took, closer than it was before its middle
    early = [abs(math.log(expected / final)) for trials, expected in seen if trials < final / 2]
    late = [abs(math.log(expected / final)) for trials, expected in seen if trials >= 3 * final / 4]
    assert late and max(late) <= math.log(1.5) and max(late) < max(early) / 2, (max(early), max(late))
    assert abs(seen[-1][1] - final) <= 0.1 * final
    statuses = [line for line in out.getvalue().splitlines() if " | trials " in line]
    counts = [tuple(map(int, re.findall(r"trials (\d+) of ~(\d+)", line)[0])) for line in statuses]
    assert len(statuses) > 100 and all(expected > trials for trials, expected in counts)
    # once a trial has ended there is a time left on every line, however far past the first estimate
    assert all(re.search(r" \| eta ~\d", line) for line, (trials, _) in zip(statuses, counts) if trials >= 2)


def test_the_first_doubling_after_the_grid_expects_the_cap_for_what_is_still_to_compare() -> None:
    commits = shas(41)
    flat = fed(commits, GRID)
    doubled = fed(commits, [*GRID, (0, 3, 4, (10,)), (10, 3, 4, (0,))])
    # the grid's points right of the pair, the pair itself and the middle commits to come at the
    # cap of 8, not at the 4 a side the pair has now
    assert doubled.level() == 8
    assert doubled.remaining() >= 5 * 8 - sum(doubled.count.values()) + 8 * doubled.middles_left()
    assert doubled.trials + doubled.remaining() > 2 * (flat.trials + flat.remaining())


def test_a_doubling_in_a_quiet_run_is_a_close_call_not_the_rule() -> None:
    """Middle commits that got fewer first trials than the protocol's (the search sized them to a
    small noise) make a later doubling count where it is, not at the cap."""
    commits = shas(41)
    sized_down = [(5, 1, 1, ()), (2, 1, 1, ())]  # GOOD..g1 split on one trial a commit
    doubling = [(2, 2, 2, (5,)), (5, 2, 2, (2,))]  # then a close pair: both to 2 (the protocol's)
    before = fed(commits, GRID + sized_down)
    quiet = fed(commits, GRID + sized_down + doubling)
    # the pair is not taken to head for the cap: its two commits' 2 x 6 trials more to 8 are not expected
    assert quiet.trials + quiet.remaining() < before.trials + before.remaining() + 2 * (8 - 2)
    loud = fed(
        commits, [*GRID, (5, 1, 2, ()), (5, 2, 2, ()), (2, 1, 2, ()), (2, 2, 2, ()), (2, 3, 4, (5,)), (5, 3, 4, (2,))]
    )
    assert quiet.level() < 4 and loud.level() == 8
    assert quiet.remaining() < loud.remaining() / 2


GRID81 = [(i, k, 2, ()) for i in (0, 80, 20, 40, 60) for k in (1, 2)]


def test_a_walk_through_wrong_results_is_not_taken_for_more_steps() -> None:
    """Inside a window of wrong results the search asks one trial of each commit outwards from its
    split point (search `split`); those commits are not middle commits of more steps (the H200
    demo's walk of ten took the estimate to 2.3x its final count)."""
    commits = shas(81)
    split = fed(commits, [*GRID81, (30, 1, 1, ())])
    walked = fed(commits, GRID81 + [(i, 1, 1, ()) for i in (30, 29, 31, 28, 32, 27, 33, 26, 34)])
    assert walked.steps() <= split.steps()
    assert walked.remaining() <= split.remaining()
    assert walked.middles() == [commits[30]]


def test_a_pair_past_the_cap_in_the_search_is_not_a_verification() -> None:
    """A pair compared again on one shape goes past the cap (a bridge across wrong results, a shape
    doubled again): with its partners known that is still the search, not a culprit verified (the
    H200 demo's estimate fell to 0.23x its final count there). From a log without partners it reads
    as a verification until the search asks for a new commit to split at."""
    commits = shas(81)
    pair = [(i, k, 8, (j,)) for k in range(3, 9) for i, j in ((20, 40), (40, 20))]
    doubled = fed(commits, GRID81 + pair)
    bridged = fed(commits, GRID81 + pair + [(20, 9, 10, (40,)), (20, 10, 10, (40,))])
    assert bridged.tail is None
    assert bridged.trials + bridged.remaining() >= doubled.trials + doubled.remaining()
    unknown = fed(commits, GRID81)
    for i, k, n, _ in [*pair, (20, 9, 10, ()), (20, 10, 10, ())]:
        unknown.trial(commits[i], k, n)  # partners not known
    assert unknown.tail == "verify"
    for k in (1, 2):
        unknown.trial(commits[30], k, 2)
    assert unknown.tail is None
    assert unknown.trials + unknown.remaining() >= doubled.trials + doubled.remaining()

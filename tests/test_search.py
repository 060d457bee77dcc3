"""search.localize driven by scripted probes: every step, skips, retries, flaky trials, verification."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from bisector.model import Measurement, ProbeStatus, SearchResult, Verdict
from bisector.search import SearchSettings, localize, result_json
from bisector.search.prober import ProbeBase
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel

SHAPES = ("fa/s4096", "fa/s16384", "gemm/8192")
JITTER = (0.0, 0.003, -0.003, 0.0015, -0.0015, 0.002, -0.002, 0.001, -0.001, 0.0025, -0.0025)


def shas(n: int) -> list[str]:
    return [hashlib.sha1(f"commit {i}".encode()).hexdigest() for i in range(n)]


class Scripted(ProbeBase):
    """A dict-driven probe: value(index, shape, trial) with a small fixed jitter; cumulative."""

    def __init__(
        self,
        commits: list[str],
        value: Callable[[int, str, int], float],
        skip: set[int] = frozenset(),
        wrong: dict[int, frozenset[str]] | None = None,
    ) -> None:
        self.commits, self.value, self.skip = commits, value, skip
        self.wrong = wrong or {}
        self.index = {c: i for i, c in enumerate(commits)}
        self.have: dict[str, dict[str, list[float]]] = {}
        self.calls: list[tuple[int, int]] = []
        self.processes = 0  # trial processes run: a call's largest gain over the shapes it measures

    def __call__(self, sha: str, repeats: int) -> Measurement:
        i = self.index[sha]
        self.calls.append((i, repeats))
        if i in self.skip:
            return Measurement(sha, ProbeStatus.SKIP, reason="build failed")
        have = self.have.setdefault(sha, {s: [] for s in SHAPES})
        self.processes += max(0, max(repeats - len(v) for v in have.values()))
        for s, vals in have.items():
            while len(vals) < repeats:
                t = len(vals)
                vals.append(self.value(i, s, t) * (1.0 + JITTER[(t + 3 * i + SHAPES.index(s)) % len(JITTER)]))
        return Measurement(
            sha, ProbeStatus.OK, {s: tuple(v) for s, v in have.items()}, wrong=self.wrong.get(i, frozenset())
        )


def steps_at(table: dict[int, dict[str, float]]) -> Callable[[int, str, int], float]:
    """Level of a shape at commit i: product of the factors of steps at or before i."""

    def value(i: int, shape: str, t: int) -> float:
        level = 1.0
        for at, factors in table.items():
            if i >= at:
                level *= factors.get(shape, 1.0)
        return level

    return value


def found(result, commits: list[str]) -> dict[int, tuple[str, ...]]:
    return {commits.index(s.commit): s.shapes for s in result.steps}


def test_one_step_is_found_exactly_with_few_probes() -> None:
    c = shas(200)
    probe = Scripted(c, steps_at({137: {"fa/s4096": 0.92}}))
    r = localize(c, probe, SearchSettings())
    assert found(r, c) == {137: ("fa/s4096",)}
    step = r.steps[0]
    assert step.parent == c[136] and step.verified and step.is_regression
    assert -8.6 < step.change_pct["fa/s4096"] < -7.4
    lo, hi = step.ci95["fa/s4096"]
    assert lo < -8.0 < hi
    assert step.p_value["fa/s4096"] < 1e-3
    assert r.commits_probed <= 8 + 4  # ceil(log2 200) + 4
    assert r.dropped == () and r.skipped == ()


class Together(Scripted):
    """A Scripted probe that can also measure several commits in one round, and logs those rounds."""

    side_by_side = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[list[int]] = []

    def together(self, wants: dict[str, int]) -> dict[str, Measurement]:
        self.rounds.append(sorted(self.index[sha] for sha in wants))
        return {sha: self(sha, n) for sha, n in wants.items()}


def test_one_device_measures_the_ends_and_the_grid_in_one_round_each() -> None:
    """Their processes then set up at once, and the device does not wait on one commit's setup
    after another's last trial; the search decides exactly as one commit at a time."""
    c = shas(200)
    probe = Together(c, steps_at({137: {"fa/s4096": 0.92}}))
    r = localize(c, probe, SearchSettings())
    assert probe.rounds[:2] == [[0, 199], [50, 100, 149]]
    alone = Scripted(c, steps_at({137: {"fa/s4096": 0.92}}))
    assert found(r, c) == found(localize(c, alone, SearchSettings()), c) == {137: ("fa/s4096",)}
    assert sorted(probe.calls) == sorted(alone.calls)


def test_the_verifications_first_looks_and_the_whole_change_are_asked_in_one_round() -> None:
    """Judged one by one, each candidate's fresh trials set up only once the look before had ended
    (the H200 idle ~2.3 s a verification). They are asked for together, GOOD and BAD's fresh trials
    for the whole change with them; the decisions and the trials asked for are the same."""
    c = shas(120)
    table = {30: {"fa/s16384": 0.9}, 61: {"fa/s4096": 0.93}, 91: {"fa/s4096": 1.08}}
    probe = Together(c, steps_at(table))
    r = localize(c, probe)
    assert found(r, c) == {30: ("fa/s16384",), 61: ("fa/s4096",), 91: ("fa/s4096",)}
    assert {0, 29, 30, 60, 61, 90, 91, 119} in [set(x) for x in probe.rounds]  # the three pairs, GOOD and BAD
    alone = Scripted(c, steps_at(table))
    assert found(localize(c, alone), c) == found(r, c) and sorted(probe.calls) == sorted(alone.calls)


def test_two_steps_in_different_shapes() -> None:
    c = shas(120)
    probe = Scripted(c, steps_at({30: {"fa/s16384": 0.9, "gemm/8192": 0.9}, 91: {"fa/s4096": 0.95}}))
    r = localize(c, probe)
    assert found(r, c) == {30: ("fa/s16384", "gemm/8192"), 91: ("fa/s4096",)}


def test_three_steps_regressions_and_improvements() -> None:
    c = shas(300)
    probe = Scripted(c, steps_at({12: {"gemm/8192": 0.7}, 150: {"fa/s4096": 1.04}, 151: {"fa/s16384": 0.97}}))
    r = localize(c, probe)
    assert found(r, c) == {12: ("gemm/8192",), 150: ("fa/s4096",), 151: ("fa/s16384",)}
    assert [s.is_regression for s in r.steps] == [True, False, True]


def test_improvement_right_next_to_a_regression_in_the_same_shape() -> None:
    # 10% lost at 40, 5% won back at 41: two steps, one commit apart.
    c = shas(100)
    r = localize(c, Scripted(c, steps_at({40: {"fa/s4096": 0.9}, 41: {"fa/s4096": 1.05}})))
    assert sorted(found(r, c)) == [40, 41]
    assert [round(s.change_pct["fa/s4096"]) for s in r.steps] == [-10, 5]


def test_opposite_steps_that_cancel_end_to_end_are_both_found() -> None:
    # GOOD and BAD measure the same; the interior grid points see the dip.
    c = shas(100)
    probe = Scripted(c, steps_at({30: {"gemm/8192": 0.9}, 70: {"gemm/8192": 1 / 0.9}}))
    r = localize(c, probe)
    assert found(r, c) == {30: ("gemm/8192",), 70: ("gemm/8192",)}
    assert [s.is_regression for s in r.steps] == [True, False]


def test_skips_around_the_step_give_a_culprit_range() -> None:
    c = shas(64)
    probe = Scripted(c, steps_at({41: {"fa/s4096": 0.9}}), skip={40, 41, 42})
    r = localize(c, probe)
    assert len(r.steps) == 1
    step = r.steps[0]
    assert step.parent == c[39]
    assert step.candidates == tuple(c[40:44])  # "one of 40..43; 40-42 did not build"
    assert step.commit == c[40]
    assert set(r.skipped) == {c[40], c[41], c[42]}
    assert result_json(r)["steps"][0]["candidates"] == list(c[40:44])


def test_skipped_midpoints_are_walked_around() -> None:
    c = shas(64)
    skip = {16, 31, 32, 33, 47}
    probe = Scripted(c, steps_at({35: {"fa/s16384": 0.95}}), skip=skip)
    r = localize(c, probe)
    assert found(r, c) == {35: ("fa/s16384",)}
    assert r.steps[0].candidates == ()
    assert set(r.skipped) <= {c[k] for k in skip}


def test_skipped_endpoints_move_inwards() -> None:
    c = shas(40)
    r = localize(c, Scripted(c, steps_at({20: {"fa/s4096": 0.9}}), skip={0, 39}))
    assert found(r, c) == {20: ("fa/s4096",)}
    assert c[0] in r.skipped and c[39] in r.skipped


def test_unknown_buys_more_trials_until_clear() -> None:
    # 1.5% step under noise of 1%: three trials each cannot tell, more can.
    c = shas(80)
    model = StepModel({s: 1.0 for s in SHAPES}, (SimStep(c[50], {"fa/s4096": 0.985}),), frozenset())
    probe = SimulatedProbe(c, model, noise_cv=0.01, seed=3)
    r = localize(c, probe)
    assert found(r, c) == {50: ("fa/s4096",)}
    assert max(n for _, n in r.probes) > 3
    assert r.measurements[c[50]].count() > 3


def test_unknown_at_the_cap_is_reported_as_uncertain() -> None:
    c = shas(30)
    model = StepModel({"fa/s4096": 1.0}, (SimStep(c[15], {"fa/s4096": 0.99}),), frozenset())
    r = localize(c, SimulatedProbe(c, model, noise_cv=0.05, seed=1), SearchSettings(max_repeats=12))
    assert r.steps == ()
    assert r.uncertain and all(u.shapes == ("fa/s4096",) for u in r.uncertain)
    assert len({(u.before, u.after) for u in r.uncertain}) == len(r.uncertain)  # one entry per pair
    assert result_json(r)["uncertain"][0]["shapes"] == ["fa/s4096"]
    # the pairs stop doubling at the cap; GOOD and BAD then get their few fresh trials of step 5
    assert max(n for sha, n in r.probes if sha not in (c[0], c[-1])) == 12


@pytest.mark.parametrize("seed", range(6))
def test_flaky_noisy_trials_still_give_the_exact_culprits(seed: int) -> None:
    c = shas(150)
    model = StepModel(
        {s: 1.0 for s in SHAPES},
        (SimStep(c[44], {"fa/s4096": 0.9, "gemm/8192": 0.92}), SimStep(c[101], {"fa/s16384": 1.08})),
        frozenset({c[7], c[77], c[120]}),
    )
    r = localize(c, SimulatedProbe(c, model, noise_cv=0.03, seed=seed))
    assert sorted(found(r, c)) == [44, 101]
    # a false candidate of these noisy trials is dropped at its verification in ~1 run of 10 (3-4 of
    # seeds 0-29, with and without `split_on_moved`): a verification's cost, no false step
    assert len(r.dropped) <= 1


def hidden_while_the_grid_is_measured(
    step_at: int, factor: float, grid_trials: int
) -> Callable[[int, str, int], float]:
    """A machine whose speed wandered: while the first `grid_trials` trials of each shape ran, the
    commits from `step_at` on read as fast as their parents; from then on, `factor` slower."""
    seen: dict[str, int] = {}

    def value(i: int, shape: str, t: int) -> float:
        seen[shape] = seen.get(shape, 0) + 1
        return factor if i >= step_at and seen[shape] > grid_trials else 1.0

    return value


def test_a_step_the_grid_missed_is_found_by_accounting_for_the_whole_change() -> None:
    # GOOD, BAD and the 3 interior points read the same in their first 3 trials each: no pair
    # differs, so the search alone finds nothing. GOOD and BAD measured again side by side differ
    # by 30%, which no step accounts for; the range is bisected on fresh trials and the step found.
    c = shas(30)
    r = localize(c, Scripted(c, hidden_while_the_grid_is_measured(20, 0.7, grid_trials=15)))
    assert found(r, c) == {20: tuple(sorted(SHAPES))}
    assert r.steps[0].verified
    no_recheck = localize(
        c, Scripted(c, hidden_while_the_grid_is_measured(20, 0.7, grid_trials=15)), SearchSettings(rechecks=0)
    )
    assert no_recheck.steps == ()


def test_a_range_whose_steps_account_for_it_costs_only_the_question() -> None:
    c = shas(60)
    probe = Scripted(c, steps_at({25: {"fa/s4096": 0.8}, 41: {"gemm/8192": 1.3}}))
    r = localize(c, probe)
    assert sorted(found(r, c)) == [25, 41]
    plain = Scripted(c, steps_at({25: {"fa/s4096": 0.8}, 41: {"gemm/8192": 1.3}}))
    localize(c, plain, SearchSettings(rechecks=0))
    extra = {i: n for i, n in probe.calls}, {i: n for i, n in plain.calls}
    # the same commits probed; GOOD and BAD alone got more trials (3 each, side by side)
    assert set(extra[0]) == set(extra[1])
    assert {i for i in extra[0] if extra[0][i] != extra[1][i]} == {0, 59}
    assert all(extra[0][i] - extra[1][i] == 3 for i in (0, 59))


def test_verification_drops_a_step_that_does_not_hold() -> None:
    # Commit 50's first three trials are 6% slow (a glitch); fresh trials are normal.
    c = shas(100)

    def value(i: int, shape: str, t: int) -> float:
        return 0.94 if i == 50 and t < 3 and shape == "fa/s4096" else 1.0

    probe = Scripted(c, value)
    r = localize(c, probe)
    assert r.steps == ()
    assert {c.index(s.commit) for s in r.dropped} == {50, 51}
    assert all(not s.verified for s in r.dropped)
    # verification asked for more trials than the commit already had (cumulative probe)
    asked = [n for i, n in probe.calls if i == 50]
    assert asked == sorted(asked) and asked[-1] > asked[0]


def test_without_verification_the_glitch_is_reported_unverified() -> None:
    c = shas(100)
    probe = Scripted(c, lambda i, s, t: 0.94 if i == 50 and t < 3 and s == "fa/s4096" else 1.0)
    r = localize(c, probe, SearchSettings(verify=False))
    assert sorted(found(r, c)) == [50, 51]
    assert all(not s.verified for s in r.steps)


def test_wrong_results_are_surfaced_and_never_look_fast() -> None:
    # Commit 60 on is 30% "faster" in gemm, but its output is wrong there.
    c = shas(100)
    wrong = {i: frozenset({"gemm/8192"}) for i in range(60, 100)}
    probe = Scripted(c, steps_at({60: {"gemm/8192": 1.3}, 20: {"fa/s4096": 0.9}}), wrong=wrong)
    r = localize(c, probe)
    assert found(r, c) == {20: ("fa/s4096",)}
    assert r.wrong[c[99]] == frozenset({"gemm/8192"})
    assert result_json(r)["wrong"][c[99]] == ["gemm/8192"]


def test_no_change_costs_only_the_grid() -> None:
    c = shas(500)
    r = localize(c, Scripted(c, lambda i, s, t: 1.0))
    assert r.steps == () and r.dropped == ()
    assert r.commits_probed == 5
    assert r.uncertain == ()  # noiseless equal trials settle as SAME


def test_json_form() -> None:
    c = shas(50)
    r = localize(c, Scripted(c, steps_at({25: {"fa/s4096": 0.9}})))
    out = result_json(r, prs={c[25]: 974})
    assert out["steps"][0]["commit"] == c[25] and out["steps"][0]["pr"] == 974
    assert out["steps"][0]["shapes"] == ["fa/s4096"]
    assert set(out["steps"][0]["ci95"]) == {"fa/s4096"} and len(out["steps"][0]["ci95"]["fa/s4096"]) == 2
    assert out["probes"] == r.commits_probed and out["trials"] == r.trials and out["skipped"] == []


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        SearchSettings(initial_repeats=30, max_repeats=24)
    with pytest.raises(ValueError):
        SearchSettings(alpha=0.7)
    assert Verdict.UNKNOWN.value == "unknown"


def test_a_probe_that_stops_giving_trials_does_not_hang() -> None:
    # Every trial past the third crashes: the search must stop asking, not loop.
    c = shas(40)
    inner = SimulatedProbe(c, StepModel({"a": 1.0}, (SimStep(c[20], {"a": 0.99}),), frozenset()), 0.05, seed=2)

    def probe(sha: str, repeats: int) -> Measurement:
        return inner(sha, min(repeats, 3))

    r = localize(c, probe)
    assert r.steps == () and r.uncertain
    assert r.trials == 3 * r.commits_probed


def test_a_commit_that_fails_on_a_later_probe_keeps_its_trials() -> None:
    c = shas(40)
    inner = Scripted(c, steps_at({20: {"fa/s4096": 0.9}}))
    state = {"n": 0}

    def probe(sha: str, repeats: int) -> Measurement:
        state["n"] += 1
        if sha == c[19] and repeats > 3:  # the parent's rebuild for verification fails
            return Measurement(sha, ProbeStatus.SKIP, reason="flaky build")
        return inner(sha, repeats)

    r = localize(c, probe)
    had = max(n for sha, n in r.probes if sha == c[19] and n <= 3)  # what it measured before the failure
    assert c[19] not in r.skipped and r.measurements[c[19]].count() >= had
    assert {s.commit for s in r.steps} | {s.commit for s in r.dropped} == {c[20]}


def test_step_just_after_a_wrong_result_window_is_found():
    """gemm is wrong from 22 to 30; a gemm step at 33 must still be found, bridging the window."""
    from bisector.model import Measurement, ProbeStatus
    from bisector.search import SearchSettings, localize

    commits = [f"{i:040x}" for i in range(40)]
    counts: dict[str, int] = {}

    def probe(sha: str, repeats: int) -> Measurement:
        i = int(sha, 16)
        counts[sha] = max(counts.get(sha, 0), repeats)
        n = counts[sha]
        noise = [1.0 + 0.002 * ((k * 7 + i) % 5 - 2) for k in range(n)]
        fa = tuple(0.6 * x for x in noise)
        gemm = tuple((0.5 if i >= 33 else 0.6) * x for x in noise)
        wrong = frozenset({"gemm/a"}) if 22 <= i < 31 else frozenset()
        samples = {"fa/a": fa} | ({} if wrong else {"gemm/a": gemm})
        return Measurement(sha, ProbeStatus.OK, samples, wrong)

    result = localize(commits, probe, SearchSettings(min_step_pct=2.0))
    assert [(s.commit, s.shapes) for s in result.steps] == [(commits[33], ("gemm/a",))]
    assert result.steps[0].parent == commits[32]


def test_a_verified_step_names_the_shapes_that_moved_over_all_its_trials() -> None:
    # A step of -30% in one shape and -14% in another, at 6% trial noise and a 12% minimum: four
    # fresh trials alone confirm the smaller one in only ~3 runs of 4; all trials of the pair, once
    # the step holds, name it far more often, and never the shape that did not move.
    c = shas(40)
    model = StepModel({"a": 1.0, "b": 1.0, "c": 1.0}, (SimStep(c[20], {"a": 0.7, "b": 0.86}),), frozenset())
    settings = SearchSettings(min_step_pct=12.0, alpha=0.05, initial_repeats=4, max_repeats=4)
    named = []
    for seed in range(40):
        r = localize(c, SimulatedProbe(c, model, noise_cv=0.06, seed=seed), settings)
        assert found(r, c).keys() == {20}
        named.append(r.steps[0].shapes)
    assert all("a" in s and "c" not in s for s in named)
    assert sum("b" in s for s in named) >= 36


def test_a_noisy_shape_with_its_own_minimum_step_does_not_price_every_commit() -> None:
    # A 10% attention step in 200 commits; the GEMM is flat but its trials vary by ~2% against a 3%
    # minimum step, so "no step" there takes 8 trials a commit. Given its own resolution of 6%, the
    # commits that bisect the attention step get two trials first and four at most.
    c = shas(200)

    def value(i: int, shape: str, t: int) -> float:
        if shape == "gemm/8192":
            u = int.from_bytes(hashlib.sha1(f"{i} {t}".encode()).digest()[:4], "big") / 2**32
            return 1.0 + 0.035 * (u - 0.5) * 2  # uniform +-3.5%: sd 2%
        return 0.9 if shape == "fa/s4096" and i >= 137 else 1.0

    def bisected(settings: SearchSettings) -> list[int]:
        r = localize(c, Scripted(c, value), settings)
        assert found(r, c) == {137: ("fa/s4096",)}
        grid = {0, 50, 100, 149, 199}
        return [
            r.measurements[c[k]].count() for k in range(1, 199) if k not in grid | {136, 137} and c[k] in r.measurements
        ]

    one = SearchSettings(min_step_pct=3.0, max_repeats=8)
    assert min(bisected(one)) == 8
    own = bisected(SearchSettings(min_step_pct=3.0, min_steps={"gemm": 6.0}, max_repeats=8))
    assert own and max(own) <= 4, own
    with pytest.raises(ValueError):
        SearchSettings(min_steps={"gemm": 0.0})


def test_a_wrong_result_window_is_crossed_with_one_trial_a_wrong_commit() -> None:
    """gemm is wrong from 12 to 30 (a grid point among them) and steps at 33. Trials of a noisy
    machine (sd 2%: a new commit's first look is several trials) are spent on the usable commits:
    a commit inside the window shows it is wrong in one."""
    commits = [f"{i:040x}" for i in range(40)]
    counts: dict[str, int] = {}

    def probe(sha: str, repeats: int) -> Measurement:
        i = int(sha, 16)
        counts[sha] = max(counts.get(sha, 0), repeats)
        noise = [
            1.0 + 0.035 * (int.from_bytes(hashlib.sha1(f"{i} {k}".encode()).digest()[:4], "big") / 2**31 - 1)
            for k in range(counts[sha])
        ]
        wrong = frozenset({"gemm/a"}) if 12 <= i < 31 else frozenset()
        gemm = tuple((0.5 if i >= 33 else 0.6) * x for x in noise)
        return Measurement(
            sha, ProbeStatus.OK, {"fa/a": tuple(0.6 * x for x in noise)} | ({} if wrong else {"gemm/a": gemm}), wrong
        )

    result = localize(commits, probe, SearchSettings(min_step_pct=5.0, max_repeats=8))
    assert [s.commit for s in result.steps] == [commits[33]]
    grid = {0, 10, 20, 29, 39}
    inside = [counts[c] for k, c in enumerate(commits) if 12 <= k < 31 and c in counts and k not in grid]
    usable = [counts[c] for k, c in enumerate(commits) if not 12 <= k < 31 and c in counts and k not in grid]
    assert inside and max(inside) == 1, inside
    assert max(usable) > 1  # the machine's noise asks for more than one trial where a commit is usable


@pytest.mark.parametrize("seed", range(4))
def test_wild_trials_of_a_quiet_gpu_cost_no_unsure_pairs(seed: int) -> None:
    """One trial in twenty read 5-10% off (another process's setup during its timed section) on a
    0.4% noise: each pair is decided on its other trials, as the quiet trials deserve, not run to
    the cap and reported unsure."""
    c = shas(120)
    model = StepModel({s: 1.0 for s in SHAPES}, (SimStep(c[70], {"fa/s4096": 0.95}),), frozenset())
    probe = SimulatedProbe(c, model, noise_cv=0.004, seed=seed, wild=0.05)
    r = localize(c, probe, SearchSettings(min_step_pct=3.0, max_repeats=8))
    assert sorted(found(r, c)) == [70]
    # A split point measured once, on its moved shape alone (`split_on_moved`), can read wild and be
    # followed: its verification drops it (a look's cost, no false step)
    assert r.uncertain == () and len(r.dropped) <= 1
    wild = sum(
        abs(v / probe.level[sha][s] - 1) > 0.04
        for sha, per in probe.samples.items()
        for s, vals in per.items()
        for v in vals
    )
    assert wild > 0  # the series had wild trials to leave out


@pytest.mark.parametrize("n, window, step", [(40, (22, 31), 33), (40, (21, 33), 35), (80, (30, 60), 65)])
def test_inside_a_wrong_result_window_every_commit_is_named_a_measurement_ahead(
    n: int, window: tuple[int, int], step: int
) -> None:
    """Probing outwards past wrong results asks for one commit after another: each is named for
    prefetch before the commit measured before it, so its setup is off the path (the H200 demo's
    bridge set up nine commits cold, one by one; then five more where the walk passed a commit
    already measured, or began at the bridge's first split). The search's decisions are the same."""
    from bisector.model import Measurement, ProbeStatus
    from bisector.search import SearchSettings, localize

    commits = [f"{i:040x}" for i in range(n)]
    counts: dict[str, int] = {}
    log: list[tuple[str, list[int]]] = []  # ("prefetch", commits) or ("measure", [commit]), in order

    class Probe(ProbeBase):
        def __call__(self, sha: str, repeats: int) -> Measurement:
            i = int(sha, 16)
            if sha not in counts:
                log.append(("measure", [i]))
            counts[sha] = max(counts.get(sha, 0), repeats)
            noise = [1.0 + 0.002 * ((k * 7 + i) % 5 - 2) for k in range(counts[sha])]
            wrong = frozenset({"gemm/a"}) if window[0] <= i < window[1] else frozenset()
            samples = {"fa/a": tuple(0.6 * x for x in noise)} | (
                {} if wrong else {"gemm/a": tuple((0.5 if i >= step else 0.6) * x for x in noise)}
            )
            return Measurement(sha, ProbeStatus.OK, samples, wrong)

        def prefetch(self, shas: list[str]) -> None:
            log.append(("prefetch", [int(s, 16) for s in shas]))

    result = localize(commits, Probe(), SearchSettings(min_step_pct=2.0))
    assert [(s.commit, s.shapes) for s in result.steps] == [(commits[step], ("gemm/a",))]
    measured = [i for what, (i, *_) in ((w, x) for w, x in log if x) if what == "measure"]
    assert len([i for i in measured if window[0] <= i < window[1]]) >= 3  # the walk went through the window
    named: set[int] = set()
    before_last: set[int] = set()  # named before the last measurement began
    late = []
    for what, ks in log:
        if what == "prefetch":
            named |= set(ks)
            continue
        if ks[0] not in (0, n - 1) and ks[0] not in before_last:
            late.append(ks[0])
        before_last = set(named)
    assert late == [], (late, log)


@pytest.mark.parametrize("seed", range(4))
def test_a_build_slow_only_in_the_search_s_worker_lineage_does_not_verify(seed: int) -> None:
    # The CPU demo's CI failure: a neutral build (here 15, the middle of a grid pair) read 21% slow
    # in all its trials forked from the run's one zygote. Fresh trials come from a new lineage
    # (`independent`), where it reads as it is: no step there, and the real one beside it is found.
    c = shas(40)
    model = StepModel({"gemm/tall": 1.0}, (SimStep(c[17], {"gemm/tall": 0.8}),), frozenset())
    probe = SimulatedProbe(c, model, noise_cv=0.04, seed=seed, lineage_bias={c[15]: 0.79})
    r = localize(c, probe)
    assert found(r, c) == {17: ("gemm/tall",)}
    assert any(s.commit in (c[15], c[16]) for s in r.dropped)  # looked at, and not verified
    assert probe.opened >= 2  # ... in two new lineages: the pass's, and a second look's before it was dropped
    # The same trials from one lineage only (a probe that cannot renew one, as before): the biased
    # build passes for a step.
    blind = SimulatedProbe(c, model, noise_cv=0.04, seed=seed, lineage_bias={c[15]: 0.79})
    assert 15 in found(localize(c, lambda sha, n: blind(sha, n)), c)


@pytest.mark.parametrize("seed", range(4))
def test_a_step_whose_parent_reads_slow_in_the_verification_s_lineage_only_gets_a_second_look(seed: int) -> None:
    # Run 203 of the CPU demo in CI (studies/results/cpu-slow-builds.txt, part 9): a real -54% step's
    # parent read ~2x slow in the verification's lineage only, as slow as the step's commit, so its
    # fresh trials denied it. Another new lineage looks before the step is dropped.
    c = shas(40)
    model = StepModel({"gemm/tall": 1.0}, (SimStep(c[17], {"gemm/tall": 0.46}),), frozenset())

    def run(second_look: bool) -> tuple[SearchResult, SimulatedProbe]:
        probe = SimulatedProbe(c, model, noise_cv=0.04, seed=seed, lineage_bias={c[16]: 0.46}, biased_lineage=1)
        return localize(c, probe, SearchSettings(second_look=second_look)), probe

    found_now, probe = run(True)
    assert found(found_now, c) == {17: ("gemm/tall",)}
    assert probe.opened >= 2  # the pass's lineage and the second look's
    step = found_now.steps[0]
    assert -60 < step.change_pct["gemm/tall"] < -48  # judged without the biased look's trials
    assert found(run(False)[0], c) == {}  # one look: the biased lineage drops the real step


class Shaped(Scripted):
    """A Scripted probe that also measures only some shapes of measured commits (`shaped`), as the
    StoreProbe does, and logs which shapes each of those calls asked for."""

    shapes_alone = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shaped_calls: list[tuple[int, tuple[str, ...]]] = []

    def shaped(self, wants: dict[str, dict[str, int]]) -> dict[str, Measurement]:
        out = {}
        for sha, per in wants.items():
            i = self.index[sha]
            self.shaped_calls.append((i, tuple(sorted(per))))
            have = self.have.setdefault(sha, {s: [] for s in SHAPES})
            self.processes += max(0, max(n - len(have[s]) for s, n in per.items()))
            for s, n in per.items():
                while len(have[s]) < n:
                    t = len(have[s])
                    have[s].append(self.value(i, s, t) * (1.0 + JITTER[(t + 3 * i + SHAPES.index(s)) % len(JITTER)]))
            out[sha] = Measurement(sha, ProbeStatus.OK, {s: tuple(have[s][:n]) for s, n in per.items()})
        return out


def test_a_pair_unclear_on_one_shape_doubles_that_shape_alone() -> None:
    """The GEMM is flat but noisy (sd 2% against a 3% minimum step), attention quiet with a 10% step:
    the pairs the GEMM leaves unclear double the GEMM only, so the commits bisected on attention keep
    few attention trials; the culprit is the same one a probe measuring every shape finds."""
    c = shas(200)

    def value(i: int, shape: str, t: int) -> float:
        if shape == "gemm/8192":
            u = int.from_bytes(hashlib.sha1(f"{i} {t}".encode()).digest()[:4], "big") / 2**32
            return 1.0 + 0.035 * (u - 0.5) * 2
        return 0.9 if shape == "fa/s4096" and i >= 137 else 1.0

    settings = SearchSettings(min_step_pct=3.0, max_repeats=8, split_on_moved=False)  # doublings alone
    probe = Shaped(c, value)
    r = localize(c, probe, settings)
    assert found(r, c) == found(localize(c, Scripted(c, value), settings), c) == {137: ("fa/s4096",)}
    assert probe.shaped_calls and any(shapes == ("gemm/8192",) for _, shapes in probe.shaped_calls)
    counts = [{s: len(v) for s, v in m.samples.items()} for m in r.measurements.values()]
    assert any(n["gemm/8192"] > n["fa/s4096"] for n in counts), counts  # attention not doubled with the GEMM
    assert sum(n["fa/s4096"] for n in counts) < sum(n["gemm/8192"] for n in counts)


def test_the_search_counts_the_trial_processes_that_measured_some_shapes_only() -> None:
    """A search whose pairs doubled the GEMM alone and whose split points timed some shapes: its
    trials (and `--json`'s) are the trial processes the probe ran, not each commit's smallest
    per-shape count (an H100 demo's `--json` said 124 for a search of 326)."""
    c = shas(200)
    u = lambda i, t: int.from_bytes(hashlib.sha1(f"{i} {t}".encode()).digest()[:4], "big") / 2**32  # noqa: E731

    def value(i: int, shape: str, t: int) -> float:
        if shape == "gemm/8192":
            return (0.9 if i >= 61 else 1.0) * (1.0 + 0.07 * (u(i, t) - 0.5))
        return 0.9 if shape == "fa/s4096" and i >= 137 else 1.0

    probe = Shaped(c, value)
    r = localize(c, probe, SearchSettings(min_step_pct=3.0, max_repeats=8))
    assert found(r, c) == {61: ("gemm/8192",), 137: ("fa/s4096",)}
    smallest = sum(m.count() for m in r.measurements.values())
    assert r.trials == probe.processes == result_json(r)["trials"]
    assert r.trials > smallest  # the processes that measured some shapes only
    plain = Scripted(c, value)
    assert localize(c, plain, SearchSettings(min_step_pct=3.0, max_repeats=8)).trials == plain.processes


def test_split_points_are_measured_on_the_shapes_their_part_moved_in() -> None:
    """A GEMM step bisected among attention shapes: its split points time the GEMM alone
    (`split_on_moved`; on the H200 demo attention was ~3 s of a first trial's 4.3 s on the device),
    the culprit is the one a probe measuring every shape finds, and the step's pair is measured
    on every shape before it is judged, so that the shapes it moved are named from all of them."""
    c = shas(200)
    value = steps_at({137: {"gemm/8192": 0.9, "fa/s16384": 0.95}})
    settings = SearchSettings(min_step_pct=3.0, max_repeats=8)
    probe = Shaped(c, value)
    r = localize(c, probe, settings)
    assert found(r, c) == found(localize(c, Scripted(c, value), settings), c) == {137: ("fa/s16384", "gemm/8192")}
    grid = {0, 199, *(round(199 * q / 4) for q in (1, 2, 3))}
    points = {c.index(sha): m for sha, m in r.measurements.items()}
    lacking = {i for i, m in points.items() if set(m.samples) != set(SHAPES)}
    assert lacking and not lacking & grid  # some split points lack a shape; GOOD, BAD and the grid have all
    assert all("fa/s4096" not in points[i].samples for i in lacking)  # the shape that never moved
    assert set(points[136].samples) == set(points[137].samples) == set(SHAPES)  # the step's pair, filled


def test_split_on_every_shape_when_asked() -> None:
    """`split_on_moved=False`: every commit the search measures has every shape."""
    c = shas(120)
    r = localize(
        c, Shaped(c, steps_at({70: {"gemm/8192": 0.9}})), SearchSettings(min_step_pct=3.0, split_on_moved=False)
    )
    assert found(r, c) == {70: ("gemm/8192",)}
    assert all(set(m.samples) == set(SHAPES) for m in r.measurements.values())


def test_a_verification_looks_again_only_at_the_shapes_still_in_question() -> None:
    """A GEMM step whose pair attention already shows the same (every shape measured at its split
    points): the verification's fresh trials time the GEMM and leave attention out
    (`verify_on_open`); with the setting off they time every shape. The step, its shapes and the
    GEMM's trials are the same either way."""
    c = shas(200)
    value = steps_at({137: {"gemm/8192": 0.9}})

    def pair_counts(on: bool) -> dict[str, int]:
        settings = SearchSettings(min_step_pct=3.0, max_repeats=8, split_on_moved=False, verify_on_open=on)
        r = localize(c, Shaped(c, value), settings)
        assert found(r, c) == {137: ("gemm/8192",)} and r.steps[0].verified
        return {s: len(r.measurements[c[136]].samples[s]) + len(r.measurements[c[137]].samples[s]) for s in SHAPES}

    on, off = pair_counts(True), pair_counts(False)
    assert on["gemm/8192"] == off["gemm/8192"]
    assert on["fa/s4096"] < off["fa/s4096"] and on["fa/s16384"] < off["fa/s16384"], (on, off)

"""A latency shape whose trial-to-trial noise cannot resolve its minimum step within the trial cap is
decided at what the cap resolves (bisector/search/latency_floor.py): its pairs end SAME instead of
undecided at the cap, a large latency step is still found and verified, the report says so once.
Simulated probes on simulated clocks (bisector/search/simulate_drift.py), as tests/test_decisions.py."""

from dataclasses import replace

import pytest

from bisector.model import LATENCY_KEY
from bisector.search import SearchSettings, localize
from bisector.search.decisions import decision_lines
from bisector.search.latency_floor import latency_min_step, resolvable_pct
from bisector.search.samples import PooledNoise
from bisector.search.simulate import SimStep, StepModel
from bisector.search.simulate_drift import DriftingProbe

SHAPES = ("gemm/m64", "gemm/m128")
# as the real-library ranges ran: 2 trials first, 8 at most, the decisions of issue #59 on
SETTINGS = SearchSettings(min_step_pct=3.0, initial_repeats=2, max_repeats=8, decision_trials=6, zone=True)


def shas(n: int) -> list[str]:
    return [f"{k:04d}".ljust(40, "b") for k in range(n)]


def search(latency_cv: float, latency_steps: dict[int, float], seed: int = 0):  # type: ignore[no-untyped-def]
    commits = shas(60)
    flat = StepModel(dict.fromkeys(SHAPES, 100.0), (), frozenset())
    lat = StepModel(
        dict.fromkeys(SHAPES, 1.0),
        tuple(SimStep(commits[k], {"gemm/m64": f}) for k, f in latency_steps.items()),
        frozenset(),
    )
    probe = DriftingProbe(commits, flat, control_drift_pct=0.0, latency=lat, latency_cv=latency_cv, seed=seed)
    return commits, probe, localize(commits, probe, SETTINGS)


def undecided_latency(result) -> list:  # type: ignore[no-untyped-def]
    return [z for z in result.decisions.zone if not z.decided and z.shape.endswith(LATENCY_KEY)]


def test_the_latency_minimum_step_is_raised_to_what_the_cap_resolves_on_the_pooled_noise():
    noisy = PooledNoise(sd=0.45, raw_sd=0.45, df=100)  # a Triton RMSNorm's eager latency on a busy host
    quiet = PooledNoise(sd=0.004, raw_sd=0.004, df=100)
    assert latency_min_step("rms/t256k" + LATENCY_KEY, 3.0, noisy, 8) == resolvable_pct(noisy, 8) > 50.0
    assert resolvable_pct(noisy, 24) < resolvable_pct(noisy, 8)  # a larger cap resolves a smaller step
    assert latency_min_step("rms/t256k" + LATENCY_KEY, 3.0, quiet, 8) == 3.0  # never lowered
    assert latency_min_step("rms/t256k" + LATENCY_KEY, 3.0, None, 8) == 3.0  # the noise not known yet
    assert latency_min_step("rms/t256k", 3.0, noisy, 8) == 3.0  # kernel time: untouched


def test_a_noisy_latency_with_no_step_ends_decided_not_undecided_at_the_cap():
    """Eager latency +-40% a trial, no step anywhere: on a 3% minimum step every latency pair ran to
    the cap (8 a side) and was listed undecided; on the raised one they end SAME, in fewer trials."""
    _, probe, result = search(0.4, {})
    assert not result.steps
    assert undecided_latency(result) == [] and not result.uncertain
    assert probe.trials < 40  # 44 with every latency pair at the cap


def test_a_large_latency_step_is_still_found_and_verified():
    """Eager callers +60% per call at one commit, +-12% a trial: found and verified at its commit,
    on a minimum step raised well above 3% but under the step."""
    commits, _, result = search(0.12, {23: 1 / 1.6})
    assert [(s.commit, s.shapes, s.verified) for s in result.steps] == [
        (commits[23], ("gemm/m64" + LATENCY_KEY,), True)
    ]
    assert result.steps[0].change_pct["gemm/m64" + LATENCY_KEY] == pytest.approx(
        -37.5, abs=10.0
    )  # +-12% a trial, few trials a side
    floors = {f.shape: f for f in result.decisions.latency_floors}
    assert 3.0 < floors["gemm/m64" + LATENCY_KEY].tested_at < 37.5
    assert len(undecided_latency(result)) <= 3  # 14 on the 3% minimum step


def test_the_report_says_once_per_shape_at_what_latency_steps_were_tested():
    from bisector.report import markdown
    from tests.test_report import make_data

    _, _, result = search(0.4, {})
    lines = decision_lines(result)
    mine = [line for line in lines if "call latency varies" in line]
    assert sorted(line.split(":latency:")[0] for line in mine) == sorted(SHAPES)
    for line in mine:
        assert "% between trials" in line and "latency steps tested at >= " in line
        assert "% only, what 8 trials a side resolve (3% asked)" in line
    assert "no step >= 3%" in lines  # the kernel time's minimum step, as configured
    text = markdown.render(replace(make_data(), decided=tuple(lines)))
    assert f"- {mine[0]}" in text


def test_the_report_states_a_latency_shape_s_minimum_step_as_it_was_tested():
    """The step table and the unsure pairs' line name the raised step, not the configured 3%."""
    from bisector.report import markdown
    from bisector.search.decisions import raised_min_steps
    from tests.test_report import make_data

    _, _, result = search(0.4, {})
    raised = raised_min_steps(result)
    assert set(raised) == {s + LATENCY_KEY for s in SHAPES} and all(v > 3.0 for v in raised.values())
    data = replace(make_data(), min_steps=raised)
    shape = SHAPES[0] + LATENCY_KEY
    assert data.min_step(shape) == raised[shape] and data.min_step(SHAPES[0]) == data.min_step_pct
    assert f"{shape} {raised[shape]:g}%" in data.min_step_text
    assert f"{shape} {raised[shape]:g}%" in markdown.render(data)

"""Where a run's time went (bisector/measure/time_spent.py): the device time of trials counts their
setups' brief loans, and a commit's later trials are set against their warm-up and timed work, in
the run's `--json` and in the report's paragraph, also when re-made from stored trials."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from bisector.measure.time_spent import Stage, describe, from_records, summarize
from bisector.runner.executor import Timeline


def timeline(
    slot: int, go: float, *, brief: tuple[float, float] | None = None, warmup: float = 0.1, timed: float = 0.4
) -> Timeline:
    return Timeline(
        "a" * 40,
        None,
        0,
        submitted=go - 3.0,
        started=go - 3.0,
        ready=go - 2.5,
        assigned=go - 2.5,
        want=go - 0.5,
        go=go,
        release=go + 0.8,
        ended=go + 0.9,
        source="fork",
        phases={"warmup": warmup, "timed": timed},
        briefs=(brief,) if brief else (),
        slot=slot,
    )


def test_later_trials_set_their_device_time_against_their_warm_up_and_timed_work() -> None:
    lines = [timeline(0, 10.0, timed=0.1), timeline(1, 11.0, brief=(10.85, 10.91)), timeline(2, 12.0)]
    t = summarize(lines, [Stage("search", 7.0, 13.0)], devices=1)
    # device time: every section (0.8 s each) and the one brief loan (0.06 s)
    assert t.device_s == pytest.approx(3 * 0.8 + 0.06)
    assert t.later == pytest.approx(
        {"trials": 2.0, "device_s": 1.66, "warmup_timed_s": 1.0, "device_over_warmup_timed": 1.66}
    )
    assert t.as_json()["later_trials"]["device_over_warmup_timed"] == pytest.approx(1.66)
    assert "A later trial held the device 0.83 s for 0.50 s of warm-up and timed work (1.66x)." in describe(t)
    # no later trial, or none whose slot is known: no figure, and no sentence
    first_only = summarize(lines[:1], [Stage("search", 7.0, 13.0)], devices=1)
    assert first_only.later == {} and first_only.as_json()["later_trials"] == {}
    assert "later trial" not in describe(first_only)


def test_timelines_remade_from_stored_trials_keep_their_slot_and_brief_loans() -> None:
    stored = timeline(3, 20.0, brief=(18.0, 18.04))
    line = {**stored.as_dict(), "briefs": [[18.0, 18.04]]}
    record = SimpleNamespace(
        sha="a" * 40,
        patch_hash=None,
        slot=3,
        protocol={
            "timeline": line,
            "log_path": "t/3/log.txt",
            "phases": [["warmup", "x", 20.1, 20.2], ["timed", "x", 20.2, 20.6]],
        },
    )
    (got,), stages = from_records([record])
    assert got.slot == 3 and got.briefs == ((18.0, 18.04),) and got.device_s == pytest.approx(0.84)
    assert summarize([got], stages, devices=1).later["device_over_warmup_timed"] == pytest.approx(0.84 / 0.5)


def test_a_device_section_is_named_part_by_part_and_setup_phases_do_not_count_in_it() -> None:
    """A trial names "inputs" and "compile" in its setup (staged ahead) and under the lock (staged
    there): only the second is device time. What no phase names, the setup's loans and the exit the
    device waits for are parts of their own; the breakdown gives each part's median and total."""
    from bisector.measure.time_spent import device_breakdown
    from bisector.runner.executor import ON_DEVICE, phase_seconds

    go, release = 100.0, 101.0
    spans = [
        ["inputs", "s", 90.0, 90.5],
        ["precompile", "s", 90.5, 99.0],
        ["device", None, go, release],
        ["inputs", "s", 100.001, 100.05],
        ["compile", "s", 100.05, 100.6],
        ["warmup", "s", 100.6, 100.7],
        ["timed", "s", 100.7, 100.9],
        ["telemetry", None, 101.0, 101.4],
    ]
    seconds = phase_seconds(spans, go, release)
    assert seconds["inputs"] == pytest.approx(0.549) and seconds[ON_DEVICE + "inputs"] == pytest.approx(0.049)
    assert ON_DEVICE + "precompile" not in seconds and ON_DEVICE + "telemetry" not in seconds
    assert ON_DEVICE + "device" not in seconds
    line = Timeline(
        "a" * 40,
        None,
        0,
        submitted=80.0,
        started=80.0,
        ready=80.5,
        assigned=80.5,
        want=99.0,
        go=go,
        release=release,
        ended=101.5,
        phases=seconds,
        briefs=((89.9, 90.6),),
        slot=1,
    )
    b = device_breakdown([line, replace(line, go=None, release=None)])
    assert b.trials == 1  # one never held the device
    assert b.median_s["compile"] == pytest.approx(0.55) and b.median_s["timed"] == pytest.approx(0.2)
    assert b.median_s["unnamed"] == pytest.approx(1.0 - 0.049 - 0.55 - 0.1 - 0.2)
    assert b.median_s["setup_loans"] == pytest.approx(0.7) and b.median_s["after_release"] == pytest.approx(0.5)
    assert b.ratios == pytest.approx(((1.0 + 0.7) / 0.3,)) and b.held_ratios == pytest.approx(
        ((1.0 + 0.7 + 0.5) / 0.3,)
    )
    assert "compile" in "\n".join(b.lines()) and b.as_json()["ratio_median"] == pytest.approx(5.667, abs=1e-3)
    # the exit the device waits for is capped where the bot lends it on anyway (TEARDOWN_GRACE_S on a GPU)
    assert device_breakdown([replace(line, ended=release + 9.0)]).median_s["after_release"] == pytest.approx(1.0)
    assert summarize([line], [Stage("search", 80.0, 102.0)], devices=1).as_json()["later_device_parts"]["trials"] == 1

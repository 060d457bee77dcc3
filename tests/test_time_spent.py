"""Where a run's time went (bisector/measure/time_spent.py): the device time of trials counts their
setups' brief loans, and a commit's later trials are set against their warm-up and timed work, in
the run's `--json` and in the report's paragraph, also when re-made from stored trials."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bisector.runner.executor import Timeline
from bisector.measure.time_spent import Stage, describe, from_records, summarize


def timeline(slot: int, go: float, *, brief: tuple[float, float] | None = None, warmup: float = 0.1,
             timed: float = 0.4) -> Timeline:
    return Timeline("a" * 40, None, 0, submitted=go - 3.0, started=go - 3.0, ready=go - 2.5, assigned=go - 2.5,
                    want=go - 0.5, go=go, release=go + 0.8, ended=go + 0.9, source="fork",
                    phases={"warmup": warmup, "timed": timed}, briefs=(brief,) if brief else (), slot=slot)


def test_later_trials_set_their_device_time_against_their_warm_up_and_timed_work() -> None:
    lines = [timeline(0, 10.0, timed=0.1), timeline(1, 11.0, brief=(10.85, 10.91)), timeline(2, 12.0)]
    t = summarize(lines, [Stage("search", 7.0, 13.0)], devices=1)
    # device time: every section (0.8 s each) and the one brief loan (0.06 s)
    assert t.device_s == pytest.approx(3 * 0.8 + 0.06)
    assert t.later == pytest.approx({"trials": 2.0, "device_s": 1.66, "warmup_timed_s": 1.0,
                                     "device_over_warmup_timed": 1.66})
    assert t.as_json()["later_trials"]["device_over_warmup_timed"] == pytest.approx(1.66)
    assert "A later trial held the device 0.83 s for 0.50 s of warm-up and timed work (1.66x)." in describe(t)
    # no later trial, or none whose slot is known: no figure, and no sentence
    first_only = summarize(lines[:1], [Stage("search", 7.0, 13.0)], devices=1)
    assert first_only.later == {} and first_only.as_json()["later_trials"] == {}
    assert "later trial" not in describe(first_only)


def test_timelines_remade_from_stored_trials_keep_their_slot_and_brief_loans() -> None:
    stored = timeline(3, 20.0, brief=(18.0, 18.04))
    line = {**stored.as_dict(), "briefs": [[18.0, 18.04]]}
    record = SimpleNamespace(sha="a" * 40, patch_hash=None, slot=3,
                             protocol={"timeline": line, "log_path": "t/3/log.txt",
                                       "phases": [["warmup", "x", 20.1, 20.2], ["timed", "x", 20.2, 20.6]]})
    (got,), stages = from_records([record])
    assert got.slot == 3 and got.briefs == ((18.0, 18.04),) and got.device_s == pytest.approx(0.84)
    assert summarize([got], stages, devices=1).later["device_over_warmup_timed"] == pytest.approx(0.84 / 0.5)

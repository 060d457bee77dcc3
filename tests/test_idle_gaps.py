"""The idle-gap study's reading of what the device waited for, on timelines as trials record them."""

from __future__ import annotations

import pytest

from bisector.runner.executor import Timeline
from studies.idle_gaps import WAITS, waited_for

LAST = Timeline("a" * 40, None, 0, submitted=0.0, want=1.0, go=2.0, release=5.0, ended=5.1)


@pytest.mark.parametrize(
    "nxt, why",
    [
        # submitted only once the last had released: the search decided after it
        (Timeline("b" * 40, None, 0, submitted=5.2, want=7.0, go=7.0), "asked after the last ended"),
        # a spare unheld only then is the same wait, whatever was set up before
        (Timeline("b" * 40, None, 0, submitted=1.0, want=3.0, go=5.6, unheld=5.5), "asked after the last ended"),
        # set up and asking before the release: only the device's hand-off
        (Timeline("b" * 40, None, 0, submitted=1.0, want=4.0, go=5.3), "hand-off"),
        (Timeline("b" * 40, None, 0, submitted=1.0, want=3.0, go=5.3, unheld=4.5), "hand-off"),
        # asked before the release, set up only after it
        (Timeline("b" * 40, None, 0, submitted=1.0, want=6.0, go=6.0, unheld=4.0), "held, not set up when asked"),
        (Timeline("b" * 40, None, 0, submitted=4.0, want=6.5, go=6.5), "fresh, set up late"),
    ],
)
def test_a_gap_is_read_by_when_the_next_trial_was_asked_for_and_set_up(nxt: Timeline, why: str) -> None:
    assert why in WAITS
    assert waited_for(LAST, nxt) == why

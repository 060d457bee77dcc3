"""The progress display: plain lines when stderr is not a terminal, a live line when it is.

A fake clock drives the throttle and the estimate, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import io
import re

from rich.console import Console

from bisector.commands.progress import ProgressLine, bisection_probes
from bisector.measure.probe import ProbeEvent

A, B = "a" * 40, "b" * 40


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plain(expected_probes: int = 4, trials: int = 2) -> tuple[ProgressLine, io.StringIO, Clock]:
    out, clock = io.StringIO(), Clock()
    progress = ProgressLine(expected_probes, trials, console=Console(file=out, width=200), clock=clock)
    return progress, out, clock


def test_not_a_terminal_gives_plain_lines_with_commit_action_trials_and_eta() -> None:
    progress, out, clock = plain()
    assert progress.live is None
    with progress:
        progress(ProbeEvent(A, "build"))
        clock.now += 10
        progress(ProbeEvent(A, "trial", "trial 1/2"))
        clock.now += 30
        progress(ProbeEvent(B, "trial", "trial 1/2"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "progress: aaaaaaa build | commits 1 | trials 0 of ~8 | elapsed 0 s | eta ?"
    assert lines[1] == "progress: aaaaaaa trial 1/2 | commits 1 | trials 1 of ~8 | elapsed 10 s | eta ?"
    # one trial done in 40 s, 7 of the 8 expected left: ~280 s
    assert lines[2] == "progress: bbbbbbb trial 1/2 | commits 2 | trials 2 of ~8 | elapsed 40 s | eta ~5 min"
    assert lines[3] == "progress: done: commits 2, trials 2, elapsed 40 s"
    assert out.getvalue().endswith("\n") and "trial trial" not in out.getvalue()


def test_past_the_first_estimate_the_line_re_estimates_and_keeps_a_time_left() -> None:
    progress, out, clock = plain(expected_probes=1, trials=2)
    with progress:
        for k in range(1, 4):
            clock.now += 10
            progress(ProbeEvent(A if k < 3 else B, "trial", f"trial {k}/3"))
    last = out.getvalue().splitlines()[-2]
    # 3 trials where 2 were expected: a tenth more (one trial) is left, 2 done in 30 s: ~30 s
    assert last == "progress: bbbbbbb trial 3/3 | commits 2 | trials 3 of ~4 | elapsed 30 s | eta ~30 s"
    assert "past the" not in out.getvalue()


def test_each_later_stage_brings_its_own_estimate() -> None:
    """Once the search has found its steps, the reverts, interactions and hunk searches that follow
    are counted: the estimate is the trials so far plus the stage's; a stage that announces none
    (no culprit to search hunks in) adds nothing."""
    progress, out, clock = plain(expected_probes=1, trials=2)
    with progress:
        progress(ProbeEvent("", "stage", "search"))
        for k in range(1, 5):  # the search took 4 trials, 10 s each, 2 estimated
            clock.now += 10
            progress(ProbeEvent(A, "trial", f"trial {k}/4"))
        progress(ProbeEvent("", "stage", "fixes", expect=6))
        clock.now += 10
        progress(ProbeEvent(B, "trial", "trial 1/2", patch_hash="f" * 16))
        progress(ProbeEvent("", "stage", "hunks"))  # nothing to measure there
    lines = out.getvalue().splitlines()
    assert lines[0] == "progress: aaaaaaa trial 1/4 | search | commits 1 | trials 1 of ~2 | elapsed 10 s | eta ?"
    # past the 2 expected: re-estimated (a tenth more, one trial), 3 done in 40 s: ~27 s left
    assert lines[3] == "progress: aaaaaaa trial 4/4 | search | commits 1 | trials 4 of ~5 | elapsed 40 s | eta ~27 s"
    # 4 trials in 40 s, 6 more expected: ~60 s left
    assert lines[4] == "progress: stage fixes: ~6 trials | commits 1 | trials 4 of ~10 | elapsed 40 s | eta ~1 min"
    # 5 trials, 4 done in 50 s, 6 left of 10: ~75 s, shown as ~1 min
    assert lines[5] == (
        "progress: bbbbbbb +patch ffffffff trial 1/2 | fixes | commits 2 | trials 5 of ~10 | elapsed 50 s | eta ~1 min"
    )
    assert lines[6].startswith("progress: stage hunks | commits 2 | trials 5 of ~5")


def test_repeated_identical_actions_are_throttled_but_every_new_one_is_printed() -> None:
    progress, out, clock = plain()
    with progress:
        for k in range(1, 5):  # four trials of one commit within 3 s: one line
            progress(ProbeEvent(A, "trial", f"trial {k}/4"))
            clock.now += 1
        progress(ProbeEvent(A, "trial", "trial 5/8"))  # 4 s after the first line: still quiet
        clock.now += 2
        progress(ProbeEvent(A, "trial", "trial 6/8"))  # 6 s after it: printed
        progress(ProbeEvent(A, "skip", "# worktree /x (created)\nsource_dir 'src' missing in commit aaaa"))
        progress(ProbeEvent(B, "build"))  # another commit: printed at once
    lines = [line.split(" | ")[0] for line in out.getvalue().splitlines()]
    assert lines == [
        "progress: aaaaaaa trial 1/4",
        "progress: aaaaaaa trial 6/8",
        "progress: aaaaaaa skip: source_dir 'src' missing in commit aaaa",
        "progress: bbbbbbb build",
        "progress: done: commits 2, trials 6, elapsed 6 s",
    ]


def test_patched_builds_are_named_and_differ_from_the_plain_commit() -> None:
    progress, out, _ = plain()
    with progress:
        progress(ProbeEvent(A, "trial", "trial 1/2"))
        progress(ProbeEvent(A, "trial", "trial 1/2", patch_hash="0123456789abcdef"))
    assert "aaaaaaa +patch 01234567 trial 1/2" in out.getvalue().splitlines()[1]


def test_the_estimate_uses_the_real_range_size_and_the_stages_that_follow() -> None:
    assert bisection_probes(3) == 10 and bisection_probes(40) == 18 and bisection_probes(1000) == 26
    first = {
        n: ProgressLine.for_range(n, 2, console=Console(file=io.StringIO())).expected_trials for n in (3, 40, 1000)
    }
    assert 2 * 3 <= first[3] < first[40] < first[1000]  # GOOD, BAD and the middle commit at least
    later = ProgressLine.for_range(40, 2, stages=("fixes", "hunks"), console=Console(file=io.StringIO()))
    assert later.expected_trials > first[40]
    progress, _, _ = plain(expected_probes=2, trials=3)  # the nightly A/B: 6 trials
    for _ in range(4):
        progress(ProbeEvent(A, "trial", "trial 1/3"))
    progress.expect_range(5)  # then a bisection of 5 commits, forecast on top of the 4 trials
    assert progress.forecast is not None and progress.forecast.settings.commits == 5
    assert progress.expected_trials >= 4 + 5 * 3


def test_a_terminal_gets_one_live_line_that_ends_with_a_newline() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, force_interactive=True, width=120)
    progress = ProgressLine(4, 2, console=console, live=True)
    with progress:
        progress(ProbeEvent(A, "trial", "trial 3/4"))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # without cursor and colour codes
    assert progress.live is not None and "aaaaaaa" in text and "trial 3/4" in text
    assert "trial trial" not in text and "progress:" not in text
    assert text.endswith("\n")  # the summary printed next starts on its own line


def test_trials_run_in_parallel_are_all_counted_and_a_build_means_they_ended() -> None:
    progress, out, clock = plain(expected_probes=4, trials=2)
    with progress:
        progress(ProbeEvent(A, "trial", "trial 1/2 (+1 in parallel)"))
        clock.now += 20
        progress(ProbeEvent(B, "build"))  # both trials of A are done: 2 in 20 s, 6 left
    assert out.getvalue().splitlines()[1] == (
        "progress: bbbbbbb build | commits 2 | trials 2 of ~8 | elapsed 20 s | eta ~1 min"
    )

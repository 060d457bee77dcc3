"""The whole-run estimate's later stages (bisector/estimate/later_stages.py): what a check costs over
its rounds, a stage followed from its trials as they start (the events verify_fixes and the hunk
searches send, as a recorded run's log holds them), and the progress line built on both. The
demo's real repository for the hunk searches' first rounds; a fake clock; no assertion on speed."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from types import SimpleNamespace

import git
import pytest
from rich.console import Console

from bisector.commands.progress import ProgressLine
from bisector.demo.demo_config import demo_config
from bisector.estimate.later_stages import HUNK_ROUNDS, LaterModel, StageCost, StageTracker, model_for
from bisector.measure.probe import ProbeEvent
from bisector.model import Step
from bisector.why import culprit_hunks
from studies import progress_replay

ROOT = Path(__file__).resolve().parent.parent
TIP, P1, P2 = "e" * 40, "1" * 40, "2" * 40
R1, R2 = "r1000000", "r2000000"  # the reverts' patch hashes (8 hex digits in a log, 16 live)


def model(q: float) -> LaterModel:
    return LaterModel({"fixes": StageCost(3.0, q, "double"), "hunks": StageCost(4.0, q, "rounds")})


def test_a_check_costs_its_first_round_when_decided_at_once_and_the_cap_when_never() -> None:
    assert model(0.0).growth("fixes", 2, 8) == 1.0 and model(0.0).growth("hunks", 2, 8) == 1.0
    assert model(1.0).growth("fixes", 2, 8) == pytest.approx(4.0)  # 2, 4, 8 trials a side
    assert model(1.0).growth("fixes", 3, 16) == pytest.approx(16 / 3)  # 3, 6, 12, 16
    assert model(1.0).growth("hunks", 2, 8) == HUNK_ROUNDS  # n more a round, MAX_ROUNDS rounds
    assert 1.0 < model(0.5).growth("fixes", 2, 8) < model(0.7).growth("fixes", 2, 8) < 4.0
    assert HUNK_ROUNDS == culprit_hunks.MAX_ROUNDS
    # during the search: per culprit, the stages' first rounds grown alike, linear in the culprits
    m = model(0.5)
    assert m.trials(2.0, 2, 8, ("fixes", "hunks")) == pytest.approx(2 * m.trials(1.0, 2, 8, ("fixes", "hunks")))
    assert m.trials(1.0, 2, 8, ("fixes",)) == pytest.approx(3.0 * 2 * m.growth("fixes", 2, 8))
    assert m.trials(1.0, 2, 8, ()) == 0.0


def test_the_h200_later_stages_cost_more_per_culprit_than_the_cpu_ones() -> None:
    """The recorded demos (studies/later_stages.py): a check of the H200's 3% step stays open more
    often than one of the CPU's 15-20% (none went on past its first round in the CPU runs at
    cc7a9ff, quiet or busy), so a culprit costs more of the protocol's trials there."""
    gpu, cpu = model_for("cuda"), model_for("cpu")
    assert model_for(None) is gpu and model_for("rocm") is gpu
    assert gpu.growth("fixes", 2, 8) > cpu.growth("fixes", 3, 16) >= 1.0
    assert gpu.trials(1.0, 2, 8, ("fixes", "hunks")) / 2 > cpu.trials(1.0, 3, 16, ("fixes", "hunks")) / 3


def fixes_stage(tracker: StageTracker, rounds: list[list[tuple[str, str | None, int]]]) -> list[float]:
    """Rounds of a reverts batch as Batch.run sends them: each round's checks (commit, patch, trials
    before the round) get `size` trials each, in ABBA passes; the tracker's remaining() after each trial."""
    out = []
    for size, checks in rounds:  # type: ignore[misc]
        for r in range(size):
            for sha, patch, before in checks if r % 2 == 0 else checks[::-1]:
                tracker.trial((sha, patch), before + r + 1, before + size)
                out.append(tracker.remaining())
    return out


def test_a_stage_is_followed_round_by_round() -> None:
    """verify_fixes's batch: the tip, two parents and two reverts at n = 2, announced 10; a revert
    still open doubles it with its parent and the tip (4 a side); the other pair is decided."""
    m = model(0.5)
    tracker = StageTracker("fixes", m, 10, 2, 8)
    assert tracker.remaining() == pytest.approx(10 * m.growth("fixes", 2, 8))  # nothing seen yet
    first = [(TIP, None, 6), (P1, None, 10), (P2, None, 4), (TIP, R1, 0), (TIP, R2, 0)]
    left = fixes_stage(tracker, [(2, first)])  # type: ignore[list-item]
    # the first round done: no first round left, each check open on with chance q
    assert tracker.first_seen == 10 and left[-1] == pytest.approx(5 * (0.5 * 2 + 0.25 * 4))
    second = [(TIP, None, 8), (P1, None, 12), (TIP, R1, 2)]
    left = fixes_stage(tracker, [(2, second)])  # type: ignore[list-item]
    # the pass named the three still open: P2 and R2 are decided; the three at 4 go on to 8 with chance q
    assert [c.open for c in tracker.checks.values()] == [True, True, False, True, False]
    assert left[-1] == pytest.approx(3 * 0.5 * 4) and tracker.opened == 3 and tracker.closed == 2
    third = [(TIP, None, 10), (P1, None, 14), (TIP, R1, 4)]
    left = fixes_stage(tracker, [(4, third)])  # type: ignore[list-item]
    assert left[-1] == 0.0  # at the cap: nothing more to come
    tracker.end()
    assert tracker.opened == 6 and tracker.closed == 2  # P2 and R2 stopped short of the cap


def test_the_same_build_in_the_next_part_is_a_new_check() -> None:
    """After the reverts, the interactions measure the tip and each single revert again with fresh
    combinations: a batch past a check's cap (or not its doubling) starts it anew, and the checks
    the new part leaves out are decided."""
    tracker = StageTracker("fixes", model(0.5), 10 + 8, 2, 8)
    fixes_stage(tracker, [(2, [(TIP, None, 6), (P1, None, 10), (TIP, R1, 0)])])  # type: ignore[list-item]
    fixes_stage(tracker, [(2, [(TIP, None, 8), (P1, None, 12), (TIP, R1, 2)])])  # type: ignore[list-item]
    fixes_stage(tracker, [(4, [(TIP, None, 10), (P1, None, 14), (TIP, R1, 4)])])  # type: ignore[list-item]
    seen = tracker.first_seen
    combo = "c0000000"
    fixes_stage(tracker, [(2, [(TIP, None, 14), (TIP, R1, 8), (TIP, combo, 0)])])  # type: ignore[list-item]
    assert tracker.first_seen == seen + 6  # three first rounds of the interactions
    assert not tracker.checks[(P1, None)].open and tracker.checks[(TIP, R1)].start == 8


def plain_line(device: str) -> tuple[ProgressLine, io.StringIO]:
    out = io.StringIO()
    cfg = demo_config(device, Path("demo"))
    line = ProgressLine.for_range(
        41,
        cfg.protocol.trials,
        max_trials=cfg.protocol.max_trials,
        stages=("fixes", "hunks"),
        device=cfg.device,
        console=Console(file=out, width=200),
        clock=lambda: 1000.0,
    )
    return line, out


def replay_line(order: list[str], stages: tuple[str, ...]) -> tuple[ProgressLine, io.StringIO, list[float]]:
    """A plain line over `order` on the H200 demo's protocol, its clock the list's one value (set it
    to move time), for the log-replay tests."""
    cfg = demo_config("cuda", Path("demo"))
    out, now = io.StringIO(), [0.0]
    line = ProgressLine.for_config(
        cfg, order, stages, console=Console(file=out, width=400), clock=lambda: now[0], live=False
    )
    return line, out, now


def test_the_progress_line_grows_an_announced_stage_and_corrects_it_from_its_trials() -> None:
    line, _ = plain_line("cuda")
    line(ProbeEvent("", "stage", "search"))
    for k in range(1, 5):
        line(ProbeEvent(P1, "trial", f"trial {k}/4"))
    line(ProbeEvent("", "stage", "fixes", expect=10))
    grown = line.expected_trials
    assert grown - 4 > 10 + line.later.trials(line.forecast.steps(), 2, 8, ("hunks",)) - 1  # announced x growth
    for k, (sha, patch) in enumerate([(TIP, None), (P1, None), (TIP, R1)] * 2):
        line(ProbeEvent(sha, "trial", f"trial {k // 3 + 1}/2", patch_hash=patch))
    decided = line.expected_trials  # the first round of 3 checks (of 5 announced) done
    line(ProbeEvent(TIP, "trial", "trial 3/4"))  # the tip doubles: it goes on
    assert line.expected_trials >= decided
    line(ProbeEvent("", "stage", "hunks", expect=0))
    assert line.expected_trials == line.trials  # nothing announced, nothing after it


def test_the_hunk_searches_announce_the_levels_find_hunks_measures(demo) -> None:
    """On the demo's repository: two hunks in two groups, one level of two subsets and the parent;
    the fast-math commit's three hunks in two groups, one level (not ceil(log2 3) = 2); the
    sliding-window commit through its plumbing, the base alone first, then ceil(log2 4) levels
    over its four behaviour-changing pieces (the Triton kernel's new bound `hi` and the loop that
    reads it are one piece)."""
    repo = git.Repo(demo.path)
    session = SimpleNamespace(config=demo_config("cuda", Path(demo.path)), repo=repo)

    def step(plant: str) -> Step:
        sha = demo.sha(plant)
        return Step(sha, f"{sha}^", ("x",), {"x": -10.0}, {"x": (-11.0, -9.0)}, {"x": 1e-9}, verified=True)

    n = 2  # the H200 demo's protocol.trials
    assert culprit_hunks.expected_trials(session, [step("gemm_stages")]) == 3 * n  # type: ignore[arg-type]
    assert culprit_hunks.expected_trials(session, [step("fastmath_dropped")]) == 3 * n  # type: ignore[arg-type]
    assert culprit_hunks.expected_trials(session, [step("fa_window")]) == 2 * n + 3 * n * 2  # type: ignore[arg-type]


def test_a_log_the_line_wrote_replays_to_the_estimates_it_shows(tmp_path: Path) -> None:
    """studies/progress_replay.py reads a plain (or stamped) log back into events, the trials the
    throttle left out put back: replayed through the same code, every line shows the estimate the
    log shows."""
    order = [hashlib.sha1(f"replay {i}".encode()).hexdigest() for i in range(41)]
    line, out, now = replay_line(order, ("fixes", "hunks"))
    events = [
        (0, 1, 2),
        (40, 1, 2),
        (0, 2, 2),
        (40, 2, 2),
        (10, 1, 2),
        (20, 1, 2),
        (30, 1, 2),
        (10, 2, 2),
        (20, 2, 2),
        (30, 2, 2),
        (0, 3, 4),
        (10, 3, 4),
        (10, 4, 4),
        (0, 4, 4),
        (5, 1, 2),
        (5, 2, 2),
        (5, 3, 4),
        (5, 4, 4),
        (7, 1, 2),
        (7, 2, 2),
        (8, 1, 2),
        (8, 2, 2),
    ]
    with line:
        for i, k, n in events:
            now[0] += 1.5
            line(ProbeEvent(order[i], "trial", f"trial {k}/{n}"))
        line(ProbeEvent("", "stage", "fixes", expect=10))
        for k in range(1, 3):
            for sha, patch in ((order[-1], None), (order[7], None), (order[-1], "abcdef0123456789")):
                now[0] += 1.5
                line(ProbeEvent(sha, "trial", f"trial {k}/2", patch_hash=patch))
    lines, final = progress_replay.parse(out.getvalue())
    assert final is None or final == line.trials
    # a device call's log, each line stamped with seconds since its start (.device/stamp.py), reads the same
    stamped = "".join(f"[{0.5 * k:8.2f}] {text}\n" for k, text in enumerate(out.getvalue().splitlines()))
    assert progress_replay.parse(stamped) == (lines, final)
    assert sum(e.action == "trial" for e, _ in progress_replay.unthrottled(lines)) == line.trials
    shown = [ln.shown for ln in lines if ln.event is not None]
    replayed = progress_replay.replay(lines, order, "cuda", ("fixes", "hunks"))
    assert [r for ln, r in zip(lines, replayed) if ln.event is not None] == shown


def test_a_resumed_call_is_judged_against_its_own_count(tmp_path: Path) -> None:
    """studies/progress_accuracy.py: a resumed call's line counts that call's trials, so its final
    is the "this call" count of its done line, not the whole run's."""
    from studies import progress_accuracy

    log = tmp_path / "call-2.log"
    log.write_text(
        "progress: aaaaaaa trial 1/2 | fixes | commits 3 | trials 30 of ~45 | elapsed 1 min | eta ~1 min\n"
        "progress: done: 42 commits; 471 trials (327 on the commits, 144 on patched builds); "
        "this call: 40 trials, 2.8 min\n"
    )
    assert progress_accuracy.judge(log, 60.0).startswith(f"| {log} | 40 | 1.12 |")


def test_later_stages_add_trials_per_culprit() -> None:
    later = model_for(None)
    assert later.trials(2.0, 3, 24, ()) == 0
    assert later.trials(2.0, 3, 24, ("fixes", "hunks")) > later.trials(2.0, 3, 24, ("fixes",)) > 0
    assert later.trials(4.0, 3, 24, ("fixes",)) == 2 * later.trials(2.0, 3, 24, ("fixes",))


def test_a_round_whose_partners_the_log_cut_short_replays_as_it_ran() -> None:
    """The plain log cuts a line at 120 characters: in a round of many commits (the verifications'
    first looks and the whole-change check) each line loses its closing parenthesis and some
    partners. The replay puts the round's commits back from the run of such lines, so it reads the
    round as the run did (read as cut, its estimate climbed to 1.6x where the run's stayed at 1.2x)."""
    order = [hashlib.sha1(f"cut {i}".encode()).hexdigest() for i in range(41)]
    line, out, now = replay_line(order, ())
    search = [
        (0, 1, 2),
        (40, 1, 2),
        (0, 2, 2),
        (40, 2, 2),
        (10, 1, 2),
        (20, 1, 2),
        (30, 1, 2),
        (10, 2, 2),
        (20, 2, 2),
        (30, 2, 2),
        (5, 1, 2),
        (5, 2, 2),
        (7, 1, 2),
        (7, 2, 2),
        (8, 1, 2),
        (8, 2, 2),
        (25, 1, 2),
        (25, 2, 2),
        (27, 1, 2),
        (27, 2, 2),
        (28, 1, 2),
        (28, 2, 2),
        (15, 1, 2),
        (15, 2, 2),
        (16, 1, 2),
        (16, 2, 2),
        (35, 1, 2),
        (35, 2, 2),
        (36, 1, 2),
        (36, 2, 2),
    ]
    # four culprits' pairs and the whole change, asked for at once: more partners than a line holds
    ring = [0, 7, 8, 15, 16, 27, 28, 35, 36, 40, 10, 20, 30]
    with line:
        for i, k, n in search:
            now[0] += 1.5
            line(ProbeEvent(order[i], "trial", f"trial {k}/{n}"))
        for k in (3, 4):
            for i in ring:
                now[0] += 1.5
                others = ", ".join(order[j][:7] for j in ring if j != i)
                line(ProbeEvent(order[i], "trial", f"trial {k}/4 (side by side with {others})"))
    lines, _ = progress_replay.parse(out.getvalue())
    assert any(
        "side by side with" in ln.event.detail and not ln.event.detail.rstrip().endswith(")")
        for ln in lines
        if ln.event is not None
    ), "no line was cut: the test shows nothing"
    shown = [ln.shown for ln in lines if ln.event is not None]
    replayed = progress_replay.replay(lines, order, "cuda", ())
    assert [r for ln, r in zip(lines, replayed) if ln.event is not None] == shown

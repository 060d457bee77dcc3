from bisector.model import Measurement, ProbeStatus
from bisector.search.wrong_results import localize_wrong

ORDER = [f"c{i:02d}" for i in range(40)]


def scripted(wrong_from: int, fixed_at: int | None, skips: set[int] = frozenset()):
    calls = []

    def probe(sha: str, repeats: int) -> Measurement:
        calls.append(sha)
        i = ORDER.index(sha)
        if i in skips:
            return Measurement(sha, ProbeStatus.SKIP, reason="does not build")
        bad = wrong_from <= i and (fixed_at is None or i < fixed_at)
        return Measurement(
            sha,
            ProbeStatus.OK,
            {"gemm/a": (1.0,)} | ({} if bad else {"gemm/b": (1.0,)}),
            frozenset({"gemm/b"}) if bad else frozenset(),
        )

    return probe, calls


def test_window_start_and_fix_are_bisected_from_one_wrong_probe():
    probe, calls = scripted(22, 31)
    measured = {ORDER[i]: probe(ORDER[i], 3) for i in (0, 10, 20, 29, 39)}
    calls.clear()
    (window,) = localize_wrong(ORDER, measured, probe)
    assert (window.first, window.fixed, window.shapes) == ("c22", "c31", ("gemm/b",))
    assert window.last_good == "c21"
    assert len(calls) <= 6  # two bisections over gaps of 9 and 10 commits


def test_skipped_commits_are_walked_around_and_open_windows_reach_the_tip():
    probe, _ = scripted(22, None, skips={21, 22})
    measured = {ORDER[i]: probe(ORDER[i], 3) for i in (0, 20, 39)}
    (window,) = localize_wrong(ORDER, measured, probe)
    assert window.first == "c23" and window.fixed is None


def test_nothing_wrong_probes_nothing():
    probe, calls = scripted(99, None)
    measured = {ORDER[i]: probe(ORDER[i], 3) for i in (0, 20, 39)}
    calls.clear()
    assert localize_wrong(ORDER, measured, probe) == ()
    assert calls == []


def test_a_commit_measured_on_other_shapes_neither_ends_nor_starts_a_window():
    """A split point the search measured on attention alone (`split_on_moved`) sits inside the GEMM's
    window: the window is still one, from its first wrong commit to its fix, and a commit asked
    whether it is wrong is measured on the window's shapes when it was not."""
    probe, calls = scripted(22, 31)
    measured = {ORDER[i]: probe(ORDER[i], 3) for i in (0, 10, 20, 29, 39)}
    measured[ORDER[25]] = Measurement(ORDER[25], ProbeStatus.OK, {"fa/x": (1.0,)})
    measured[ORDER[21]] = Measurement(ORDER[21], ProbeStatus.OK, {"fa/x": (1.0,)})
    calls.clear()
    (window,) = localize_wrong(ORDER, measured, probe)
    assert (window.first, window.fixed, window.shapes, window.last_good) == ("c22", "c31", ("gemm/b",), "c21")
    assert "c21" in calls  # asked about, and measured on the GEMM then

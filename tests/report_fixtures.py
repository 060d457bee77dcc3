"""Synthetic ReportData for the report's tests: a range, the commits a search measured in it, and
steps between them, with per-trial values drawn from a seeded generator (no timing involved)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bisector.model import Commit, Comparison, Step, Uncertain, Verdict
from bisector.report.data import ReportData
from bisector.search.evidence import CommitRow, UnsurePair
from bisector.search.wrong_results import WrongResult, WrongWindow
from bisector.store.totals import CallTotals, RunTotals
from bisector.why.culprit_hunks import HunkFinding, HunkTry
from bisector.why.facts import actions, step_moves
from bisector.why.fixes import FixResult


def sha(i: int) -> str:
    return f"{i:04d}" + "c" * 36


def commits(n: int) -> tuple[Commit, ...]:
    """n + 1 commits (GOOD first), one a day from 2026-08-01, PR 1000 + i (none on GOOD)."""
    return tuple(
        Commit(
            sha=sha(i),
            date=f"2026-{8 + i // 28:02d}-{i % 28 + 1:02d}T12:00:00+00:00",
            author="Ada",
            subject=f"change {i}",
            pr=1000 + i if i else None,
        )
        for i in range(n + 1)
    )


def series(
    n: int,
    measured: Sequence[int],
    steps: Mapping[int, float],
    shapes: Sequence[str],
    skipped: Sequence[int] = (),
    wrong: Mapping[int, Sequence[str]] | None = None,
    trials: int = 4,
    noise: float = 0.02,
    seed: int = 0,
    metric: str = "ratio",
) -> ReportData:
    """A range of n commits; `steps` maps a culprit's index to its change in percent (in every
    shape); each measured commit gets `trials` trials of the ratio around its level."""
    rng = random.Random(seed)
    cs = commits(n)
    wrong = wrong or {}
    rows = []
    for i in sorted(measured):
        level = 1.0
        for at, pct in steps.items():
            if i >= at:
                level *= 1 + pct / 100
        ok = [s for s in shapes if s not in wrong.get(i, ())]
        metric_values = {s: tuple(level * 0.6 * rng.gauss(1, noise) for _ in range(trials)) for s in ok}
        control = {s: 500.0 * rng.gauss(1, noise / 2) for s in ok}
        samples = {s: tuple(v * control[s] for v in metric_values[s]) for s in ok}
        rows.append(
            CommitRow(
                cs[i],
                {s: sorted(v)[len(v) // 2] for s, v in samples.items()},
                control,
                {s: sorted(v)[len(v) // 2] for s, v in metric_values.items()},
                {s: trials for s in ok},
                samples,
                metric_values,
            )
        )
    found = []
    order = sorted(measured)
    for at, pct in sorted(steps.items()):
        parent = max(i for i in order if i < at)
        found.append(
            Step(
                commit=sha(at),
                parent=sha(parent),
                shapes=tuple(shapes),
                change_pct={s: pct for s in shapes},
                ci95={s: (pct - 1.5, pct + 1.5) for s in shapes},
                p_value={s: 1e-9 for s in shapes},
                pr=1000 + at,
            )
        )
    wrong_results = tuple(WrongResult(sha(i), s, 0.5, 1.5) for i, ss in sorted(wrong.items()) for s in ss)
    return ReportData(
        title="bisector: synthetic",
        config_name="synthetic",
        upstream="../upstream",
        branch="main",
        good=cs[0],
        bad=cs[-1],
        device="cuda",
        control="torch_cuda",
        machine={"device_name": "NVIDIA H200"},
        protocol={"reps": 6, "warmup": 1, "max_trials": 8},
        shapes=tuple(shapes),
        range_commits=cs,
        rows=tuple(rows),
        steps=tuple(found),
        skipped={sha(i): "ImportError: no module named x" for i in skipped},
        wrong=wrong_results,
        commits_probed=len(measured),
        trials=trials * len(measured),
        min_step_pct=3.0,
        metric={k.split("/", 1)[0]: metric for k in shapes},
    )


# The three ranges the plots are checked on (issue #17).
def demo_range() -> ReportData:
    """The CPU demo's shape: 39 commits, three steps, a skipped commit and a wrong-result window."""
    measured = [0, 2, 4, 5, 6, 8, 10, 12, 13, 14, 15, 17, 19, 20, 21, 22, 23, 25, 27, 29, 31, 34, 39]
    return series(
        39,
        measured,
        {5: +56.0, 13: -30.0, 20: -56.0},
        ("gemm/tall",),
        skipped=[18],
        wrong={22: ("gemm/tall",), 23: ("gemm/tall",), 25: ("gemm/tall",)},
        noise=0.08,
    )


def edge_range() -> ReportData:
    """One step at the very end of a 389-commit range: the search's points crowd at that end."""
    measured = [0, 97, 194, 291, 340, 364, 376, 382, 385, 386, 387, 388, 389]
    return series(389, measured, {389: -21.8}, ("fa/s4096", "fa/s16384"), metric="speed")


def five_step_range() -> ReportData:
    """Five steps, two of them on neighbouring measured commits (their labels would collide)."""
    measured = [0, 3, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 18, 20, 21, 22, 25, 30]
    return series(30, measured, {6: -21.8, 7: -26.6, 11: +12.0, 15: -8.0, 21: +30.0}, ("fa/s1024",))


def dense_range() -> ReportData:
    """More measured commits than fit side by side as labels: the labels are thinned."""
    return series(450, list(range(0, 451, 3)), {300: -10.0}, ("gemm/m8192",), trials=2)


# The sections' golden files read one ReportData with every section present.
def full_report() -> ReportData:
    """Eight commits after GOOD, two suites (fa on full-clock speed, gemm on the ratio): a step in fa
    at #1004 and a smaller one at #1008, a gemm step between #1005 and #1007 next to a wrong result
    (two candidates, unverified), a dropped step, unsure pairs, hunks, a revert partly restoring
    one shape and slowing the other (with wrong results), one that does not apply, a skipped commit."""
    cs = commits(8)
    fa, gemm = ("fa/s4096", "fa/s16384"), "gemm/m8192"
    shapes = (*fa, gemm)
    levels = {
        0: (440.0, 425.0, 0.83),
        2: (441.0, 424.0, 0.831),
        3: (440.5, 425.5, 0.829),
        4: (400.0, 374.0, 0.83),
        5: (399.0, 375.0, 0.83),
        6: (400.5, 373.0, None),
        7: (399.5, 374.5, 0.59),
        8: (384.0, 374.0, 0.589),
    }
    rows = []
    for i, (s4096, s16384, ratio) in levels.items():
        n = 9 if i == 3 else 3
        speed = {"fa/s4096": s4096, "fa/s16384": s16384}
        metric = {k: tuple(v * (1 + 0.002 * (j % 3 - 1)) for j in range(n)) for k, v in speed.items()}
        tf = {k: v - 0.5 for k, v in speed.items()}
        control = {"fa/s4096": 681.0, "fa/s16384": 711.0}
        if ratio is not None:
            metric[gemm] = tuple(ratio * (1 + 0.001 * (j % 3 - 1)) for j in range(n))
            # the control ran 12.6% faster from #1007 on (power): the subject's TFLOP/s fall less than the ratio
            tf[gemm], control[gemm] = (ratio * 900, 900.0) if i >= 7 else (ratio * 800, 799.0)
        rows.append(
            CommitRow(
                cs[i],
                tf,
                control,
                {k: tf[k] / control[k] for k in tf},
                {k: n for k in tf},
                {k: (v - 1, v, v + 1) for k, v in tf.items()},
                metric,
            )
        )
    fa_step = Step(
        commit=cs[4].sha,
        parent=cs[3].sha,
        shapes=fa,
        change_pct={"fa/s4096": -9.2, "fa/s16384": -12.1},
        ci95={"fa/s4096": (-9.6, -8.8), "fa/s16384": (-12.6, -11.6)},
        p_value={"fa/s4096": 2e-30, "fa/s16384": 4e-31},
        pr=1004,
        levels={"fa/s4096": (440.5, 400.0), "fa/s16384": (425.5, 374.0)},
    )
    gemm_step = Step(
        commit=cs[6].sha,
        parent=cs[5].sha,
        shapes=(gemm,),
        change_pct={gemm: -28.9},
        ci95={gemm: (-29.3, -28.5)},
        p_value={gemm: 1e-40},
        candidates=(cs[6].sha, cs[7].sha),
        verified=False,
        pr=1006,
        levels={gemm: (0.8301, 0.5902)},
    )
    late_step = Step(
        commit=cs[8].sha,
        parent=cs[7].sha,
        shapes=("fa/s4096",),
        change_pct={"fa/s4096": -3.9},
        ci95={"fa/s4096": (-4.4, -3.4)},
        p_value={"fa/s4096": 1e-12},
        pr=1008,
        levels={"fa/s4096": (399.5, 383.9)},
    )
    dropped = Step(
        commit=cs[2].sha,
        parent=cs[0].sha,
        shapes=("fa/s4096",),
        change_pct={"fa/s4096": 3.4},
        ci95={"fa/s4096": (-0.5, 7.4)},
        p_value={"fa/s4096": 0.04},
        pr=1002,
    )

    def cmp(shape: str, verdict: Verdict, pct: float, lo: float, hi: float) -> Comparison:
        return Comparison(shape, verdict, pct, (lo, hi), 1e-3, 3, 3)

    unsure = (
        UnsurePair(
            cs[0].sha,
            cs[2].sha,
            ("fa/s4096", gemm),
            (cmp("fa/s4096", Verdict.UNKNOWN, 1.9, -2.1, 6.0), cmp(gemm, Verdict.UNKNOWN, -0.4, -3.6, 2.9)),
        ),
        UnsurePair(cs[3].sha, cs[5].sha, ("fa/s4096",), (cmp("fa/s4096", Verdict.UNKNOWN, -9.0, -30.1, 18.2),)),
        UnsurePair(cs[7].sha, cs[8].sha, (gemm,)),
    )
    fixes = (
        FixResult(
            cs[4].sha,
            "/abs/path/revert-0004ccc.patch",
            True,
            shapes=fa,
            baseline={"fa/s4096": 441.2, "fa/s16384": 425.1},
            tip={"fa/s4096": 383.0, "fa/s16384": 373.0},
            restored={"fa/s4096": 420.0, "fa/s16384": 355.0},
            vs_parent={
                "fa/s4096": cmp("fa/s4096", Verdict.DIFFERENT, -4.9, -5.4, -4.4),
                "fa/s16384": cmp("fa/s16384", Verdict.DIFFERENT, -16.5, -17.0, -16.0),
            },
            vs_tip={
                "fa/s4096": cmp("fa/s4096", Verdict.DIFFERENT, 9.7, 9.1, 10.3),
                "fa/s16384": cmp("fa/s16384", Verdict.DIFFERENT, -4.8, -5.4, -4.2),
            },
            trials=3,
            correct=False,
            own_pct=dict(fa_step.change_pct),
            later={"fa/s4096": ((cs[8].sha, -3.9),), "fa/s16384": ()},
            min_step_pct=3.0,
        ),
        FixResult(
            cs[8].sha,
            "/abs/path/revert-0008ccc.patch",
            False,
            conflict="lib/fa.py: patch does not apply",
            shapes=("fa/s4096",),
        ),
    )
    hunk = HunkFinding(
        cs[4].sha,
        2,
        ("lib/fa.py @@ -40,9 +40,8 @@",),
        True,
        (
            HunkTry(("lib/fa.py @@ -40,9 +40,8 @@",), True, {"fa/s4096": -9.0, "fa/s16384": -11.8}, trials=3),
            HunkTry(("README.md @@ -1 +1 @@",), False, {"fa/s4096": 0.2, "fa/s16384": -0.1}, trials=3),
        ),
        "/abs/path/hunk-0004ccc.patch",
        "--- a/lib/fa.py\n+++ b/lib/fa.py\n@@ -40,1 +40,1 @@\n-a\n+b\n",
    )
    steps = (fa_step, gemm_step, late_step)
    return ReportData(
        title="bisector: golden, 0000ccc..0008ccc",
        config_name="golden",
        upstream="../upstream",
        branch="main",
        good=cs[0],
        bad=cs[-1],
        device="cuda",
        control="torch_cuda",
        machine={
            "device_name": "NVIDIA H200",
            "driver": "580.1",
            "python": "3.12.3",
            "torch_cuda": "13.0",
            "versions": {"torch": "2.11.0", "triton": "3.6.0"},
        },
        protocol={"reps": 6, "warmup": 1, "max_trials": 8},
        shapes=shapes,
        range_commits=cs,
        rows=tuple(rows),
        steps=steps,
        dropped=(dropped,),
        uncertain=tuple(Uncertain(u.before, u.after, u.shapes) for u in unsure),
        unsure=unsure,
        skipped={cs[1].sha: "step 1: make failed: exit 2\nModuleNotFoundError: No module named 'lib.utils'"},
        wrong=(WrongResult(cs[6].sha, gemm, 18.0, 0.0352),),
        fixes=fixes,
        hunks=(hunk,),
        wrong_windows=(WrongWindow((gemm,), cs[6].sha, cs[5].sha, cs[7].sha),),
        commits_probed=8,
        trials=30,
        wall_s=600.0,
        trial_s=840.0,
        min_step_pct=3.0,
        metric={"fa": "speed", "gemm": "ratio"},
        reproduce=("bisector run --config configs/golden.toml --good v1 --bad main",),
        build_logs={cs[1].sha: "../work/logs/0001ccc.log"},
        # resumed: this call measured 12 of the 60 trial processes
        totals=RunTotals(
            range_commits=len(cs),
            measured=len(rows),
            skipped=1,
            trials=60,
            commit_trials=42,
            patched_trials=18,
            trial_s=1500.0,
            measuring_s=1020.0,
            this_call=CallTotals(12, 96.0),
        ),
        moves=step_moves(steps, rows, lambda _: 3.0),
        actions=actions(steps, fixes, ()),
    )


def interacting_report() -> ReportData:
    """The CPU demo's attention shape: three regressions on s1024 (#1003, #1006, #1009), the middle
    one's revert not applying on the tip alone but with #1009's, every combination measured that
    applies (the interactions' table), and the largest loss to be fixed by hand."""
    from bisector.why.interactions import ComboResult, Interaction, PairEffect

    data = series(12, list(range(13)), {3: -39.9, 6: -37.2, 9: -63.5}, ("fa/s1024",), trials=6, noise=0.03)
    a, b, c = (s.commit for s in data.steps)
    k = "fa/s1024"

    def cmp(pct: float, lo: float, hi: float, verdict: Verdict = Verdict.DIFFERENT) -> Comparison:
        return Comparison(k, verdict, pct, (lo, hi), 1e-6, 3, 3)

    steps = {s.commit: s for s in data.steps}
    fixes = (
        FixResult(
            a,
            "/abs/revert-a.patch",
            True,
            shapes=(k,),
            baseline={k: 0.062},
            tip={k: 0.0088},
            restored={k: 0.024},
            vs_parent={k: cmp(-61.0, -63.2, -58.7)},
            vs_tip={k: cmp(173.8, 164.2, 183.9)},
            trials=3,
            own_pct=dict(steps[a].change_pct),
            later={k: ((b, -37.2), (c, -63.5))},
            min_step_pct=20.0,
        ),
        FixResult(
            b,
            "/abs/revert-b.patch",
            False,
            conflict="patch does not apply: conflicts in demolib/cpu_fa.py",
            shapes=(k,),
        ),
        FixResult(
            c,
            "/abs/revert-c.patch",
            True,
            shapes=(k,),
            baseline={k: 0.0239},
            tip={k: 0.0088},
            restored={k: 0.0234},
            vs_parent={k: cmp(-0.4, -1.7, 1.0, Verdict.SAME)},
            vs_tip={k: cmp(161.8, 152.8, 171.1)},
            trials=3,
            own_pct=dict(steps[c].change_pct),
            min_step_pct=20.0,
        ),
    )
    gains = {
        (a,): (173.8, 164.2, 183.9),
        (c,): (161.8, 152.8, 171.1),
        (a, c): (256.5, 248.9, 264.3),
        (b, c): (357.0, 349.6, 364.6),
        (a, b, c): (579.7, 529.3, 634.2),
    }
    combos = [ComboResult((), {k: 0.0088})]
    for combo in [(a,), (b,), (c,), (a, b), (a, c), (b, c), (a, b, c)]:
        if combo in gains:
            g, lo, hi = gains[combo]
            combos.append(ComboResult(combo, {k: 0.0088 * (1 + g / 100)}, {k: g}, {k: (lo, hi)}))
        else:
            combos.append(ComboResult(combo, error="patch does not apply: conflicts in demolib/cpu_fa.py"))
    with_c = 100 * (3.565 / 2.618 - 1)
    with_a = 100 * (3.565 / 2.738 - 1)
    pair = PairEffect(
        a, c, k, 173.8, with_c, 161.8, with_a, 100 * (3.565 / (2.738 * 2.618) - 1), (-51.3, -49.3), "overlap"
    )
    inter = Interaction((a, b, c), (k,), tuple(combos), (pair,), trials=3)
    return replace(
        data, fixes=fixes, interactions=(inter,), min_step_pct=20.0, actions=actions(data.steps, fixes, (inter,))
    )


def one_commit_report(c: Commit, device: str = "cuda", **sections: Any) -> ReportData:
    """A report over the single commit `c` with nothing measured but the `sections` given (hunks,
    kernels, causes...): what a test of one report section renders."""
    return ReportData(
        title="t",
        config_name="c",
        upstream="u",
        branch="main",
        good=c,
        bad=c,
        device=device,
        control="torch",
        machine={},
        protocol={},
        shapes=(),
        range_commits=(c,),
        rows=(),
        steps=(),
        **sections,
    )

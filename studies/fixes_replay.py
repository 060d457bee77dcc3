"""How many side-by-side rounds a revert's verdict needs, on its own trials' spread or on the search's
pooled noise: replayed from a demo report directory's stored trials, without a GPU.

    python -m studies.fixes_replay REPORT_DIR [--rounds 2,4,8]

REPORT_DIR holds a run's `results.sqlite`, its `demo.json` (`--json` output) and `revert-*.patch`
(as reports/2026-12-02c-h200-demo/ does; thresholds from configs/h200-demo.toml). For every revert
and shape, the first n trials of the
patched tip, of the step's parent and of the tip taken after the search (the store's trials started
from the first patched one on, in slot order: the fixes' rounds, and at larger n those of the
interactions after them) are judged as bisector/why/fixes.py judges them, once with
stats.compare (each side's own spread, as before a1330b9) and once with samples.compare_pooled on
the noise of the search's trials (samples.run_noise). Prints the verdicts per n.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bisector.build.builder import patch_hash
from bisector.config import Thresholds
from bisector.demo.demo_config import demo_config
from bisector.model import Comparison, Measurement, ProbeStatus, TrialRecord
from bisector.search.samples import PooledNoise, compare_pooled, run_noise, trial_metric
from bisector.search.stats import compare
from bisector.why.fixes import FixResult
from studies import no_such_files
from studies.stored_trials import trial_processes


def replay(report: Path, rounds: list[int]) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        th: Thresholds = demo_config("cuda", Path(tmp, "demo")).thresholds

    def value(r: TrialRecord) -> float | None:
        """The trial's value on the metric its suite is decided on (the search's sample)."""
        return trial_metric(r, th.decision_of(r.shape.split("/")[0]))

    result = json.loads((report / "demo.json").read_text())
    steps = {s["commit"]: s for s in result["steps"]}
    records = [r for rs in trial_processes(report / "results.sqlite").values() for r in rs]
    after = min(r.started_at for r in records if r.patch_hash)
    search: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in sorted(records, key=lambda r: r.slot or 0):
        if not r.patch_hash and r.started_at < after and (v := value(r)) is not None:
            search[r.sha][r.shape].append(v)
    measured = [Measurement(sha, ProbeStatus.OK, {k: tuple(v) for k, v in per.items()}) for sha, per in search.items()]
    # the tip: the commit every revert is applied to, so the one with the patched trials
    tip = max(search, key=lambda sha: sum(r.sha == sha and bool(r.patch_hash) for r in records))

    def later(sha: str, shape: str, patch: str | None = None) -> list[float]:
        got = sorted(
            (
                r
                for r in records
                if r.sha == sha and r.shape == shape and r.patch_hash == patch and r.started_at >= after
            ),
            key=lambda r: r.slot or 0,
        )
        return [v for r in got if (v := value(r)) is not None]

    lines = []
    for path in sorted(report.glob("revert-*.patch")):
        step = next(s for c, s in steps.items() if c.startswith(path.stem.split("-", 1)[1]))
        noise = run_noise(measured, step["shapes"])
        h = patch_hash(path.read_text())
        alpha = th.alpha / max(1, len(step["shapes"]))  # as fixes._result
        for shape in step["shapes"]:
            mine, parent, now = later(tip, shape, h), later(step["parent"], shape), later(tip, shape)
            for n in (k for k in rounds if len(mine) >= k and len(parent) >= k and len(now) >= k):
                sides = (parent[:n], mine[:n]), (now[:n], mine[:n])
                verdicts = []
                step_pct = th.min_step(shape)
                for judge in (
                    functools.partial(_judge_alone, step_pct=step_pct, alpha=alpha, shape=shape),
                    functools.partial(_judge_pooled, step_pct=step_pct, alpha=alpha, shape=shape, noise=noise[shape]),
                ):
                    fix = FixResult(
                        step["commit"],
                        "",
                        True,
                        shapes=(shape,),
                        vs_parent={shape: judge(*sides[0])},
                        vs_tip={shape: judge(*sides[1])},
                        own_pct=step["change_pct"],
                        min_step_pct=th.min_step_pct,
                        min_steps=dict(th.min_steps),
                    )
                    verdicts.append(fix.verdict(shape))
                lines.append(f"| #{step['pr']} | {shape} | {n} | {verdicts[0]} | {verdicts[1]} |")
    return lines


def _judge_alone(b: Sequence[float], a: Sequence[float], step_pct: float, alpha: float, shape: str) -> Comparison:
    """A revert judged on its own trials' spread (Welch)."""
    return compare(b, a, step_pct, alpha, shape)


def _judge_pooled(
    b: Sequence[float], a: Sequence[float], step_pct: float, alpha: float, shape: str, noise: PooledNoise | None
) -> Comparison:
    """A revert judged on the search's pooled trial noise (samples.compare_pooled)."""
    return compare_pooled(b, a, step_pct, alpha, shape, noise)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.fixes_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--rounds", default="2,4,8")
    args = parser.parse_args(argv)
    error = no_such_files([args.report / "results.sqlite", args.report / "demo.json"], "file", "fixes_replay")
    if error:
        print(error, file=sys.stderr)
        return 2
    print("| revert | shape | trials a build | verdict on its own spread | on the search's pooled noise |")
    print("|---|---|---:|---|---|")
    print("\n".join(replay(args.report, [int(k) for k in args.rounds.split(",")])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

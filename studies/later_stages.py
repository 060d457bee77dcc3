"""What the stages after the search took on the recorded demo runs: the figures behind
bisector/estimate/later_stages.py's CALIBRATED.

    python -m studies.later_stages

Per run, from its progress logs (every call, in order; the events read back as
studies/progress_replay.py does): the trials of the search, of the reverts and interactions
("fixes") and of the hunk searches ("hunks"), against what each stage announced when it started
(its first rounds: fixes.expected_trials, the interactions once apart included, culprit_hunks.expected_trials)
and per verified culprit; and, followed by later_stages.StageTracker, how often a check went on to
another round: q = rounds gone on to / (those + checks decided short of the cap). Pooled per device
kind: the first rounds per culprit and q that CALIBRATED holds.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import git

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bisector.config import load
from bisector.demo.demo_config import CONFIG_FILES, demo_config
from bisector.demo.repo import write_demo_repo
from bisector.estimate.later_stages import LaterModel, StageCost, StageTracker, model_for
from bisector.model import Step
from bisector.why import culprit_hunks
from studies.progress_replay import KN, parse, read, unthrottled

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "studies" / "results" / "progress-logs"


@dataclass(frozen=True)
class Run:
    name: str
    device: str  # "cpu" | "cuda": the demo config it ran
    logs: tuple[Path, ...]  # its calls' progress logs, in order
    culprits: tuple[str, ...]  # the verified culprits (each README; SHA prefixes): the later stages run per culprit
    announced: tuple[tuple[str, int], ...] = ()  # a stage's count where no line of the log shows it
    # "apart": the interactions measured the tip and the single reverts again after the fixes;
    # "merged" (from 18122bb): their combinations measured in the fixes' rounds, those shared;
    # "shaped" (from 81a933b): merged, each shape's fresh samples after its own count, and a search
    # that measures a pair's unclear shapes and a split point's open ones alone (c228dbd)
    fixes_rules: str = "apart"


R = ROOT / "reports"
# the demo's steps (bisector/demo/history.py) each run verified: on the CPU the six with a CPU shape;
# on the H200 also the decode GEMM's #165, and #131 only where the machine showed it
CPU = ("21469b0", "aba0aa9", "83c18bf", "6c6710e", "76ad751", "c98ae15")
GPU = (*CPU, "3a52501")
GPU_NO_131 = tuple(c for c in GPU if c != "6c6710e")
RUNS = (
    Run("cpu-demo b434555 (12-01)", "cpu", (R / "2026-12-01-cpu-demo/progress.log",), CPU),
    Run("cpu-demo 7e8ae8b quiet", "cpu", (LOGS / "cpu-demo-7e8ae8b-quiet.log.gz",), CPU),
    Run("cpu-demo e8f80c2", "cpu", (LOGS / "cpu-demo-e8f80c2.log.gz",), CPU),
    Run("cpu-demo e8f80c2 reps 8", "cpu", (LOGS / "cpu-demo-reps8-e8f80c2.log.gz",), CPU),
    Run("cpu-demo a350e3d", "cpu", (LOGS / "cpu-demo-a350e3d-run1.log.gz",), CPU),
    Run("cpu-demo 7099852 (12-02)", "cpu", (R / "2026-12-02-cpu-demo/progress.log",), CPU),
    Run("cpu-demo f6f2e2c (12-04)", "cpu", (LOGS / "cpu-demo-f6f2e2c.log.gz",), CPU, fixes_rules="merged"),
    # its progress-2-resumed.log holds both calls' lines; call 2 entered the fixes stage before any
    # trial of its own, so no line shows the count: 2 x (1 + 4 reverts + 4 parents) + 2 x 2^3
    # (#115, #122, #155 on fa/s16384), as the fixes and interactions of that day counted it
    Run(
        "h200-demo a695462 (12-01)",
        "cuda",
        (R / "2026-12-01-h200-demo/progress-2-resumed.log",),
        GPU_NO_131,
        (("fixes", 34),),
    ),
    Run(
        "h200-demo (12-02)",
        "cuda",
        (R / "2026-12-02-h200-demo/progress-1-cold-start.log", R / "2026-12-02-h200-demo/progress-2-resumed.log"),
        GPU,
    ),
    Run(
        "h200-demo 346b62c (12-02b)",
        "cuda",
        (R / "2026-12-02b-h200-demo/progress-1-cold-start.log", R / "2026-12-02b-h200-demo/progress-2-resumed.log"),
        GPU_NO_131,
    ),
    Run(
        "h200-demo 6d7d402 (12-02c)",
        "cuda",
        (R / "2026-12-02c-h200-demo/progress-1-cold-start.log", R / "2026-12-02c-h200-demo/progress-2-resumed.log"),
        GPU,
    ),
    # two of five runs at cc7a9ff on 2 quiet cores (all five took 195 trials, 93 / 35 / 67 by stage),
    # and one of two with both cores held by busy loops (199 and 212 trials; fixes 35 and 34)
    Run("cpu-demo cc7a9ff run 1 (12-05)", "cpu", (LOGS / "cpu-demo-cc7a9ff-run1.log.gz",), CPU, fixes_rules="shaped"),
    Run("cpu-demo cc7a9ff run 2 (12-05)", "cpu", (LOGS / "cpu-demo-cc7a9ff-run2.log.gz",), CPU, fixes_rules="shaped"),
    Run("cpu-demo cc7a9ff busy (12-05)", "cpu", (LOGS / "cpu-demo-cc7a9ff-busy.log.gz",), CPU, fixes_rules="shaped"),
    Run(
        "h200-demo 75e338a (12-04b)",
        "cuda",
        (R / "2026-12-04b-h200-demo/progress-75e338a.log",),
        GPU,
        fixes_rules="merged",
    ),
    Run(
        "h200-demo 130d8c6 (12-04b)",
        "cuda",
        (R / "2026-12-04b-h200-demo/progress-130d8c6.log",),
        GPU,
        fixes_rules="merged",
    ),
    # an H100, not an H200: the four-shape demo (--shapes fa/s16384,gemm/m8192,gemm/m54560,gemm/decode)
    Run("h100-demo 2b326d7 (12-05)", "cuda", (R / "2026-12-05-h100-demo/progress.log",), GPU, fixes_rules="shaped"),
)


@dataclass
class StageFigures:
    logged: int = 0  # the count the stage announced in the run's log (the code of its day)
    announced: int = 0  # what it announces now (culprit_hunks.expected_trials by its present rules)
    trials: int = 0
    opened: int = 0
    closed: int = 0


def demo_repo(where: Path) -> tuple[git.Repo, list[str]]:
    """The demo's upstream (the same commits on every machine: the runs' SHAs), oldest first."""
    write_demo_repo(where)
    repo = git.Repo(where)
    return repo, [c.hexsha for c in reversed(list(repo.iter_commits("main")))]


def hunks_now(run: Run, repo: git.Repo, order: list[str]) -> int:
    """What the hunk stage of the run announces with the present rules (its culprits' hunk groups
    and plumbing plans, bisector/why/culprit_hunks.py)."""
    cfg = demo_config(run.device, Path(repo.working_tree_dir or "."))
    steps = []
    for prefix in run.culprits:
        sha = next(s for s in order if s.startswith(prefix))
        steps.append(
            Step(
                sha, order[order.index(sha) - 1], ("x",), {"x": -10.0}, {"x": (-11.0, -9.0)}, {"x": 1e-9}, verified=True
            )
        )
    return culprit_hunks.expected_trials(SimpleNamespace(config=cfg, repo=repo), steps)  # type: ignore[arg-type]


def stages_of(run: Run, model: LaterModel, now: dict[str, int]) -> dict[str, StageFigures]:
    """Per stage ("search" for the search's trials), its trials and announced counts, and the
    rounds its checks went on to or stopped short of the cap (the tracker's counts); `now`: a
    stage's count by the present rules where it differs from the log's."""
    cfg = load(ROOT / "configs" / CONFIG_FILES[run.device])
    out: dict[str, StageFigures] = {}
    trackers: dict[str, StageTracker] = {}
    for path in run.logs:
        stage = "search"
        lines, _ = parse(read(path))
        for event, _j in unthrottled(lines):
            if event.action == "stage":
                stage = event.detail
                fig = out.setdefault(stage, StageFigures())
                if stage != "search" and stage not in trackers:  # a resumed call announces it again
                    fig.logged = event.expect or dict(run.announced).get(stage, 0)
                    fig.announced = now.get(stage, fig.logged)
                    trackers[stage] = StageTracker(
                        stage, model, fig.announced, cfg.protocol.trials, cfg.protocol.max_trials
                    )
                continue
            if event.action != "trial":
                continue
            fig = out.setdefault(stage, StageFigures())
            fig.trials += 1
            if stage in trackers:
                k, n, _rest = KN.match(event.detail).groups()  # type: ignore[union-attr]
                trackers[stage].trial((event.sha, event.patch_hash), int(k), int(n))
    for stage, tracker in trackers.items():
        tracker.end()
        out[stage].opened, out[stage].closed = tracker.opened, tracker.closed
    return out


def fit(growth: Callable[[float], float], target: float) -> float:
    """The q in [0, 1) whose growth is `target` (bisection; growth rises with q; 0 when even q = 0 grows more)."""
    lo, hi = 0.0, 0.999
    if growth(lo) >= target:
        return 0.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if growth(mid) < target else (lo, mid)
    return lo


def _growth(
    q: float, stage: str, first: float, rule: Literal["double", "rounds"], trials: int, max_trials: int
) -> float:
    """The trials a stage's culprit grows to, modelled with `q` the share of its rounds left open."""
    return LaterModel({stage: StageCost(first, q, rule)}).growth(stage, trials, max_trials)


def main() -> int:
    print(
        "| run | culprits | search | fixes: trials / announced (x) | hunks: trials / announced now (x; logged) "
        "| per culprit, in n: fixes / hunks (announced: fixes / hunks) | q: fixes / hunks (rounds gone on / stopped) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    pooled: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo, order = demo_repo(Path(tmp) / "demo")
        for run in RUNS:
            cfg = load(ROOT / "configs" / CONFIG_FILES[run.device])
            model = model_for(cfg.device)
            figs = stages_of(run, model, {"hunks": hunks_now(run, repo, order)})
            cells, per, qs = [], [], []
            kind = "cpu" if cfg.device == "cpu" else "gpu"
            culprits = len(run.culprits)
            for stage in ("fixes", "hunks"):
                f = figs.get(stage, StageFigures())
                n = model.side(stage, cfg.protocol.trials)
                logged = f"; {f.logged}" if f.logged != f.announced else ""
                cells.append(
                    f"{f.trials} / {f.announced} ({f.trials / f.announced:.2f}{logged})" if f.announced else "-"
                )
                per.append((f.trials / culprits / n, f.announced / culprits / n))
                qs.append(f"{f.opened / max(1, f.opened + f.closed):.2f} ({f.opened} / {f.closed})")
                acc = pooled.setdefault(kind, {}).setdefault(
                    f"fixes ({run.fixes_rules})" if stage == "fixes" else stage, [0, 0, 0, 0, 0]
                )
                acc[0] += f.announced / n
                acc[1] += culprits
                acc[2] += f.opened
                acc[3] += f.closed
                acc[4] += f.trials / n
            print(
                f"| {run.name} | {culprits} | {figs.get('search', StageFigures()).trials} | {cells[0]} | {cells[1]} "
                f"| {per[0][0]:.1f} / {per[1][0]:.1f} ({per[0][1]:.1f} / {per[1][1]:.1f}) | {qs[0]} / {qs[1]} |"
            )
    print(
        "\n| device kind | stage | first rounds per culprit, in n (announced) | q: rounds gone on, pooled "
        "| growth: model at that q / measured (trials / announced) | q that grows as measured | CALIBRATED: first / q |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind, stages in pooled.items():
        for label, (first, culprits, opened, closed, trials) in stages.items():
            stage = label.split(" ")[0]
            model = model_for("cpu" if kind == "cpu" else "cuda")
            cost: StageCost = model.stages[stage]
            q = opened / max(1, opened + closed)
            cfg = load(ROOT / "configs" / CONFIG_FILES["cpu" if kind == "cpu" else "cuda"])
            growth = functools.partial(
                _growth,
                stage=stage,
                first=first / culprits,
                rule=cost.rule,
                trials=cfg.protocol.trials,
                max_trials=cfg.protocol.max_trials,
            )
            print(
                f"| {kind} | {label} | {first / culprits:.2f} | {q:.2f} | {growth(q):.2f} / {trials / first:.2f} "
                f"| {fit(growth, trials / first):.2f} | {cost.first:.2f} / {cost.q:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

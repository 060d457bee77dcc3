"""The one JSON form of a search result that `simulate`, `run` and `demo` print with --json."""

from __future__ import annotations

from typing import Any

from bisector.model import SearchResult, Step


def step_json(step: Step) -> dict[str, Any]:
    return {"commit": step.commit, "pr": step.pr, "shapes": list(step.shapes),
            "change_pct": {k: round(v, 3) for k, v in step.change_pct.items()},
            "ci95": {k: [round(lo, 3), round(hi, 3)] for k, (lo, hi) in step.ci95.items()},
            "p_value": dict(step.p_value), "candidates": list(step.candidates), "verified": step.verified}


def result_json(result: SearchResult) -> dict[str, Any]:
    return {"steps": [step_json(s) for s in result.steps], "probes": result.commits_probed,
            "trials": result.trials, "skipped": list(result.skipped),
            "dropped": [step_json(s) for s in result.dropped],
            "wrong": {sha: sorted(shapes) for sha, shapes in result.wrong.items() if shapes}}

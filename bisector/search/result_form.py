"""The search's result as JSON (`--json` of simulate, analyze, run and demo; the nightly's verdict),
and one entry per unsure pair. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bisector.model import SearchResult, Step, Uncertain
from bisector.search.decisions import decision_lines

__all__ = ["merged_uncertain", "uncertain_json", "result_json"]


def merged_uncertain(pairs: Sequence[Uncertain]) -> tuple[Uncertain, ...]:
    """One entry per pair (a pair can stay unsure in one look, then again in the bridge's)."""
    shapes: dict[tuple[str, str], set[str]] = {}
    for u in pairs:
        shapes.setdefault((u.before, u.after), set()).update(u.shapes)
    return tuple(Uncertain(a, b, tuple(sorted(s))) for (a, b), s in shapes.items())


def uncertain_json(pairs: Sequence[Uncertain]) -> list[dict[str, object]]:
    return [{"before": u.before, "after": u.after, "shapes": list(u.shapes)} for u in pairs]


def result_json(result: SearchResult, prs: Mapping[str, int | None] | None = None) -> dict[str, object]:
    """The `--json` form shared by simulate, analyze, run and demo."""
    prs = prs or {}

    def step(s: Step) -> dict[str, object]:
        return {
            "commit": s.commit,
            "parent": s.parent,
            "pr": s.pr if s.pr is not None else prs.get(s.commit),
            "shapes": list(s.shapes),
            "change_pct": {k: round(v, 4) for k, v in s.change_pct.items()},
            "ci95": {k: [round(v[0], 4), round(v[1], 4)] for k, v in s.ci95.items()},
            "p_value": dict(s.p_value),
            "candidates": list(s.candidates),
            "verified": s.verified,
        }

    return {
        "steps": [step(s) for s in result.steps],
        "probes": result.commits_probed,
        "trials": result.trials,
        "skipped": list(result.skipped),
        "dropped": [step(s) for s in result.dropped],
        "probe_calls": [[sha, n] for sha, n in result.probes],
        "wrong": {sha: sorted(v) for sha, v in result.wrong.items()},
        "uncertain": uncertain_json(result.uncertain),
        "decided": decision_lines(result),  # drift and the metric, latency steps, the zone (search/decisions.py)
    }

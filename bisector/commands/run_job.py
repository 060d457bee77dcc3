"""The main job as the commands run it (`bisector run`, `bisector demo`): the bisection with its
progress line, then its result printed. Imported by those commands only after they have started
the trial workers (bisector/runner/launch.py `start_workers`): this module brings in the search and
the report, seconds of imports that the workers' own then overlap."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bisector import config as config_mod
from bisector import pipeline
from bisector.commands.common import print_json, range_order, relative_paths
from bisector.commands.progress import ProgressLine
from bisector.errors import BisectorError
from bisector.isolation import sandbox
from bisector.model import Comparison, ProbeStatus
from bisector.report import hunk_names, summary
from bisector.report.markdown import counts
from bisector.report.summary import last_line
from bisector.search import result_json
from bisector.store import default_path
from bisector.store import last_used as laststore
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.fixes import FixResult
from bisector.why.interactions import Interaction

if TYPE_CHECKING:
    from bisector.measure.probe import ProbeEvent

UNLISTED = object()  # `run_and_print`'s range not listed by the command yet


def run_and_print(
    cfg: config_mod.Config,
    options: pipeline.RunOptions,
    as_json: bool,
    n_commits: int | None = None,
    extra: dict[str, Any] | None = None,
    order: Any = UNLISTED,
) -> pipeline.RunOutcome:
    """`pipeline.bisect` with its progress line, then its result (JSON or a summary); `order`: what
    the command's `range_order` gave, when it listed the range already."""
    if order is UNLISTED:
        order = range_order(cfg, options.good, options.bad, options.offline)
    n_commits = n_commits or (len(order) if order else DEFAULT_RANGE)
    isolation = sandbox.probe()
    if not isolation.sandboxed:
        click.echo(f"warning: code under test runs without a sandbox here: {isolation.describe()}", err=True)
    stages = tuple(name for name, on in (("fixes", options.verify_fixes), ("hunks", options.find_hunks)) if on)
    note = StoreNote(Path(options.store or cfg.store or default_path()))
    try:
        with ProgressLine.for_config(cfg, order, stages, n_commits) as progress:

            def observe(event: ProbeEvent) -> None:
                note.update()
                progress(event)

            outcome = pipeline.bisect(cfg, options, observer=observe)
            progress.final = counts(outcome.report)  # its last line says what the report and stdout say
    finally:
        note.update()
    if as_json:
        print_json(relative_paths(outcome_json(outcome, extra)))
        check_compared(outcome)
        return outcome
    for line in summary.lines(outcome.report, str(outcome.report_dir / "report.md")):
        click.echo(line)
    check_compared(outcome)
    return outcome


class StoreNote:
    """The last-store note (`store info` reads it next), written once this run's store exists: a run
    that fails before it stores anything leaves the note on the last store that does."""

    def __init__(self, store: Path) -> None:
        self.store, self.noted = store, False

    def update(self) -> None:
        if not self.noted and self.store.is_file():
            laststore.remember(self.store)
            self.noted = True


def outcome_json(outcome: pipeline.RunOutcome, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What `run --json` and `demo --json` print. "trials": the run's trial processes, as the report's
    header and `store info` count them (search, verification, reverts, hunks); the search's own
    share is "search_trials"."""
    windows = [{"shapes": list(w.shapes), "first": w.first, "fixed": w.fixed} for w in outcome.wrong_windows]
    hunks = [hunk_json(h) for h in outcome.report.hunks]
    totals = outcome.report.totals
    search = result_json(outcome.result)
    return {
        **search,
        "trials": totals.trials if totals else search["trials"],
        "search_trials": search["trials"],
        "wrong_windows": windows,
        "hunks": hunks,
        "fixes": [fix_json(f) for f in outcome.fixes],
        "kernels": [
            {"commit": k.step_commit, "changed": [d.name for d in k.changed], "note": k.note}
            for k in outcome.report.kernels
        ],
        "causes": [{"commit": c.step_commit, "cause": c.sentence, "kind": c.kind} for c in outcome.report.causes],
        "interactions": [interaction_json(i) for i in outcome.report.interactions],
        "throughput": outcome.report.throughput.as_json() if outcome.report.throughput else None,
        "totals": totals.as_json() if totals else None,
        "report": str(outcome.report_dir / "report.md"),
        **(extra or {}),
    }


def hunk_json(h: HunkFinding) -> dict[str, Any]:
    """One hunk finding as `--json` prints it: "of" counts the commit's whole hunks; "hunks" names
    what was found, statement pieces when the threading was applied as a base (see named_json)."""
    return {
        "commit": h.step_commit,
        "of": h.n_hunks,
        "hunks": list(h.hunks),
        "alone": h.alone,
        "patch": h.patch_path,
        "summary": h.summary,
        "unsettled": [list(u) for u in h.unsettled],
        "aside": list(h.aside),
        "rest": h.rest,
        **named_json(h),
        **(
            {
                "plumbing": list(h.plumbing),
                "behaviour_hunks": h.n_behaviour,
                "plumbing_carries": h.base_carries,
                "plumbing_patch": h.base_patch_path,
            }
            if h.n_behaviour
            else {}
        ),
    }


def named_json(h: HunkFinding) -> dict[str, Any]:
    """What `hunks` holds, in one unit: "of" counts the commit's whole hunks, while `hunks` holds
    statement pieces of hunks when the threading was applied as a base. "found" of "searched" are in
    "unit"; "found_in_hunks": the whole hunks they lie in; "named": the finding as the report says
    it; "lines": the found pieces named compactly (the file once, then `@@-81 -84-85, -87`)."""
    n = hunk_names.named(h)
    return {
        "unit": n.unit,
        "found": n.found,
        "searched": n.searched,
        "found_in_hunks": n.in_hunks,
        "complete": h.complete,
        "stopped_at": h.stopped_at,
        "tried": len(h.tries),
        "unresolved_tries": sum(t.carries is None for t in h.tries),
        "named": n.phrase,
        "lines": hunk_names.compact(h.hunks),
    }


def fix_json(fix: FixResult) -> dict[str, Any]:
    def cmp(c: Comparison | None) -> dict[str, Any] | None:
        return None if c is None else {"change_pct": round(c.change_pct, 3), "ci95": [round(x, 3) for x in c.ci95]}

    return {
        "commit": fix.step_commit,
        "patch": fix.patch_path,
        "applied": fix.applied,
        "trials": fix.trials,
        "correct": fix.correct,
        "error": fix.error or fix.conflict,
        "shapes": {
            s: {
                "verdict": fix.verdict(s),
                "expected_pct": fix.expected_pct(s),
                "vs_parent": cmp(fix.vs_parent.get(s)),
                "vs_tip": cmp(fix.vs_tip.get(s)),
                "tflops": {"parent": fix.baseline.get(s), "tip": fix.tip.get(s), "revert": fix.restored.get(s)},
            }
            for s in fix.shapes
        },
    }


def interaction_json(inter: Interaction) -> dict[str, Any]:
    return {
        "steps": list(inter.steps),
        "shapes": list(inter.shapes),
        "trials": inter.trials,
        "combos": [
            {"reverted": list(c.reverted), "gain_pct": dict(c.gain_pct), "error": c.error} for c in inter.combos
        ],
        "pairs": [
            {
                "a": p.a,
                "b": p.b,
                "shape": p.shape,
                "verdict": p.verdict,
                "interaction_pct": round(p.interaction_pct, 3),
                "ci95": [round(x, 3) for x in p.ci95],
            }
            for p in inter.pairs
        ],
    }


DEFAULT_RANGE = 40  # commits assumed for the estimate when the range cannot be counted up front


def check_compared(outcome: pipeline.RunOutcome) -> None:
    """A run that measured fewer than two commits compared nothing: "no step" would be a lie, so
    it fails (exit 1) naming why the commits were skipped. The report is written all the same."""
    measured = [sha for sha, m in outcome.result.measurements.items() if m.status is ProbeStatus.OK]
    if len(measured) >= 2:
        return
    skipped = outcome.report.skipped
    tip = outcome.commits[-1].sha
    example = tip if tip in skipped else next(iter(skipped), None)
    why = f"; {example[:7]}: {last_line(skipped[example])}" if example else ""
    raise BisectorError(
        f"nothing compared: {len(measured)} of {len(outcome.commits)} commits measured, "
        f"{len(skipped)} skipped{why} (report: {outcome.report_dir / 'report.md'})"
    )

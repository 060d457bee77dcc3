"""Pure: a finished bisection (RunOutcome) -> a PublishPlan for the publishing layer.

Kept with the triggers because both trigger paths (nightly and `/bisect`) publish the same way;
the report text is read by the caller and passed in, so this module does no I/O.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from bisector.model import Step
from bisector.publish.publish_plan import CulpritPost, PublishPlan, RunVerdict
from bisector.report import kernel_section as kernel_report
from bisector.why.fixes import FixResult
from bisector.why.culprit_hunks import HunkFinding
from bisector.report.data import ReportData
from bisector.report.action_summary import summary_lines
from bisector.report.figures import p_value
from bisector.report.markdown import step_summary

if TYPE_CHECKING:
    from bisector.config import Config
    from bisector.pipeline import RunOutcome


def verdict(steps: tuple[Step, ...], missing: tuple[str, ...]) -> RunVerdict:
    if any(s.is_regression for s in steps):
        return RunVerdict.REGRESSION
    if steps:
        return RunVerdict.IMPROVEMENT
    return RunVerdict.INCOMPLETE if missing else RunVerdict.NO_CHANGE


def missing_lines(data: ReportData) -> tuple[str, ...]:
    out = [f"`{sha[:7]}` did not build or run: {reason.strip().splitlines()[-1][:160] if reason.strip() else '?'}"
           for sha, reason in data.skipped.items()]
    out += [f"`{w.sha[:7]}` gave wrong results on {w.shape}" for w in data.wrong]
    return tuple(out)


def _step_table(step: Step) -> str:
    rows = ["| shape | change | 95% CI | p |", "|---|---:|---|---:|"]
    for shape in step.shapes:
        lo, hi = step.ci95[shape]
        rows.append(f"| {shape} | {step.change_pct[shape]:+.1f}% | [{lo:+.1f}, {hi:+.1f}]% | {p_value(step.p_value[shape])} |")
    return "\n".join(rows)


def _restore(fix: FixResult) -> str:
    parts = []
    for shape in fix.shapes:
        if shape in fix.restored and shape in fix.baseline:
            left = fix.remaining_pct(shape)
            parts.append(f"{shape}: {fix.verdict(shape)}, {fix.restored[shape]:.1f} against {fix.baseline[shape]:.1f} "
                         f"TFLOP/s before the step, side by side" + (f" ({left:+.1f}%)" if left is not None else ""))
    return "; ".join(parts)


def _hunk_line(h: HunkFinding) -> str:
    return f"{h.summary}: " + "; ".join(f"`{label}`" for label in h.hunks)


def build(data: ReportData, run_id: str, repo: str, report_md: str, requester_pr: int | None = None,
          patches: Mapping[str, str] | None = None, base_branch: str = "main") -> PublishPlan:
    """`patches`: culprit sha -> patch text of its verified revert."""
    patches = dict(patches or {})
    fixes = {f.step_commit: f for f in data.fixes}
    found = {h.step_commit: h for h in data.hunks}
    compiled = {k.step_commit: k for k in data.kernels}
    culprits = []
    for step in data.steps:
        if step.pr is None or step.candidates or any(c.pr == step.pr for c in culprits):
            continue
        fix = fixes.get(step.commit)
        good_fix = (fix is not None and fix.applied and fix.correct and bool(fix.restored)
                    and all(fix.verdict(s) in ("restored", "partly restored") for s in fix.vs_parent))
        culprits.append(CulpritPost(pr=step.pr, step_summary=step_summary(step, data), table=_step_table(step),
                                    patch=patches.get(step.commit) if good_fix else None,
                                    restore=_restore(fix) if good_fix and fix else "",
                                    patch_base=data.bad.sha, commit=step.commit,
                                    hunk=_hunk_line(found[step.commit]) if step.commit in found else "",
                                    hunk_diff=found[step.commit].diff if step.commit in found else "",
                                    kernel=kernel_report.comment_text(compiled[step.commit])
                                    if step.commit in compiled and compiled[step.commit].kernels else ""))
    missing = missing_lines(data)
    return PublishPlan(run_id=run_id, repo=repo, verdict=verdict(data.steps, missing), report=report_md,
                       culprits=tuple(culprits), requester_pr=requester_pr, head_sha=data.bad.sha,
                       base_branch=base_branch, missing=missing, summary="\n".join(summary_lines(data)))


def from_outcome(config: "Config", outcome: "RunOutcome", run_id: str, repo: str | None = None,
                 requester_pr: int | None = None) -> PublishPlan | None:
    """The plan of a finished run, reading its report and verified patches; None without a target repo."""
    repo = repo or config.publish.repo
    if not repo:
        return None
    report_md = (outcome.report_dir / "report.md").read_text()
    patches = {sha: Path(p).read_text() for sha, p in outcome.patches.items()}
    return build(outcome.report, run_id, repo, report_md, requester_pr=requester_pr, patches=patches,
                 base_branch=config.upstream.branch)

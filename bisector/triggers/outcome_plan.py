"""Pure: a finished bisection (RunOutcome) -> a PublishPlan for the publishing layer.

Kept with the triggers because both trigger paths (nightly and `/bisect`) publish the same way;
the report text is read by the caller and passed in, so this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from bisector import gitrepo
from bisector.errors import BisectorError
from bisector.model import Step
from bisector.publish.messages import CONFIRM, UNTRUSTED
from bisector.publish.publish_plan import CulpritPost, PublishPlan, RunVerdict
from bisector.report import kernel_section as kernel_report
from bisector.report.action_summary import summary_lines
from bisector.report.data import ReportData
from bisector.triggers import pr_advice
from bisector.why.culprit_hunks import HunkFinding
from bisector.why.fixes import FixResult
from bisector.why.interactions import combined_patch

if TYPE_CHECKING:
    from bisector.config import Config
    from bisector.pipeline import RunOutcome


def verdict(steps: tuple[Step, ...], missing: tuple[str, ...]) -> RunVerdict:
    """A regression only where one is verified; an unverified one leaves the run incomplete (never a
    success, never a failure), whatever else improved."""
    if any(s.is_regression and s.verified for s in steps):
        return RunVerdict.REGRESSION
    if any(s.is_regression for s in steps):
        return RunVerdict.INCOMPLETE
    if steps:
        return RunVerdict.IMPROVEMENT
    return RunVerdict.INCOMPLETE if missing else RunVerdict.NO_CHANGE


missing_lines = pr_advice.missing_lines


def _step_table(step: Step, data: ReportData | None = None) -> str:
    """The step per shape: change, interval and what it was decided on (a latency step says so); its p
    is in the report."""
    words = pr_advice.decided_on(step, data) if data is not None else {}
    rows = ["| shape | change | 95% CI | decided on |", "|---|---:|---|---|"]
    for shape in step.shapes:
        lo, hi = step.ci95[shape]
        rows.append(
            f"| {shape} | {step.change_pct[shape]:+.1f}% | [{lo:+.1f}, {hi:+.1f}]% | {words.get(shape, 'ratio')} |"
        )
    return "\n".join(rows)


def _restore(fix: FixResult) -> str:
    parts = []
    for shape in fix.shapes:
        if shape in fix.restored and shape in fix.baseline:
            left = fix.remaining_pct(shape)
            parts.append(
                f"{shape}: {fix.verdict(shape)}, {fix.restored[shape]:.1f} against {fix.baseline[shape]:.1f} "
                f"TFLOP/s before the step, side by side" + (f" ({left:+.1f}%)" if left is not None else "")
            )
    return "; ".join(parts)


def _hunk_line(h: HunkFinding) -> str:
    return f"{h.summary}: " + "; ".join(f"`{label}`" for label in h.hunks)


# the comment's untrusted label, with the reason, for the report header: one wording (publish.messages)
UNTRUSTED_NOTE = (
    f"{UNTRUSTED.rstrip('.')}: the code under test ran in the process that timed it and could have "
    f"written its own numbers. {CONFIRM}"
)


def build(
    data: ReportData,
    run_id: str,
    repo: str,
    report_md: str,
    requester_pr: int | None = None,
    patches: Mapping[str, str] | None = None,
    base_branch: str = "main",
    combined: Mapping[tuple[str, ...], str] | None = None,
    untrusted: bool = False,
) -> PublishPlan:
    """`patches`: culprit sha -> patch text of its verified revert; `combined`: the reverts of several
    culprits (newest first) -> their combined patch on the tip; `untrusted`: the code measured was not the
    upstream's own, so no patch is proposed (bisector/publish/messages.py labels the results)."""
    culprits = _culprits(data, patches or {}, combined or {}, untrusted)
    missing = missing_lines(data)
    if untrusted:
        report_md = _labelled(report_md)
    return PublishPlan(
        run_id=run_id,
        repo=repo,
        verdict=verdict(data.steps, missing),
        report=report_md,
        culprits=tuple(culprits),
        requester_pr=requester_pr,
        head_sha=data.bad.sha,
        base_branch=base_branch,
        missing=missing,
        summary="\n".join(summary_lines(data)),
        untrusted=untrusted,
        regressions=sum(1 for s in data.steps if s.is_regression and s.verified),
        improvements=sum(1 for s in data.steps if not s.is_regression and s.verified),
    )


def _culprits(
    data: ReportData, patches: Mapping[str, str], combined: Mapping[tuple[str, ...], str], untrusted: bool
) -> list[CulpritPost]:
    """A post per PR that made a step (once per PR, none for an unsure step): its table, its revert
    where verified, its hunk, kernels and cause."""
    fixes = {f.step_commit: f for f in data.fixes}
    found = {h.step_commit: h for h in data.hunks}
    compiled = {k.step_commit: k for k in data.kernels}
    culprits: list[CulpritPost] = []
    for step in data.steps:
        if step.pr is None or step.candidates or any(c.pr == step.pr for c in culprits):
            continue
        fix = fixes.get(step.commit)
        good_fix = step.is_regression and pr_advice.good_fix(fix) and not untrusted
        comb = pr_advice.combined_for(step, fix, data.interactions) if step.is_regression and not untrusted else None
        culprits.append(
            CulpritPost(
                pr=step.pr,
                step_summary=pr_advice.summary_line(step, data),
                table=_step_table(step, data),
                patch=patches.get(step.commit) if good_fix else None,
                restore=_restore(fix) if good_fix and fix else "",
                patch_base=data.bad.sha,
                commit=step.commit,
                hunk=_hunk_line(found[step.commit]) if step.commit in found else "",
                hunk_diff=found[step.commit].diff if step.commit in found else "",
                kernel=kernel_report.comment_text(compiled[step.commit])
                if step.commit in compiled and compiled[step.commit].kernels
                else "",
                kind="regression" if step.is_regression else "improvement",
                verified=step.verified,
                cause=pr_advice.cause(step, data),
                todo=pr_advice.todo(step, data),
                combined_patch=combined.get(comb.combo) if comb is not None else None,
                nearby=pr_advice.nearby(step, data),
            )
        )
    return culprits


def _labelled(report_md: str) -> str:
    """The report with the untrusted label under its title (where the pipeline did not put it already)."""
    if UNTRUSTED_NOTE in report_md:
        return report_md
    title, _, rest = report_md.partition("\n")
    return f"{title}\n\n> {UNTRUSTED_NOTE}\n{rest}"


def combined_reverts(git_dir: Path, data: ReportData, patches: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """For each step whose revert applies only with others' (pr_advice.combined_for), that combination's
    patch on the tip, made as the interactions stage made it (newest culprit's revert first)."""
    out: dict[tuple[str, ...], str] = {}
    fixes = {f.step_commit: f for f in data.fixes}
    for step in data.steps:
        comb = pr_advice.combined_for(step, fixes.get(step.commit), data.interactions)
        if comb is None or comb.combo in out or not all(c in patches for c in comb.combo):
            continue
        patch, why = combined_patch(git_dir, data.bad.sha, [patches[c] for c in reversed(comb.combo)])
        if not why:
            out[comb.combo] = patch
    return out


def from_outcome(
    config: Config, outcome: RunOutcome, run_id: str, repo: str | None = None, requester_pr: int | None = None
) -> PublishPlan | None:
    """The plan of a finished run, reading its report and verified patches; None without a target repo."""
    repo = repo or config.publish.repo
    if not repo:
        return None
    report_md = (outcome.report_dir / "report.md").read_text()
    patches = {sha: Path(p).read_text() for sha, p in outcome.patches.items()}
    return build(
        outcome.report,
        run_id,
        repo,
        report_md,
        requester_pr=requester_pr,
        patches=patches,
        base_branch=config.upstream.branch,
        combined=reverts_of(config, outcome.report, patches),
    )


def reverts_of(config: Config, data: ReportData, patches: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """`combined_reverts` on the config's upstream; none where it cannot be opened (the text still says
    which reverts apply together)."""
    try:
        return combined_reverts(Path(gitrepo.open_repo(config.upstream.repo, fetch=False).git_dir), data, patches)
    except (BisectorError, OSError):
        return {}

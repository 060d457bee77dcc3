"""The report's sections on why each step happened (issue #14), from ReportData only: what changed
in the compiled kernel (bisector/report/kernels.py) and the hunks that had to travel together.
markdown.render calls `sections` once."""

from __future__ import annotations

from bisector.report import kernels
from bisector.report.data import HunkFinding, ReportData

__all__ = ["sections", "groups_section"]


def _ref(sha: str, data: ReportData) -> str:
    c = data.commit(sha)
    return f"`{sha[:7]}`" + (f" (#{c.pr})" if c and c.pr else "")


def sections(data: ReportData) -> list[str]:
    """Every section that has something to say, each starting with a blank line and its heading."""
    return [*kernels.section(data), *groups_section(data)]


def _group_lines(finding: HunkFinding, data: ReportData) -> list[str]:
    lines = []
    for g in finding.groups:
        lines.append(f"- {_ref(finding.step_commit, data)}: hunks {', '.join(str(i + 1) for i in g.members)} "
                     f"of {finding.n_hunks} searched as one:")
        lines += [f"  - {why}" for why in g.reasons]
    unresolved = [t for t in finding.tries if t.carries is None]
    if unresolved:
        lines.append(f"- {_ref(finding.step_commit, data)}: {len(unresolved)} subset(s) unresolved (they neither "
                     f"carry nor clear the step):")
        lines += [f"  - parent + {'; '.join(f'`{h}`' for h in t.hunks)}: {t.error or 'did not run'}"
                  for t in unresolved]
    return lines


def groups_section(data: ReportData) -> list[str]:
    body = [ln for f in data.hunks for ln in _group_lines(f, data)]
    if not body:
        return []
    return ["", "## Hunks that must travel together", "",
            "Before a culprit is split, a changed `def` (a `@triton.jit` kernel too), parameter list or "
            "`__slots__`, or a name added or removed, is grouped with the hunks that use its names (Python read "
            "with `ast` at the parent and the culprit, other files by name): a subset that splits them does not "
            "import or compile. A subset that does not build, run or give right results is unresolved, not "
            "\"no step\".", "", *body]

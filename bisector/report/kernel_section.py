"""The report section "What changed in the compiled kernel", from ReportData.kernels only.

Per verified step, each kernel that changed between the parent and the culprit (matched by name,
its variants by specialization): a first line with the facts that moved and explain speed
(bisector/why/kernel_diff/speed.py), then its signature change, only the metadata and instruction classes
whose values differ (no row with equal sides), the TTIR/TTGIR values whose computation changed,
and a short diff of the first IR level that differs, without SSA numbering, folded. Unchanged kernels are named in one
line: a step that changes no compiled kernel is itself a finding (the cause is elsewhere: launch
grid, host code, the control).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bisector.report.data import ReportData
from bisector.report.figures import commit_ref
from bisector.why.kernel_diff import speed
from bisector.why.kernel_diff.autotune import Choice
from bisector.why.kernel_diff.diff import KernelDiff, StepKernels

__all__ = ["section", "step_lines", "kernel_lines", "comment_text", "LEVEL_NAMES"]

LEVEL_NAMES = {
    "ttir": "TTIR",
    "ttgir": "TTGIR",
    "llir": "LLVM IR",
    "ptx": "PTX",
    "amdgcn": "AMDGCN",
    "metadata": "metadata",
}


def _fence(text: str, lang: str = "diff") -> list[str]:
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return [f"{fence}{lang}", text.rstrip("\n"), fence]


def _cell(value: object) -> str:
    return "—" if value is None else str(value).replace("|", "\\|")


def _pct(x: int, y: int) -> str:
    if x == y:
        return ""
    return "new" if x == 0 else f"{100.0 * (y / x - 1):+.0f}%"


def _head(d: KernelDiff) -> str:
    """The first line: the kernel and the facts that moved which explain speed."""
    variants = f", {d.variants} compiled variants" if d.variants > 1 else ""
    facts = speed.headline(d.before, d.after)
    status = "" if d.status in ("changed", "signature changed") else f" **{d.status}**:"
    return f"- `{d.name}`{variants}:{status} " + (facts or "no resource or instruction class that explains speed moved")


def _signature(d: KernelDiff) -> str:
    """The signature, only where it changed (a kernel's may run to 40 arguments)."""
    return f"  signature changed: {', '.join(d.arg_changes)} ({d.signature})." if d.arg_changes else ""


def _how(d: KernelDiff) -> str:
    """How the variants were paired, where the code first differs, what computes differently."""
    parts = []
    if d.respecialized:
        parts.append("paired with the closest variant: " + ", ".join(d.respecialized))
    levels = ", ".join(LEVEL_NAMES.get(lv, lv) for lv in d.levels_changed)
    if d.first_level:
        parts.append(f"code differs from {LEVEL_NAMES.get(d.first_level, d.first_level)} on ({levels})")
    elif d.levels_changed:
        parts.append(f"{levels} only")
    if d.changed_values:
        parts.append("values computed differently: " + ", ".join(f"`{v}`" for v in d.changed_values))
    return ("  " + "; ".join(parts) + ".") if parts else ""


REPORT_DIFF_LINES = 12  # lines of the IR diff shown in report.md (the PR comment and the kept file: more)


def _details(d: KernelDiff, diff_lines: int | None) -> list[str]:
    """Only the metadata and instruction classes that differ, less what the first line said already
    (report.md: `diff_lines` given), then the IR diff, cut to `diff_lines`."""
    lines = []
    said = _head(d) if diff_lines is not None else ""
    moved = [r for r in d.metadata_rows() if r[1] != r[2]]
    rows = [r for r in moved if r[0] not in speed.FOLDED and f"{r[0]} {r[1]} → {r[2]}" not in said]
    if rows:
        lines += ["  | metadata | parent | culprit |", "  |---|---:|---:|"]
        lines += [f"  | {key} | {_cell(b)} | {_cell(a)} |" for key, b, a in rows]
        lines.append("")
    folded = [r for r in moved if r[0] in speed.FOLDED]
    if folded:  # said, since it differs, but it never explains speed
        lines += [
            "  Build metadata that differs: " + "; ".join(f"{k} {_cell(b)} → {_cell(a)}" for k, b, a in folded) + ".",
            "",
        ]
    hist = [r for r in d.histogram_rows() if r[1] != r[2] and f"{r[0]} {r[1]} → {r[2]}" not in said]
    if hist:
        isa = (d.after or d.before).isa.upper() if (d.after or d.before) else ""  # type: ignore[union-attr]
        lines += [f"  | {isa} instructions (static) | parent | culprit | change |", "  |---|---:|---:|---:|"]
        lines += [f"  | {key} | {b} | {a} | {_pct(b, a)} |" for key, b, a in hist]
        lines.append("")
    if d.ir_diff:
        name = LEVEL_NAMES.get(d.first_level, d.first_level)
        diff = d.ir_diff.rstrip("\n").splitlines()
        shown = diff if diff_lines is None else diff[:diff_lines]
        cut = f", its first {len(shown)} lines" if len(shown) < len(diff) else ""
        kept = f" (whole: `{d.ir_diff_path}`)" if d.ir_diff_path else ""
        lines += [f"  {name} diff{cut}, locations and SSA numbering left out{kept}:", "", *_fence("\n".join(shown)), ""]
    return lines


def kernel_lines(d: KernelDiff, folded_diff: bool = True) -> list[str]:
    """One changed (added, removed) kernel: the facts that explain speed first, its signature where
    it changed; then, folded in the report, what else differs and its IR diff."""
    lines = [_head(d), *filter(None, [_signature(d), _how(d)]), ""]
    details = _details(d, REPORT_DIFF_LINES if folded_diff else None)
    if folded_diff and details:
        return [
            *lines,
            "  <details><summary>metadata, instructions and IR that differ</summary>",
            "",
            *details,
            "  </details>",
            "",
        ]
    return lines + details


def _choice(c: Choice | None) -> str:
    if c is None:
        return "not tuned"
    return f"{c.chosen or 'its config'}" + (f" ({c.ms:.4g} ms of {c.configs} timed)" if c.ms is not None else "")


def choice_lines(sk: StepKernels) -> list[str]:
    """The autotuner's changed choices across the step, and how many stayed: a changed choice
    launches another of the variants both caches hold, which the IR comparison does not show."""
    if not sk.autotune:
        return []
    same = len(sk.autotune) - len(sk.choices_changed)
    kept = f" ({same} kernel and key pair{'s' if same != 1 else ''} chose the same)" if same else ""
    if not sk.choices_changed:
        return [f"The autotuner chose the same configs on both sides{kept}.", ""]
    return [
        f"The autotuner chose differently{kept}:",
        *(f"- `{c.kernel}` key {c.key}: {_choice(c.before)} -> {_choice(c.after)}" for c in sk.choices_changed),
        "",
    ]


def step_lines(sk: StepKernels, data: ReportData) -> list[str]:
    lines = [f"### {commit_ref(sk.step_commit, data, subject=True)}", ""]
    if sk.note and not sk.kernels:
        return [*lines, f"Nothing to compare: {sk.note}.", "", *choice_lines(sk)]
    if sk.note:
        lines += [f"Note: {sk.note}.", ""]
    changed = sk.changed
    if not changed:
        lines += [
            "No compiled kernel changed (locations and debug information left out): the step's cause is "
            + (
                "the autotuner's choice below, or outside the kernels compiled here."
                if sk.choices_changed
                else "outside the kernels compiled here (launch, host code, a kernel this cache does not hold)."
            ),
            "",
        ]
    shown: dict[tuple[str, ...], int] = {}
    for d in changed:  # a kernel compiled in several variants that differ alike: said once
        key = tuple(kernel_lines(d))
        shown[key] = shown.get(key, 0) + 1
    for key, times in shown.items():
        lines += list(key) if times == 1 else [key[0] + f" (the same in {times} variants)", *key[1:]]
    same = [d.name for d in sk.kernels if d.status == "unchanged"]
    if same:
        lines += ["Unchanged: " + ", ".join(f"`{n}`" for n in dict.fromkeys(same)) + ".", ""]
    return lines + choice_lines(sk)


def section(data: ReportData) -> list[str]:
    """The section, or nothing when no step was verified."""
    if not data.kernels:
        return []
    lines = ["", "## What changed in the compiled kernel", ""]
    notes = {sk.note for sk in data.kernels}
    if not any(sk.kernels for sk in data.kernels) and len(notes) == 1:  # one reason for every step: say it once
        return [*lines, f"Nothing to compare for any step: {notes.pop()}.", ""]
    lines += [
        "Each verified step's parent and culprit, their kernels as the trials compiled them, matched by "
        "name, their compiled variants by specialization; only what differs is shown, the details folded. "
        "Counts are static instructions in the assembly; occupancy is estimated from registers, shared "
        "memory and warps; IR compared without locations or debug information. The compiled artifacts "
        "are kept in `kernels/` beside the report where the run wrote it (not shipped with it).",
        "",
    ]
    for sk in data.kernels:
        lines += step_lines(sk, data)
    return lines


def comment_text(sk: StepKernels, limit: int = 6000) -> str:
    """The PR comment's folded part for one step: changed kernels, tables, the diff unfolded (the
    whole block is folded there), cut to `limit` characters."""
    if not sk.changed:
        return sk.note or "No compiled kernel changed."
    parts: Sequence[str] = [ln for d in sk.changed for ln in kernel_lines(d, folded_diff=False)]
    text = "\n".join(ln[2:] if ln.startswith("  ") else ln for ln in parts).strip() + "\n"
    if len(text) > limit:
        cut = text[:limit]
        if cut.count("```") % 2:
            cut += "\n```"
        text = cut + "\n\n(cut; the report has it all)\n"
    return text

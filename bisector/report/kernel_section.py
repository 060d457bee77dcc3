"""The report section "What changed in the compiled kernel", from ReportData.kernels only.

Per verified step, each kernel that changed between the parent and the culprit: the metadata that
moved (stages, shared memory, registers, spills) beside the launch shape, the instruction
histogram with the rows that changed first, the TTIR/TTGIR values whose computation changed,
and a short diff of the first IR level that differs, folded. Unchanged kernels are named in one
line: a step that changes no compiled kernel is itself a finding (the cause is elsewhere: launch
grid, host code, the control).
"""

from __future__ import annotations

import re
from typing import Sequence

from bisector.report.figures import commit_ref
from bisector.report.data import ReportData
from bisector.why.kernel_diff.diff import KernelDiff, StepKernels

__all__ = ["section", "step_lines", "kernel_lines", "comment_text", "LEVEL_NAMES"]

LEVEL_NAMES = {"ttir": "TTIR", "ttgir": "TTGIR", "llir": "LLVM IR", "ptx": "PTX", "amdgcn": "AMDGCN",
               "metadata": "metadata"}
# shown even when equal, for context: the launch shape and the resources
CORE = ("num_warps", "num_stages", "num_ctas", "shared memory bytes", "registers", "spill store bytes",
        "spill load bytes", "vgprs", "agprs", "sgprs", "scratch bytes", "LDS bytes")


def _fence(text: str, lang: str = "diff") -> list[str]:
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return [f"{fence}{lang}", text.rstrip("\n"), fence]


def _cell(value: object) -> str:
    return "—" if value is None else str(value).replace("|", "\\|")


def _pct(x: int, y: int) -> str:
    if x == y:
        return ""
    return "new" if x == 0 else f"{100.0 * (y / x - 1):+.0f}%"


def kernel_lines(d: KernelDiff, folded_diff: bool = True) -> list[str]:
    """One changed (added, removed) kernel: a headline, its metadata and histogram tables, its diff."""
    levels = ", ".join(LEVEL_NAMES.get(lv, lv) for lv in d.levels_changed)
    variants = f", {d.variants} compiled variants" if d.variants > 1 else ""
    head = f"- `{d.name}` ({d.signature}{variants}): **{d.status}**"
    if d.first_level:
        head += f", from {LEVEL_NAMES.get(d.first_level, d.first_level)} on ({levels})"
    elif d.levels_changed:
        head += f" ({levels} only)"
    if d.changed_values:
        head += "; values computed differently: " + ", ".join(f"`{v}`" for v in d.changed_values)
    lines = [head, ""]
    rows = [r for r in d.metadata_rows() if r[1] != r[2] or r[0] in CORE]
    if rows:
        lines += ["  | metadata | parent | culprit |", "  |---|---:|---:|"]
        for key, b, a in rows:
            mark = "**" if b != a else ""
            lines.append(f"  | {mark}{key}{mark} | {_cell(b)} | {mark}{_cell(a)}{mark} |")
        lines.append("")
    hist = d.histogram_rows()
    if hist:
        isa = (d.after or d.before).isa.upper() if (d.after or d.before) else ""  # type: ignore[union-attr]
        lines += [f"  | {isa} instructions (static) | parent | culprit | change |", "  |---|---:|---:|---:|"]
        for key, b, a in hist:
            mark = "**" if b != a else ""
            lines.append(f"  | {mark}{key}{mark} | {b} | {mark}{a}{mark} | {_pct(b, a)} |")
        lines.append("")
    if d.ir_diff:
        name = LEVEL_NAMES.get(d.first_level, d.first_level)
        whole = f"; whole: [{d.ir_diff_path}]({d.ir_diff_path})" if d.ir_diff_path else ""
        body = [*_fence(d.ir_diff), ""]
        if folded_diff:
            lines += [f"  <details><summary>{name} diff, locations left out{whole}</summary>", "", *body,
                      "  </details>", ""]
        else:
            lines += [f"  {name} diff, locations left out{whole}:", "", *body]
    return lines


def step_lines(sk: StepKernels, data: ReportData) -> list[str]:
    lines = [f"### {commit_ref(sk.step_commit, data, subject=True)}", ""]
    if sk.note and not sk.kernels:
        return lines + [f"Nothing to compare: {sk.note}.", ""]
    if sk.note:
        lines += [f"Note: {sk.note}.", ""]
    if sk.artifacts:
        lines += ["Artifacts (parent, culprit): " + ", ".join(f"[{p.strip()}]({p.strip()})"
                                                           for p in sk.artifacts.split(",")), ""]
    changed = sk.changed
    if not changed:
        lines += ["No compiled kernel changed (locations and debug information left out): the step's cause is "
                  "outside the kernels compiled here (launch, host code, a kernel this cache does not hold).", ""]
    for d in changed:
        lines += kernel_lines(d)
    same = [d.name for d in sk.kernels if d.status == "unchanged"]
    if same:
        lines += ["Unchanged: " + ", ".join(f"`{n}`" for n in dict.fromkeys(same)) + ".", ""]
    return lines


def section(data: ReportData) -> list[str]:
    """The section, or nothing when no step was verified."""
    if not data.kernels:
        return []
    lines = ["", "## What changed in the compiled kernel", ""]
    notes = {sk.note for sk in data.kernels}
    if not any(sk.kernels for sk in data.kernels) and len(notes) == 1:  # one reason for every step: say it once
        return lines + [f"Nothing to compare for any step: {notes.pop()}.", ""]
    lines += ["Each verified step's parent and culprit, their kernels as the trials compiled them (kept beside this "
              "report), matched by name and signature. Counts are static instructions in the assembly; "
              "IR compared without locations or debug information.", ""]
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

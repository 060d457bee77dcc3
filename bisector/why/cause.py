"""The cause of a step in one sentence, drawn from the kernel diff and the hunks that carry it.

A kernel engineer reading a step wants the mechanism first: "`kv_stride` is passed unspecialized (in
`do_not_specialize`), so its loads lost 16-byte alignment: cp.async 80 -> 0, 16-bit global loads
0 -> 128, 172 B of spills". The candidates are what a compiled Triton kernel's speed turns on:
argument specialization (divisibility by 16, `== 1`, constexpr values), the launch configuration
(num_warps, num_stages, tiles), spills, load and store widths, asynchronous copies, matrix
instructions, shared memory, occupancy, approximate against exact math. Root causes (what the
commit changed: a specialization, a launch option, a constant) are ranked above the symptoms they
explain (what the compiler made of it), and each by how far its facts moved; with nothing that
explains speed moved, the sentence says "unclear" rather than guess.

Pure: a StepKernels and the culprit's diff text in, a Cause out; bisector/report renders it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bisector.why.culprit_hunks import HunkFinding
from bisector.why.kernel_diff import speed
from bisector.why.kernel_diff.diff import KernelDiff, StepKernels

__all__ = ["Candidate", "Cause", "cause_of", "for_steps", "symptoms"]

#: how much each kind of fact, per unit of log change, explains a change of speed
_WEIGHT = {"spills": 3.0, "async": 2.0, "mma": 2.0, "math": 2.0, "occupancy": 2.0, "widths": 1.5, "shared": 1.0,
           "registers": 0.5}
#: a root cause ranks above any symptom: it is what the commit changed, the symptoms what followed
_ROOT = 100.0
#: the symptoms each kind of root cause explains: among roots, the one that explains more of what moved
#: ranks first (a lost divisibility explains narrower loads and lost async copies, not shared memory)
_EXPLAINS = {"specialization": {"async": 1.0, "widths": 1.0, "registers": 0.2},
             "launch": {"shared": 1.0, "async": 1.0, "registers": 1.0, "occupancy": 1.0, "spills": 1.0, "mma": 0.5},
             "constexpr": {kind: 0.5 for kind in _WEIGHT}}


@dataclass(frozen=True)
class Candidate:
    """One possible cause: its kind, how well it explains the change (higher first), in words."""

    kind: str  # "specialization" | "launch" | "constexpr" | "spills" | "async" | "mma" | "widths" | ...
    score: float
    text: str


@dataclass(frozen=True)
class Cause:
    """The step's cause in one sentence, and every candidate ranked."""

    step_commit: str
    sentence: str
    kind: str  # the first candidate's kind, or "unclear"
    kernel: str = ""  # the kernel it is about
    ranked: tuple[Candidate, ...] = ()


def _kind(fact: str) -> str | None:
    if fact.startswith(("spill", "stack", "local bytes", "scratch", "vgpr spills", "sgpr spills")):
        return "spills"
    if fact.startswith(("cp.async copy", "TMA copy", "bulk async copy")):
        return "async"
    if fact.startswith(("wgmma m", "mma m", "mfma")):
        return "mma"
    if re.match(r"(global|shared|buffer|LDS) (load|store)", fact) or fact.startswith(("ldmatrix", "stmatrix")):
        return "widths"
    if fact in ("shared memory bytes", "static shared bytes", "LDS bytes"):
        return "shared"
    if fact.startswith("occupancy"):
        return "occupancy"
    if fact in ("registers", "vgprs", "agprs", "sgprs"):
        return "registers"
    if "approx" in fact or "f64" in fact or fact.endswith("(precise)") or fact.startswith(("v_exp", "v_log")):
        return "math"
    return None


def _words(fact: str, before: object, after: object, unit: str) -> str:
    """One moved fact as a reader says it: "172 B of spills", "cp.async 80 -> 0"."""
    if fact == "spill store bytes" and before in (0, None):
        return f"{after} B of spills"
    name = {"cp.async copy": "cp.async", "shared memory bytes": "shared memory",
            "occupancy (CTAs/SM, est.)": "occupancy (CTAs/SM)"}.get(fact, fact)
    m = re.match(r"(global|shared) (load|store) (\d+)-bit", fact)
    if m:
        name = f"{m.group(3)}-bit {m.group(1)} {m.group(2)}s"
    name = re.sub(r" \((approximate|precise)\)$", "", name)
    return (f"{name} {before if before is not None else 0} -> {after if after is not None else 0}"
            f"{' ' + unit if unit else ''}")


def symptoms(d: KernelDiff) -> list[tuple[str, float, str]]:
    """(kind, how far it moved, words) for each fact of the kernel that explains speed, strongest first."""
    out = []
    for fact, before, after, unit in speed.moved(d.before, d.after):
        kind = _kind(fact)
        was, now = before or 0, after or 0
        if kind is None or not isinstance(was, (int, float)) or not isinstance(now, (int, float)):
            continue
        size = abs(math.log((float(now) + 1) / (float(was) + 1)))
        out.append((kind, _WEIGHT[kind] * size, _words(fact, before, after, unit)))
    return sorted(out, key=lambda s: -s[1])


def _not_specialized(diff: str) -> list[str]:
    """Names the diff adds to a `do_not_specialize` list."""
    def names(sign: str) -> set[str]:
        found: set[str] = set()
        for line in diff.splitlines():
            if line.startswith(sign) and "do_not_specialize" in line:
                found.update(re.findall(r"['\"](\w+)['\"]", line.split("do_not_specialize", 1)[1]))
        return found
    return sorted(names("+") - names("-"))


def _constants(diff: str) -> list[str]:
    """Compile-time constants (upper-case names, by Triton's convention) whose value the diff changes:
    "`GROUP_M` 8 -> 1"."""
    pattern = re.compile(r"\b([A-Z][A-Z0-9_]*)\s*[=:]\s*(-?\d+)\b")

    def values(sign: str) -> dict[str, str]:
        return {n: v for line in diff.splitlines() if line.startswith(sign) and not line.startswith(sign * 3)
                for n, v in pattern.findall(line[1:])}
    before, after = values("-"), values("+")
    return [f"`{n}` {before[n]} -> {after[n]}" for n in after if n in before and before[n] != after[n]]


def _alignment(found: Sequence[tuple[str, float, str]]) -> str:
    """What a change of specialization did to the loads, when the symptoms show it."""
    moved = [w for k, _, w in found if k in ("async", "widths")]
    if not moved:
        return ""
    lost = any(re.search(r"cp\.async \d+ -> 0\b", w) or re.match(r"(8|16)-bit global loads 0 -> ", w) for w in moved)
    gained = any(re.search(r"cp\.async 0 -> \d+", w) for w in moved)
    return "its loads lost 16-byte alignment" if lost else "its loads are 16-byte aligned" if gained else ""


def _roots(d: KernelDiff, diff: str) -> list[Candidate]:
    """What the commit changed that a kernel's speed turns on, each scored by the symptoms it explains."""
    found = symptoms(d)

    def root(kind: str, text: str) -> Candidate:
        return Candidate(kind, _ROOT + sum(_EXPLAINS[kind].get(k, 0.0) * s for k, s, _ in found), text)

    return [root(c.kind, c.text) for c in _changes(d, diff)]


def _changes(d: KernelDiff, diff: str) -> list[Candidate]:
    roots: list[Candidate] = []
    unspecialized = set(_not_specialized(diff))
    for name in sorted(unspecialized):
        roots.append(Candidate("specialization", 0, f"`{name}` is passed unspecialized (in `do_not_specialize`)"))
    for r in d.respecialized:
        m = re.match(r"`(\w+)`: (.+) -> (.+)$", r)
        if not m or m.group(1) in unspecialized:
            continue
        name, before, after = m.groups()
        if before.startswith("= ") and after.startswith("= "):
            roots.append(Candidate("constexpr", 0, f"`{name}` {before[2:]} -> {after[2:]}"))
        else:
            roots.append(Candidate("specialization", 0, f"`{name}` went from {before} to {after}"))
    rows = {k: (b, a) for k, b, a in d.metadata_rows() if b != a}
    launch = [f"{k} {rows[k][0]} -> {rows[k][1]}" for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
              if k in rows]
    if launch:
        roots.append(Candidate("launch", 0, ", ".join(launch)))
    roots += [Candidate("constexpr", 0, c) for c in _constants(diff)
              if not any(c.split("`")[1] == r.text.split("`")[1] for r in roots if r.text.startswith("`"))]
    return roots


def _sentence(root: Candidate | None, found: Sequence[tuple[str, float, str]], limit: int = 4) -> str:
    facts = ", ".join(w for _, _, w in found[:limit])
    if root is None:
        return facts
    how = _alignment(found) if root.kind == "specialization" else ""
    if not facts:
        return f"{root.text}; no resource, width, copy or matrix instruction count of the kernel moved"
    return f"{root.text}, so {how}: {facts}" if how else f"{root.text}: {facts}"


def cause_of(kernels: StepKernels | None, diff: str = "") -> Cause:
    """The step's cause from its compiled kernels (the changed one whose facts moved most) and the
    culprit's diff (the hunks that carry it, else the whole commit): one sentence, candidates ranked."""
    commit = kernels.step_commit if kernels else ""
    changed = kernels.changed if kernels else ()
    if not changed:
        why = kernels.note if kernels and kernels.note else "no compiled kernel changed: the cause is outside the " \
            "kernels compiled here (launch, host code)"
        constants = _constants(diff)
        lead = f"{', '.join(constants)} in the commit, but " if constants else ""
        return Cause(commit, f"unclear: {lead}{why}.", "unclear")
    scored = [(sum(s for _, s, _ in symptoms(d)), d) for d in changed]
    best = max(scored, key=lambda x: x[0])[1]
    found = symptoms(best)
    roots = sorted(_roots(best, diff), key=lambda c: -c.score)
    ranked = tuple(roots) + tuple(Candidate(k, s, w) for k, s, w in found)
    if not found and not roots:
        moved = speed.headline(best.before, best.after) or "its code only"
        return Cause(commit, f"unclear: `{best.name}` compiled differently ({moved}), but nothing that explains "
                             f"speed moved (spills, widths, copies, matrix instructions, shared memory, occupancy).",
                     "unclear", best.name, ranked)
    root = roots[0] if roots else None
    text = _sentence(root, found)
    if root is None:
        text = f"{_lead(best.name, found)}: {text}"
    return Cause(commit, text + ".", ranked[0].kind, best.name, ranked)


def _lead(kernel: str, found: Sequence[tuple[str, float, str]]) -> str:
    """The sentence's subject when no root cause is known: the kernel and what its strongest fact says."""
    kind, _, words = found[0]
    k = f"`{kernel}`"
    if kind == "math":
        approx = [w for _, _, w in found if ".approx" in w or w.startswith(("v_exp", "v_log"))]
        fewer = any(re.search(r" -> 0$", w) for w in approx)
        return f"{k} computes exactly where it used approximate math" if fewer else \
            f"{k} uses approximate math" if approx else f"{k}'s arithmetic changed"
    if kind == "spills":
        return f"{k} spills registers" if "B of spills" in words else f"{k}'s spills changed"
    if kind == "async":
        return f"{k} lost its asynchronous copies" if re.search(r" -> 0$", words) else \
            f"{k} gained asynchronous copies" if re.search(r" 0 -> ", words) else f"{k}'s asynchronous copies changed"
    return {"mma": f"{k}'s matrix instructions changed", "widths": f"{k}'s loads and stores changed width",
            "shared": f"{k}'s shared memory changed", "occupancy": f"{k}'s occupancy changed",
            "registers": f"{k}'s register use changed"}.get(kind, f"{k} changed")


def for_steps(kernels: Sequence[StepKernels], findings: Sequence[HunkFinding],
              diff_of: Callable[[str], str]) -> tuple[Cause, ...]:
    """One cause per step whose kernels were compared: from the hunks that carry it where the hunk
    search found them, else from the culprit's whole diff (`diff_of(sha)`)."""
    found = {f.step_commit: f.diff for f in findings if f.diff}
    return tuple(cause_of(k, found.get(k.step_commit) or diff_of(k.step_commit)) for k in kernels)

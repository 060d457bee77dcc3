"""The cause of a step in one sentence, drawn from the kernel diff and the hunks that carry it.

A kernel engineer reading a step wants the mechanism first: "`kv_stride` is passed unspecialized (in
`do_not_specialize`), so its loads lost 16-byte alignment: cp.async 80 -> 0, 16-bit global loads
0 -> 128, 172 B of spills". The candidates are what a compiled Triton kernel's speed turns on:
argument specialization (divisibility by 16, `== 1`, constexpr values), the launch configuration
(num_warps, num_stages, tiles), spills, load and store widths, asynchronous copies, matrix
instructions, shared memory, occupancy, approximate against exact math. Root causes (what the
commit changed: a specialization, a launch option, a constant) are ranked above the symptoms they
explain (what the compiler made of it), and each by how far its facts moved; with nothing that
explains speed moved, the sentence says "unclear" rather than guess. A runtime argument made
`tl.constexpr` is such a root: its value compiled in, the masks built from it are known, and the
loads can be vectorized ("`ROTARY_DIM` became a constexpr (was runtime `rotary_dim`)").

A kernel compiled for several shapes has several variants, each moved its own way: the sentence
leads with the variant that moved most (named by its tiles, the block shapes it loads and stores),
then says what each other variant moved, or that nothing that explains speed did.

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
_WEIGHT = {
    "spills": 3.0,
    "async": 2.0,
    "mma": 2.0,
    "math": 2.0,
    "occupancy": 2.0,
    "widths": 1.5,
    "shared": 1.0,
    "registers": 0.5,
}
#: a root cause ranks above any symptom: it is what the commit changed, the symptoms what followed
_ROOT = 100.0
#: the symptoms each kind of root cause explains: among roots, the one that explains more of what moved
#: ranks first (a lost divisibility explains narrower loads and lost async copies, not shared memory)
_EXPLAINS = {
    "specialization": {"async": 1.0, "widths": 1.0, "registers": 0.2},
    "launch": {"shared": 1.0, "async": 1.0, "registers": 1.0, "occupancy": 1.0, "spills": 1.0, "mma": 0.5},
    "constexpr": {kind: 0.5 for kind in _WEIGHT},
}


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
    name = {
        "cp.async copy": "cp.async",
        "shared memory bytes": "shared memory",
        "occupancy (CTAs/SM, est.)": "occupancy (CTAs/SM)",
    }.get(fact, fact)
    m = re.match(r"(global|shared) (load|store) (\d+)-bit", fact)
    if m:
        name = f"{m.group(3)}-bit {m.group(1)} {m.group(2)}s"
    name = re.sub(r" \((approximate|precise)\)$", "", name)
    return (
        f"{name} {before if before is not None else 0} -> {after if after is not None else 0}"
        f"{' ' + unit if unit else ''}"
    )


#: global memory traffic is what a memory-bound kernel's speed turns on; an on-chip (shared memory)
#: access costs a fraction of a global one, so its width moves weigh that much less
_ON_CHIP = ("shared ", "LDS ", "ldmatrix", "stmatrix")
_ON_CHIP_SCALE = 0.4


def symptoms(d: KernelDiff) -> list[tuple[str, float, str]]:
    """(kind, how far it moved, words) for each fact of the kernel that explains speed, strongest first."""
    out = []
    moved = speed.moved(d.before, d.after)
    sizes = {(b, a) for f, b, a, _ in moved if f == "shared memory bytes"}
    for fact, before, after, unit in moved:
        kind = _kind(fact)
        was, now = before or 0, after or 0
        if kind is None or not isinstance(was, (int, float)) or not isinstance(now, (int, float)):
            continue
        if fact == "static shared bytes" and (before, after) in sizes:
            continue  # the same size as the metadata's, said once
        size = abs(math.log((float(now) + 1) / (float(was) + 1)))
        scale = _ON_CHIP_SCALE if kind == "widths" and fact.startswith(_ON_CHIP) else 1.0
        out.append((kind, _WEIGHT[kind] * size * scale, _words(fact, before, after, unit)))
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
    pattern = re.compile(r"\b([A-Z][A-Z0-9_]*)\s*[=:]\s*(-?\d+)\b(?!\s*(?:if\b|[-+*/%<>.(\[]))")

    def values(sign: str) -> dict[str, str]:
        return {
            n: v
            for line in diff.splitlines()
            if line.startswith(sign) and not line.startswith(sign * 3)
            for n, v in pattern.findall(line[1:])
        }

    before, after = values("-"), values("+")
    return [f"`{n}` {before[n]} -> {after[n]}" for n in after if n in before and before[n] != after[n]]


def _made_constexpr(arg_changes: Sequence[str], diff: str) -> list[str]:
    """Arguments the commit turned from runtime values into `tl.constexpr` (or back): the kernel lost
    an argument and the diff adds a constexpr parameter of that name in any case (`rotary_dim` ->
    `ROTARY_DIM: tl.constexpr`), or the reverse. A constexpr's value is compiled in: masks and
    offsets built from it are known, so the compiler can prove a whole vector in or out of bounds."""

    def params(sign: str) -> dict[str, str]:
        found = {}
        for line in diff.splitlines():
            if line.startswith(sign) and not line.startswith(sign * 3):
                m = re.match(r"\s*(\w+)\s*:\s*tl\.constexpr\b", line[1:])
                if m:
                    found[m.group(1).lower()] = m.group(1)
        return found

    def lost(verb: str) -> list[str]:
        return [m.group(1) for c in arg_changes for m in [re.match(rf"{verb} `(\w+)", c)] if m]

    out = []
    added, dropped = params("+"), params("-")
    for name in lost("removed"):
        if name.lower() in added and name.lower() not in dropped:
            out.append(f"`{added[name.lower()]}` became a constexpr (was runtime `{name}`)")
    for name in lost("added"):
        if name.lower() in dropped and name.lower() not in added:
            out.append(f"`{name}` became a runtime argument (was constexpr `{dropped[name.lower()]}`)")
    return out


def _alignment(found: Sequence[tuple[str, float, str]]) -> str:
    """What a change of specialization did to the loads, when the symptoms show it."""
    moved = [w for k, _, w in found if k in ("async", "widths")]
    if not moved:
        return ""
    lost = any(re.search(r"cp\.async \d+ -> 0\b", w) or re.match(r"(8|16)-bit global loads 0 -> ", w) for w in moved)
    gained = any(re.search(r"cp\.async 0 -> \d+", w) for w in moved)
    if lost or gained:
        return "its loads lost 16-byte alignment" if lost else "its loads are 16-byte aligned"
    return _widths_moved(moved)


def _widths_moved(moved: Sequence[str]) -> str:
    """ "its global loads widened" where narrower global loads went away and wider ones came (or the reverse)."""
    gone: list[int] = []
    came: list[int] = []
    for w in moved:
        m = re.match(r"(\d+)-bit global loads (\d+) -> (\d+)$", w)
        if m:
            bits, b, a = map(int, m.groups())
            (gone if a < b else came).append(bits)
    if gone and came:
        return (
            "its global loads widened"
            if min(came) > max(gone)
            else "its global loads narrowed"
            if max(came) < min(gone)
            else ""
        )
    return ""


def _roots(d: KernelDiff, diff: str) -> list[Candidate]:
    """What the commit changed that a kernel's speed turns on, each scored by the symptoms it explains."""
    found = symptoms(d)

    def root(kind: str, text: str) -> Candidate:
        return Candidate(kind, _ROOT + sum(_EXPLAINS[kind].get(k, 0.0) * s for k, s, _ in found), text)

    return [root(c.kind, c.text) for c in _changes(d, diff)]


def _changes(d: KernelDiff, diff: str) -> list[Candidate]:
    roots: list[Candidate] = [Candidate("specialization", 0, t) for t in _made_constexpr(d.arg_changes, diff)]
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
    launch = [
        f"{k} {rows[k][0]} -> {rows[k][1]}" for k in ("num_warps", "num_stages", "num_ctas", "maxnreg") if k in rows
    ]
    if launch:
        roots.append(Candidate("launch", 0, ", ".join(launch)))
    roots += [
        Candidate("constexpr", 0, c)
        for c in _constants(diff)
        if not any(c.split("`")[1] == r.text.split("`")[1] for r in roots if r.text.startswith("`"))
    ]
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
    chose = kernels.choices_changed if kernels else ()
    if not changed and chose:  # the same variants compiled, another one launched
        c = chose[0]
        was, now = (x.chosen if x else "no choice" for x in (c.before, c.after))
        more = f" (and {len(chose) - 1} more kernel and key pairs)" if len(chose) > 1 else ""
        return Cause(
            commit, f"the autotuner chose another config for `{c.kernel}`: {was} -> {now}{more}.", "autotune", c.kernel
        )
    if not changed:
        why = (
            kernels.note
            if kernels and kernels.note
            else "no compiled kernel changed: the cause is outside the kernels compiled here (launch, host code)"
        )
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
        return Cause(
            commit,
            f"unclear: `{best.name}` compiled differently ({moved}), but nothing that explains "
            f"speed moved (spills, widths, copies, matrix instructions, shared memory, occupancy).",
            "unclear",
            best.name,
            ranked,
        )
    root = roots[0] if roots else None
    text = _sentence(root, found)
    if root is None:
        text = f"{_lead(best.name, found)}: {text}"
    others = [d for d in changed if d is not best and d.name == best.name]
    if others:
        text += f" (`{best.name}`{', ' + best.tile + ' tiles' if best.tile else ''})" + _others(others, root, diff)
    return Cause(commit, text + ".", ranked[0].kind, best.name, ranked)


def _others(variants: Sequence[KernelDiff], lead: Candidate | None, diff: str, limit: int = 3) -> str:
    """The kernel's other compiled variants (other shapes) where they moved differently: each its own
    root where that is not the lead's, and its strongest facts; those where nothing moved, counted."""
    parts, still = [], []
    for d in sorted(variants, key=lambda d: -sum(s for _, s, _ in symptoms(d))):
        found = symptoms(d)
        if not found:
            still.append(d.tile)
            continue
        roots = [r for r in sorted(_roots(d, diff), key=lambda c: -c.score) if lead is None or r.text != lead.text]
        # a launch option is the variant's own (the commit's diff-wide roots are the lead's)
        own = f"{roots[0].text}: " if roots and (roots[0].kind == "launch" or lead is None) else ""
        parts.append(
            f"{d.tile + ' tiles' if d.tile else 'another variant'}: {own}{', '.join(w for _, _, w in found[:limit])}"
        )
    if still:
        tiles = ", ".join(t for t in still if t)
        n = len(still)
        parts.append(
            f"{'its other variant' if n == 1 else f'{n} other variants'}"
            f"{f' ({tiles} tiles)' if tiles else ''}: nothing that explains speed moved"
        )
    return "; " + "; ".join(parts) if parts else ""


def _lead(kernel: str, found: Sequence[tuple[str, float, str]]) -> str:
    """The sentence's subject when no root cause is known: the kernel and what its strongest fact says."""
    kind, _, words = found[0]
    k = f"`{kernel}`"
    if kind == "math":
        approx = [w for _, _, w in found if ".approx" in w or w.startswith(("v_exp", "v_log"))]
        fewer = any(re.search(r" -> 0$", w) for w in approx)
        return (
            f"{k} computes exactly where it used approximate math"
            if fewer
            else f"{k} uses approximate math"
            if approx
            else f"{k}'s arithmetic changed"
        )
    if kind == "spills":
        return f"{k} spills registers" if "B of spills" in words else f"{k}'s spills changed"
    if kind == "async":
        return (
            f"{k} lost its asynchronous copies"
            if re.search(r" -> 0$", words)
            else f"{k} gained asynchronous copies"
            if re.search(r" 0 -> ", words)
            else f"{k}'s asynchronous copies changed"
        )
    return {
        "mma": f"{k}'s matrix instructions changed",
        "widths": f"{k}'s loads and stores changed width",
        "shared": f"{k}'s shared memory changed",
        "occupancy": f"{k}'s occupancy changed",
        "registers": f"{k}'s register use changed",
    }.get(kind, f"{k} changed")


def for_steps(
    kernels: Sequence[StepKernels], findings: Sequence[HunkFinding], diff_of: Callable[[str], str]
) -> tuple[Cause, ...]:
    """One cause per step whose kernels were compared: from the hunks that carry it where the hunk
    search found them, else from the culprit's whole diff (`diff_of(sha)`)."""
    found = {f.step_commit: f.diff for f in findings if f.diff}
    return tuple(cause_of(k, found.get(k.step_commit) or diff_of(k.step_commit)) for k in kernels)

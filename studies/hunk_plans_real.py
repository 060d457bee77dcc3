"""How the hunk search plans real culprits, on the CPU: each candidate step of the real ranges
(benches/real/*/range.toml) split into hunks, grouped, planned through its threading, checked, and
searched with a scripted answer (the largest searched piece carries the step), counting the patched
builds it would make and the subsets it refuses before building them.

    python -m studies.hunk_plans_real [--ranges benches/real] [--mirrors /work/.mirror]
    python -m studies.hunk_plans_real --git-dir REPO.git SHA [SHA ...]   # given commits of one repository

No trial runs and nothing is set aside by an import trace here (none is stored); data files of
benchmark and test directories are (bisector/why/loaded.py). What is measured is the planning and
the checks, not a step.
"""

from __future__ import annotations

import argparse
import subprocess
import time
import tomllib
from pathlib import Path

from bisector.why import hunk_checks, hunk_groups, hunks, loaded


def _git(git_dir: Path, *args: str) -> str | None:
    out = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def plan_line(git_dir: Path, sha: str, detail: bool = False) -> str:
    diff = _git(git_dir, "diff", f"{sha}^", sha, "--binary", "--full-index")
    if diff is None:
        return "not in the mirror"
    every = hunks.split(diff + "\n")
    aside = loaded.set_aside(every, None)
    parts = [every[i] for i in aside.kept]
    old = lambda p: _git(git_dir, "show", f"{sha}^:{p}")  # noqa: E731
    new = lambda p: _git(git_dir, "show", f"{sha}:{p}")  # noqa: E731
    started = time.monotonic()
    groups = hunk_groups.group(parts, old, new)
    largest = max(len(g.members) for g in groups)
    plan = hunk_checks.plan(parts, largest, old, new)
    line = f"{len(parts)} hunks, {len(groups)} groups (largest {largest})"
    if aside.files:
        line += f", {aside.hunks} hunks set aside ({', '.join(aside.files)})"
    if plan is None:
        return line + f"; no threading plan [{time.monotonic() - started:.1f} s]"
    if detail:
        line += "".join(f"\n    base: {p.label}" for p in plan.base)
        line += "".join(f"\n    unit: {p.label}" for p in plan.pieces)
        line += "".join(f"\n    unsplit: {u}" for u in plan.unsplit)
        line += "\n   "
    line += (
        f"; threading {len(plan.plumbing_hunks)} hunks as base, {len(plan.pieces)} pieces searched"
        f"{', base: ' + plan.base_error if plan.base_error else ''}"
        f"{f', {len(plan.unsplit)} hunks unsplit' if plan.unsplit else ''}"
    )
    size = lambda i: len(plan.pieces[i].keep or parts[plan.pieces[i].hunk].body.splitlines())  # noqa: E731
    target = max(range(len(plan.pieces)), key=size)
    built, refused = [], []

    def carries(subsets):
        out = []
        for s in subsets:
            if plan.compile_error(s, old, new):
                refused.append(s)
                out.append(None)
            else:
                built.append(s)
                out.append(target in s)
        return out

    found = hunks.search(len(plan.pieces), carries, free=lambda s: bool(plan.compile_error(s, old, new)))
    names = "; ".join(plan.pieces[i].label for i in found.found)
    return line + (
        f"; scripted: `{plan.pieces[target].label}` carries it: found {names}, {len(built)} builds, "
        f"{len(refused)} refused unbuilt [{time.monotonic() - started:.1f} s]"
    )


def _refused_line(git_dir: Path, sha: str) -> str:
    """What the checks say of the base alone and of each unit alone on the base."""
    every = hunks.split((_git(git_dir, "diff", f"{sha}^", sha, "--binary", "--full-index") or "") + "\n")
    parts = [every[i] for i in loaded.set_aside(every, None).kept]
    old = lambda p: _git(git_dir, "show", f"{sha}^:{p}")  # noqa: E731
    new = lambda p: _git(git_dir, "show", f"{sha}:{p}")  # noqa: E731
    groups = hunk_groups.group(parts, old, new)
    plan = hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)
    if plan is None:
        return "no plan"
    base = plan.compile_error((), old, new) or "base compiles and binds"
    alone = [
        f"{plan.pieces[i].label}: {e}" for i in range(len(plan.pieces)) if (e := plan.compile_error((i,), old, new))
    ]
    return base + (
        f"; {len(alone)} of {len(plan.pieces)} units refused alone: " + " | ".join(alone)
        if alone
        else f"; none of {len(plan.pieces)} units refused alone"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=Path, default=Path("benches/real"))
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--git-dir", type=Path, help="plan these commits of this repository instead of the ranges'")
    ap.add_argument("commits", nargs="*", help="with --git-dir: the commits to plan (bases and units listed)")
    args = ap.parse_args(argv)
    if args.git_dir is not None:
        for sha in args.commits:
            print(f"{sha[:8]}: {plan_line(args.git_dir, sha, detail=True)}")
            print(f"  refused subsets: {_refused_line(args.git_dir, sha)}")
        return 0
    for path in sorted(args.ranges.glob("*/range.toml")):
        desc = tomllib.loads(path.read_text())
        git_dir = args.mirrors / desc["upstream"].replace("/", "+") / "repo"
        for step in desc.get("steps", []):
            print(f"{desc['lib']} {step['culprit'][:8]} {step['title'][:48]!r}: {plan_line(git_dir, step['culprit'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

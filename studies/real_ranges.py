"""The real ranges run like the demo: `bisector run` over each range described in
benches/real/<lib>/range.toml, cold (fresh store, work dir and JIT caches), on the device, with the
hunk search and the revert on the tip, and one table of what the bot made of each real step.

    python -m studies.real_ranges --device cuda [--libs liger,fla] [--repos DIR] [--dir DIR]
                                  [--out studies/results/real-ranges.txt]

The upstreams come from `--repos` (bare copies made by `python -m studies.real_repos --out DIR`,
for a machine with no network) or else from the mirrors (`$BISECTOR_REAL_MIRRORS`, default
/work/.mirror). Each range's config is the vendored one with `[upstream] repo` pointed at the copy.
Per described step the table says: exact culprit or not, the run's minutes and trials, the later
trials' device time over their warm-up + timed work, the hunks named, and the kernel diff's line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benches.real.ranges import RANGES_DIR, DescriptionError, RangeDescription, load_all
from bisector.report.hunk_names import compact
from studies.long_range import emit, timed_run

MIRRORS = Path(os.environ.get("BISECTOR_REAL_MIRRORS", "/work/.mirror"))
CELL = 400  # characters of the hunks cell at most


def upstream_path(desc: RangeDescription, repos: Path | None) -> Path | None:
    """The local copy of the range's upstream: `repos/<lib>.git`, else the mirror; None if neither."""
    for path in ([repos / f"{desc.lib}.git"] if repos else []) + [MIRRORS / desc.upstream.replace("/", "+") / "repo"]:
        if path.is_dir():
            return path
    return None


def cold_dir(lib_root: Path) -> Path:
    """The library's run dir emptied: a run given a `--dir` used before otherwise reopens that run's
    store and worktrees, and its trials are taken as later trials of commits already measured (their
    first calls then compile on the device: a "cold" L2-norm range read 12x device per trial)."""
    if lib_root.is_symlink() or lib_root.is_file():
        lib_root.unlink()
    elif lib_root.exists():
        shutil.rmtree(lib_root)
    lib_root.mkdir(parents=True)
    return lib_root


def write_config(desc: RangeDescription, upstream: Path, dest: Path) -> Path:
    """The vendored config and the modules beside it, copied to `dest` with the upstream at `upstream`."""
    dest.mkdir(parents=True, exist_ok=True)
    for module in desc.config.parent.glob("*.py"):
        shutil.copy(module, dest / module.name)
    text = re.sub(r'(?m)^repo = ".*"$', f'repo = "{upstream}"', desc.config.read_text(), count=1)
    (dest / "config.toml").write_text(text)
    return dest / "config.toml"


def run_command(
    config: Path, desc: RangeDescription, root: Path, hunks: bool, shapes: str | None = None, fixes: bool = True
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bisector",
        "run",
        "--config",
        str(config),
        "--good",
        desc.good,
        "--bad",
        desc.bad,
        "--store",
        str(root / "results.sqlite"),
        "--work-dir",
        str(root / "work"),
        "--report-dir",
        str(root / "report"),
        "--json",
        *([] if hunks else ["--no-hunks"]),
        *([] if fixes else ["--no-fixes"]),
        *(["--shapes", shapes] if shapes else []),
    ]


def cause_line(data: dict[str, Any], culprit: str) -> str:
    """The kernel diff's line for the culprit: its cause when the bot gives one (`--json`'s `causes`,
    one per step), else what changed."""
    for c in data.get("causes") or []:
        if str(c.get("commit", "")).startswith(culprit[:12]) and c.get("cause"):
            return str(c["cause"])
    for k in data.get("kernels") or []:
        if str(k.get("commit", "")).startswith(culprit[:12]):
            changed = ", ".join(k.get("changed") or []) or "no kernel changed"
            return f"(no cause line) changed: {changed}" + (f"; {k['note']}" if k.get("note") else "")
    return "(no kernel diff for this commit)"


def hunks_named(data: dict[str, Any], culprit: str) -> str:
    """The hunk search's finding for the culprit, as the report says it, then the lines it names:
    "within 14 of the 25 behaviour-changing statements of 6 hunks; stopped early: builds: `k.py`
    @@-43 +51; ...". `hunks` may hold statement pieces while `of` counts whole hunks, so the two are
    never put over each other; a run.json older than `named` gives its summary's first clause."""
    for h in data.get("hunks") or []:
        if str(h.get("commit", "")).startswith(culprit[:12]):
            said = h.get("named") or str(h.get("summary") or "").split("; ")[0] or "no finding"
            lines = h["lines"] if "lines" in h else compact(h.get("hunks") or [])
            text = f"{said}: {lines}" if lines else said
            return text if len(text) <= CELL else text[: CELL - 1] + "…"
    return "(no hunk search)"


def rows_for(desc: RangeDescription, data: dict[str, Any], wall_s: float) -> list[str]:
    """One table row per described step, and one per step the bot found that is not described."""
    found = {s["commit"]: s for s in data.get("steps") or []}
    later = ((data.get("throughput") or {}).get("later_trials") or {}).get("device_over_warmup_timed")
    common = f"{wall_s / 60:.1f} | {data.get('trials')} | " + (f"{later:.2f}x" if later else "n/a")
    out = []
    for step in desc.steps:
        hit = found.pop(step.culprit, None)
        near = [s for s in found.values() if step.culprit in (s.get("candidates") or [])]
        verdict = (
            "exact"
            if hit
            else ("NOT exact: candidates " + ", ".join(c[:8] for c in near[0]["candidates"]) if near else "NOT found")
        )
        change = ", ".join(f"{k} {v:+.1f}%" for k, v in (hit or {}).get("change_pct", {}).items())
        out.append(
            f"| {desc.lib} | {desc.good[:8]}..{desc.bad[:8]} | {desc.commits} | {step.culprit[:8]} "
            f"{step.kind} ({step.status}) | {verdict} {change} | {common} | {hunks_named(data, step.culprit)} "
            f"| {cause_line(data, step.culprit)} |"
        )
    for sha, s in found.items():
        change = ", ".join(f"{k} {v:+.1f}%" for k, v in s.get("change_pct", {}).items())
        out.append(
            f"| {desc.lib} | {desc.good[:8]}..{desc.bad[:8]} | {desc.commits} | {sha[:8]} (not described) "
            f"| found: {change} | {common} | {hunks_named(data, sha)} | {cause_line(data, sha)} |"
        )
    return out


HEADER = (
    "| library | range | commits | step (kind, status) | bot's culprit | minutes | trials | "
    "device / (warm-up+timed), later trials | hunks named | kernel diff's line |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda",), default="cuda", help="the ranges' configs are for an NVIDIA GPU")
    ap.add_argument("--libs", default=None, help="comma-separated libraries (default: every description)")
    ap.add_argument("--repos", type=Path, default=None, help="bare copies made by studies.real_repos")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--no-hunks", action="store_true")
    ap.add_argument("--no-fixes", action="store_true")
    ap.add_argument("--shapes", default=None, help="passed to `bisector run --shapes` (e.g. rot: the rotary shapes)")
    ap.add_argument("--out", type=Path, default=Path("studies/results/real-ranges.txt"))
    args = ap.parse_args(argv)
    try:
        descs = load_all(RANGES_DIR)
    except DescriptionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.libs:
        wanted = set(args.libs.split(","))
        unknown = sorted(wanted - {d.lib for d in descs})
        if unknown:
            print(
                f"error: --libs: no range described for {', '.join(unknown)} "
                f"(described: {', '.join(sorted(d.lib for d in descs))})",
                file=sys.stderr,
            )
            return 2
        descs = [d for d in descs if d.lib in wanted]
    root = Path(args.dir or tempfile.mkdtemp(prefix="real-ranges-")).resolve()
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M')} real ranges, cold, one `bisector run` each", HEADER]
    commands = []
    for desc in descs:
        upstream = upstream_path(desc, args.repos)
        if upstream is None:
            lines.append(f"| {desc.lib} | not run: no copy of {desc.upstream} (give --repos) |")
            continue
        lib_root = cold_dir(root / desc.lib)
        config = write_config(desc, upstream, lib_root / "config")
        cmd = run_command(config, desc, lib_root, not args.no_hunks, args.shapes, not args.no_fixes)
        commands.append(" ".join(cmd))
        print(f"real_ranges: {desc.lib}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        start = time.time()
        proc, stdout = timed_run(cmd, lib_root / "progress.log", start)
        wall = time.time() - start
        (lib_root / "run.json").write_text(stdout)
        if proc.returncode != 0 or not stdout.strip():
            tail = (lib_root / "progress.log").read_text()[-400:].replace("\n", " / ")
            lines.append(
                f"| {desc.lib} | {desc.good[:8]}..{desc.bad[:8]} | {desc.commits} | run failed "
                f"(exit {proc.returncode}) after {wall / 60:.1f} min: {tail} |"
            )
            continue
        data = json.loads(stdout)
        lines.extend(rows_for(desc, data, wall))
        # what decided (drift and the metric, latency steps, "no step >= 3%", the zone's pairs with their intervals)
        lines += [
            f"  {desc.lib}: {wall / 60:.1f} min, {data.get('trials')} trials ({data.get('search_trials')} in the "
            f"search): {line}"
            for line in data.get("decided") or []
        ]
    lines += ["", "Commands (each cold: fresh store, work dir, JIT caches):", *commands]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for line in lines:
        emit(line, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

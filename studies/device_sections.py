"""Where a run's device sections went, from its store: per trial process, its time on the device
over its warm-up + timed work, and per part (each phase inside go..release, what no phase names, the
setup's brief loans, the exit the device waited for) the median and total over the run's later
trials and over its first ones. Issue 60 sets a later trial's device time at most 2x its warm-up +
timed work.

    python -m studies.device_sections STORE[.gz] [--campaign NAME] [--trials] [--json OUT]

A `.gz` store (as committed under reports/ and studies/results/) is read from a temporary copy.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bisector.errors import BisectorError
from bisector.measure.time_spent import AFTER, device_breakdown, device_parts, from_records
from bisector.store import Store


def _records(path: Path, campaign: str | None) -> list[object]:
    with Store(path, create=False, readonly=True) as store:
        names = [c.campaign for c in store.info().campaigns]
        if campaign is not None and campaign not in names:
            raise BisectorError(f"{path}: no campaign {campaign!r} (it has: {', '.join(names) or 'none'})")
        return [r for name in names if campaign in (None, name) for r in store.trials(name)]


def records_of(path: Path, campaign: str | None = None) -> list[object]:
    """Every stored trial of `path` (a store, or a gzipped one), in the order stored."""
    if not path.name.endswith(".gz"):
        return _records(path, campaign)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.name[:-3]
        with gzip.open(path, "rb") as packed, plain.open("wb") as out:
            shutil.copyfileobj(packed, out)
        return _records(plain, campaign)


def trial_rows(timelines: list) -> list[str]:
    """One line per trial process that held a device: its device time, its warm-up + timed work,
    their ratio, and its two largest parts."""
    rows = [f"{'commit':<12} {'slot':>4} {'device s':>8} {'w+t s':>6} {'ratio':>7} {'exit s':>6}  largest parts"]
    for t in timelines:
        if t.go is None:
            continue
        parts = device_parts(t)
        work = float(t.phases.get("warmup", 0.0)) + float(t.phases.get("timed", 0.0))
        top = sorted(((k, v) for k, v in parts.items() if k != AFTER), key=lambda kv: -kv[1])[:2]
        ratio = f"{t.device_s / work:.1f}x" if work > 0 else "-"
        rows.append(
            f"{t.sha[:12]:<12} {t.slot if t.slot is not None else '?':>4} {t.device_s:>8.2f} {work:>6.3f} "
            f"{ratio:>7} {parts[AFTER]:>6.2f}  "
            + ", ".join(f"{k} {v:.2f}" for k, v in top)
            + (" (staged under the lock)" if "deferred" in t.phases else "")
        )
    return rows


AFTER_PHASES = ("telemetry", "imports_after")  # what a trial does after its release (benches/trial.py)


def after_release_rows(timelines: list) -> list[str]:
    """The medians of what follows a trial's release, which the next trial waits for: its named
    phases (the import trace was inside "telemetry" before it had a phase of its own) and the rest,
    its process's exit. On the real ranges this was 0.22-0.47 s a trial, the demo's 0.03 s."""
    held = [t for t in timelines if t.release is not None and t.ended is not None]
    if not held:
        return ["no trial released a device"]
    spans = [t.span("release", "ended") for t in held]
    named = {k: [float(t.phases.get(k, 0.0)) for t in held] for k in AFTER_PHASES}
    rest = [max(0.0, s - sum(named[k][i] for k in AFTER_PHASES)) for i, s in enumerate(spans)]
    return [
        f"{len(held)} trials: release to exit, median {statistics.median(spans):.3f} s: "
        + ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in named.items())
        + f", the rest (the exit) {statistics.median(rest):.3f}"
    ]


LOAN_NAMES = ("staging", "unmap")  # a brief loan's own phase (benches/staging.py `briefly`)


def loan_rows(records: list) -> list[str]:
    """The medians, over the trial processes that took a brief loan in their setup, of the phases
    inside their loans ("inputs", and its "draw", "prepare" and "control_prepare" where recorded)
    and of what no phase names there. The loans are device time: on the real ranges 0.09-0.11 s a
    trial, more than the timed work (setup_loans above)."""
    seen: dict[object, dict[str, float]] = {}
    for r in records:
        proto = getattr(r, "protocol", {}) or {}
        loans = (proto.get("timeline") or {}).get("briefs") or ()
        key = proto.get("log_path") or id(r)
        if not loans or key in seen:
            continue
        named: dict[str, float] = {}
        for name, _, start, end in proto.get("phases") or ():
            if name in LOAN_NAMES or str(name).startswith("queue_"):
                continue
            if any(a <= start and end <= b for a, b in loans):
                named[name] = named.get(name, 0.0) + (end - start)
        held = sum(max(0.0, b - a) for a, b in loans)
        named["loans"] = held
        named["unnamed"] = max(0.0, held - named.get("inputs", 0.0))
        seen[key] = named
    if not seen:
        return ["no trial took a brief loan (the CPU stages nothing ahead)"]
    names = sorted({k for parts in seen.values() for k in parts}, key=lambda k: (k != "loans", k))
    return [
        f"{len(seen)} trials, median s: "
        + ", ".join(f"{k} {statistics.median(parts.get(k, 0.0) for parts in seen.values()):.4f}" for k in names)
    ]


PARTS = ("import_s", "jit_s", "other_s")


def first_call_rows(records: list) -> list[str]:
    """Per shape, the median of its first calls' parts (benches/first_call.py) over the stored trials:
    in the setup (`precompile_parts`, subject and control) and under the lock (`compile_parts`)."""
    seen: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        proto = getattr(r, "protocol", {}) or {}
        shape = str(getattr(r, "shape", ""))
        for who, parts in (proto.get("precompile_parts") or {}).items():
            seen.setdefault((shape, f"setup {who}"), []).append(parts)
        if isinstance(proto.get("compile_parts"), dict):
            seen.setdefault((shape, "under the lock"), []).append(proto["compile_parts"])
    if not seen:
        return ["no first call named (trials stored before benches/first_call.py)"]
    rows = [f"{'shape':<20} {'where':<16} {'n':>4} " + " ".join(f"{k:>9}" for k in PARTS) + f" {'kernels':>7}"]
    for (shape, where), all_parts in sorted(seen.items()):
        med = {k: statistics.median(float(p.get(k) or 0.0) for p in all_parts) for k in (*PARTS, "jit_kernels")}
        rows.append(
            f"{shape:<20} {where:<16} {len(all_parts):>4} "
            + " ".join(f"{med[k]:>9.3f}" for k in PARTS)
            + f" {med['jit_kernels']:>7.0f}"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--campaign", default=None)
    ap.add_argument("--trials", action="store_true", help="one line per trial process as well")
    ap.add_argument("--json", type=Path, default=None, help="write both breakdowns as JSON here")
    args = ap.parse_args(argv)
    if not args.store.is_file():
        print(f"error: {args.store}: no such store", file=sys.stderr)
        return 2
    try:
        records = records_of(args.store, args.campaign)
        timelines, _ = from_records(records)
    except BisectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    later = device_breakdown([t for t in timelines if t.slot])
    first = device_breakdown([t for t in timelines if t.slot == 0])
    print(f"# {args.store}: {len(timelines)} trial processes")
    print("\n## later trials (slot > 0)\n" + "\n".join(later.lines()))
    print("\n## first trials of a commit (slot 0)\n" + "\n".join(first.lines()))
    print("\n## after the release (the next trial waits for it)\n" + "\n".join(after_release_rows(timelines)))
    print("\n## inside the setup's brief loans (device time: the inputs drawn)\n" + "\n".join(loan_rows(records)))
    print(
        "\n## first calls, median seconds per part (import, Triton compile or cache load, the rest)\n"
        + "\n".join(first_call_rows(records))
    )
    if args.trials:
        print("\n## per trial\n" + "\n".join(trial_rows(timelines)))
    if args.json:
        args.json.write_text(json.dumps({"later": later.as_json(), "first": first.as_json()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

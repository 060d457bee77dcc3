"""The committed stores replayed offline by a checkout's code: the steps each decides, beside the
steps the same store gives another checkout (main) or its committed result.json.

    python -m studies.store_replay [--before /work/main] [--set protocol.decision_trials=0 ...] [NAME ...]

Why: a change to how the search decides (issue #59's indifference zone, decision cap, drift anchor
and latency steps, on by default) must leave every planted step of the recorded runs decided as
before. Each store is replayed as `reports/remake.sh` does (`bisector run --offline`, the demo
upstream written from bisector/demo, no build, no trial), with `--no-fixes --no-hunks`: only the
search's decisions are compared. `--set SECTION.KEY=VALUE` writes a key into the config first
(to replay with a setting off or on); `--before CHECKOUT` replays with that checkout's code too.
Printed per store: the steps (commit and shapes), trials, and the decision lines
(bisector/search/decisions.py) where the result has them; whether every step of the other replay is
decided again (commit and shapes) and what is new. A replay reads only the trials its run took: a
search that asks for others (a latency shape's, the anchor's) uses up trials the run took to verify a
step, which then reads "(unverified)" offline; a live run takes the trials it asks for.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO4 = "fa/s16384,gemm/m8192,gemm/m54560,gemm/decode"


@dataclass(frozen=True)
class Stored:
    name: str
    store: str  # a gzipped SQLite store, relative to the repo root
    config: str  # relative to the repo root
    args: tuple[str, ...] = ()


STORES = (
    Stored("cpu-demo", "reports/cpu-demo/results.sqlite.gz", "configs/cpu-demo.toml"),
    Stored("cpu-demo-fixture", "tests/fixtures/cpu-demo.sqlite.gz", "configs/cpu-demo.toml"),
    Stored("gpu-demo", "reports/gpu-demo/results.sqlite.gz", "configs/h200-demo.toml", ("--shapes", DEMO4)),
    Stored(
        "h200-demo-81a933b",
        "studies/results/h200-demo-81a933b.sqlite.gz",
        "configs/h200-demo.toml",
        ("--shapes", DEMO4),
    ),
    Stored(
        "h200-demo-6shapes-c63c4dc", "studies/results/h200-demo-6shapes-c63c4dc.sqlite.gz", "configs/h200-demo.toml"
    ),
)


def with_keys(text: str, sets: list[tuple[str, str, str]]) -> str:
    """`text` (a TOML config) with `key = value` written under each [section] (made where missing)."""
    lines = text.splitlines()
    for section, key, value in sets:
        lines = [ln for ln in lines if not ln.strip().startswith(f"{key} =")] if _in(lines, section, key) else lines
        header = f"[{section}]"
        at = next((i for i, ln in enumerate(lines) if ln.strip() == header), None)
        if at is None:
            lines += ["", header]
            at = len(lines) - 1
        lines.insert(at + 1, f"{key} = {value}")
    return "\n".join(lines) + "\n"


def _in(lines: list[str], section: str, key: str) -> bool:
    inside = False
    for ln in lines:
        s = ln.strip()
        if s.startswith("["):
            inside = s == f"[{section}]"
        elif inside and s.startswith(f"{key} ="):
            return True
    return False


def replay(stored: Stored, code: Path, sets: list[tuple[str, str, str]], work: Path) -> dict:
    """The store's search replayed offline by the code at `code`: --json's result."""
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from bisector.demo import write_demo_repo\n"
            f"m = write_demo_repo({str(work / 'upstream')!r}); print(m.good, m.bad)",
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=code,
    )
    good, bad = out.stdout.split()
    with gzip.open(ROOT / stored.store) as src, open(work / "results.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    text = (ROOT / stored.config).read_text()
    text = text.replace('repo = "demo"', f'repo = "{work / "upstream"}"', 1)
    (work / "config.toml").write_text(with_keys(text, sets))
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "run",
            "--config",
            str(work / "config.toml"),
            "--good",
            good,
            "--bad",
            bad,
            "--offline",
            "--store",
            str(work / "results.sqlite"),
            "--work-dir",
            str(work / "work"),
            "--report-dir",
            str(work / "report"),
            "--json",
            "--no-fixes",
            "--no-hunks",
            *stored.args,
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=code,
    )
    if got.returncode != 0:
        raise SystemExit(f"{stored.name}: replay failed ({got.returncode}): {got.stderr.strip()[-800:]}")
    return json.loads(got.stdout)


def steps(result: dict) -> list[str]:
    """ "83c18bf fa/s1024+fa/s512", "(unverified)" after a step whose fresh trials the store lacks."""
    return [
        f"{s['commit'][:7]} {'+'.join(sorted(s['change_pct']))}" + ("" if s.get("verified", True) else " (unverified)")
        for s in result["steps"]
    ]


def compared(now: dict, then: dict) -> tuple[list[str], list[str]]:
    """(steps of `then` that `now` lacks, commit or any shape; what `now` finds beyond `then`)."""
    have = {s["commit"]: set(s["change_pct"]) for s in now["steps"]}
    had = {s["commit"]: set(s["change_pct"]) for s in then["steps"]}
    lost = [
        f"{c[:7]} {'+'.join(sorted(v - have.get(c, set())))}" for c, v in had.items() if not v <= have.get(c, set())
    ]
    new = [f"{c[:7]} {'+'.join(sorted(v - had.get(c, set())))}" for c, v in have.items() if not v <= had.get(c, set())]
    return lost, new


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.store_replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"stores to replay (default all: {', '.join(s.name for s in STORES)})")
    ap.add_argument("--before", type=Path, help="a checkout whose code replays the same stores for comparison")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args(argv)
    sets = []
    for item in args.set:
        where, _, value = item.partition("=")
        section, _, key = where.rpartition(".")
        if not section or not key or not value:
            raise SystemExit(f"--set {item}: want SECTION.KEY=VALUE")
        sets.append((section, key, value))
    chosen = [s for s in STORES if not args.names or s.name in args.names]
    tmp = Path(tempfile.mkdtemp(prefix="store-replay-"))
    try:
        for stored in chosen:
            now = replay(stored, ROOT, sets, tmp / stored.name / "now")
            print(
                f"## {stored.name} ({stored.store})\nthis checkout: {len(now['steps'])} steps, "
                f"{now['search_trials']} search trials: {', '.join(steps(now)) or 'none'}"
            )
            for line in now.get("decided") or []:
                print(f"    {line}")
            if args.before is not None:
                then = replay(stored, args.before.resolve(), [], tmp / stored.name / "before")
                print(
                    f"{args.before}: {len(then['steps'])} steps, {then['search_trials']} search trials: "
                    f"{', '.join(steps(then)) or 'none'}"
                )
                lost, new = compared(now, then)
                print(
                    ("every step decided as before" if not lost else f"LOST: {', '.join(lost)}")
                    + (f"; new: {', '.join(new)}" if new else "")
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

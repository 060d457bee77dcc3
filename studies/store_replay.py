"""The committed stores replayed offline by a checkout's code: the steps each decides, beside the
steps the same store gives another checkout (main) or its committed result.json.

    python -m studies.store_replay [--before /work/main] [--set protocol.decision_trials=0 ...] [NAME|PATH ...]
        [--repos /work/main]

A PATH is a run's directory (results.sqlite, config/config.toml, run.json: the real-library runs) or
a store file (.sqlite or .sqlite.gz) whose config is named with `--config` (default: the GPU demo's);
its upstream is the demo's where the config says `repo = "demo"`, else the config's `repo`, taken
relative to `--repos`, with GOOD and BAD the run's first two probes (run.json); the shapes replayed
are the store's own.

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
import re
import shutil
import sqlite3
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
    store: str  # a (gzipped) SQLite store, relative to the repo root or absolute
    config: str  # relative to the repo root or absolute
    args: tuple[str, ...] = ()
    ends: tuple[str, str] | None = None  # GOOD and BAD of a real upstream (None: the demo's)
    fixes: bool = False  # replay the reverts measured on the tip too (the store holds their trials)


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
    # the H100 demo's decode GEMM alone, latency a metric of its own, its revert measured on the tip
    Stored(
        "h100-demo-decode-19dea92",
        "reports/gpu-latency/results.sqlite.gz",
        "configs/h200-demo.toml",
        ("--shapes", "gemm/decode"),
        fixes=True,
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


def unpacked(store: Path, to: Path) -> None:
    """A copy of `store` at `to`, unzipped where it is gzipped."""
    with gzip.open(store) if store.suffix == ".gz" else open(store, "rb") as src, open(to, "wb") as dst:
        shutil.copyfileobj(src, dst)


class BadInput(Exception):
    """A store, config or setting the user named that cannot be used: one line, exit 2."""


def at_path(path: Path, config: Path | None, repos: Path) -> Stored:
    """A store given by its path: a run's directory, or a store file with `config`."""
    path = path.resolve()
    if path.is_dir():
        store, config = path / "results.sqlite", config or path / "config" / "config.toml"
    else:
        store, config = path, config or ROOT / "configs/h200-demo.toml"
    for need in (store, config):
        if not need.is_file():
            raise BadInput(f"{need}: no such file")
    ends = None
    if 'repo = "demo"' not in config.read_text():
        run = store.parent / "run.json"
        if not run.is_file():
            raise BadInput(f"{run}: no such file (GOOD and BAD of a real upstream are its first two probes)")
        calls = json.loads(run.read_text()).get("probe_calls") or []
        if len(calls) < 2:
            raise BadInput(f"{run}: probe_calls: want GOOD and BAD first")
        ends = (calls[0][0], calls[1][0])
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as tmp:
        unpacked(store, Path(tmp.name))
        with sqlite3.connect(f"file:{tmp.name}?mode=ro", uri=True) as db:
            shapes = sorted(r[0] for r in db.execute("SELECT DISTINCT shape FROM trials"))
    name = path.name if path.is_dir() else path.name.split(".")[0]
    return Stored(name, str(store), str(config), ("--shapes", ",".join(shapes)), ends)


def replay(stored: Stored, code: Path, sets: list[tuple[str, str, str]], work: Path, repos: Path = ROOT) -> dict:
    """The store's search replayed offline by the code at `code`: --json's result."""
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(code)}
    config = ROOT / stored.config
    text = config.read_text()
    if stored.ends is None:
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
        text = text.replace('repo = "demo"', f'repo = "{work / "upstream"}"', 1)
    else:
        good, bad = stored.ends
        text = re.sub(r'(?m)^repo = "([^"/][^"]*)"', lambda m: f'repo = "{repos / m.group(1)}"', text, count=1)
        for extra in config.parent.iterdir():  # the suites' own modules beside the config
            if extra.is_file() and extra.suffix == ".py":
                shutil.copy(extra, work / extra.name)
    unpacked(ROOT / stored.store, work / "results.sqlite")
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
            *(() if stored.fixes else ("--no-fixes",)),
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


def unsure_latency(result: dict) -> int:
    """Pairs left unsure at the trial cap on a latency shape."""
    return sum(any(s.endswith(":latency") for s in u["shapes"]) for u in result.get("uncertain") or [])


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
    ap.add_argument(
        "names", nargs="*", help=f"stores to replay, by name or path (default all: {', '.join(s.name for s in STORES)})"
    )
    ap.add_argument("--config", type=Path, help="the config of a store given by its file's path")
    ap.add_argument("--repos", type=Path, default=ROOT, help="where a config's relative upstream `repo` lies")
    ap.add_argument("--before", type=Path, help="a checkout whose code replays the same stores for comparison")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args(argv)
    try:
        return replay_all(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def replay_all(args: argparse.Namespace) -> int:
    """Each chosen store replayed by this checkout (and by --before's), its steps printed."""
    sets = []
    for item in args.set:
        where, _, value = item.partition("=")
        section, _, key = where.rpartition(".")
        if not section or not key or not value:
            raise BadInput(f"--set {item}: want SECTION.KEY=VALUE")
        sets.append((section, key, value))
    known = {s.name for s in STORES}
    chosen = [s for s in STORES if not args.names or s.name in args.names]
    chosen += [at_path(Path(n), args.config, args.repos.resolve()) for n in args.names if n not in known]
    tmp = Path(tempfile.mkdtemp(prefix="store-replay-"))
    try:
        for stored in chosen:
            now = replay(stored, ROOT, sets, tmp / stored.name / "now", args.repos.resolve())
            print(
                f"## {stored.name} ({stored.store})\nthis checkout: {len(now['steps'])} steps, "
                f"{now['search_trials']} search trials, {unsure_latency(now)} latency pairs unsure: "
                f"{', '.join(steps(now)) or 'none'}"
            )
            for line in now.get("decided") or []:
                print(f"    {line}")
            if args.before is not None:
                then = replay(stored, args.before.resolve(), [], tmp / stored.name / "before", args.repos.resolve())
                print(
                    f"{args.before}: {len(then['steps'])} steps, {then['search_trials']} search trials, "
                    f"{unsure_latency(then)} latency pairs unsure: "
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

"""Issue 60 on the device: a run cold, then where its trials' device time went (studies/device_sections.py).
One part a call (each fits the device's 600 s call limit alone):

    python -m studies.device_time --part liger --repos .wt/real/repos --out $OUT   # a real range (Liger), no hunks
    python -m studies.device_time --part demo --out $OUT                           # the demo, four shapes, whole
    python -m studies.device_time --part long --out $OUT                           # studies.long_range, 389 commits

Writes to --out: `<part>.txt` (the wall time, the run's own summary, the breakdown of later and
first trials, one line per trial), `<part>-parts.json`, `<part>-run.json` (the run's --json) and the
store gzipped (`<part>.sqlite.gz`). Targets (issue 60): a later trial's device time <= 2x its warm-up
+ timed work; the demo <= 6 min; the long range <= 60 s; a real range <= 2 min to its verified
culprit and revert.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from studies import device_sections

SHAPES = "fa/s16384,gemm/m8192,gemm/m54560,gemm/decode"


def command(part: str, root: Path, repos: Path | None) -> tuple[list[str], Path]:
    """The run of `part` and where its store will be."""
    py = sys.executable
    if part == "liger":
        return (
            [
                py,
                "-m",
                "studies.real_ranges",
                "--device",
                "cuda",
                "--libs",
                "liger",
                "--no-hunks",
                "--dir",
                str(root),
                "--out",
                str(root / "real-ranges.txt"),
                *(["--repos", str(repos)] if repos else []),
            ],
            root / "liger" / "results.sqlite",
        )
    if part == "demo":
        return (
            [
                py,
                "-m",
                "bisector",
                "demo",
                "--device",
                "cuda",
                "--dir",
                str(root / "demo"),
                "--shapes",
                SHAPES,
                "--json",
            ],
            root / "demo" / "results.sqlite",
        )
    return (
        [py, "-m", "studies.long_range", "--device", "cuda", "--dir", str(root / "long")],
        root / "long" / "results.sqlite",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("liger", "demo", "long"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repos", type=Path, default=None, help="bare copies made by studies.real_repos (liger)")
    ap.add_argument("--dir", type=Path, default=None, help="work dir (default: a fresh temporary one: cold)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=540.0,
        help="the run is stopped after this many seconds (the device allows 600 a call)",
    )
    args = ap.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix=f"device-time-{args.part}-")).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    cmd, store = command(args.part, root, args.repos)
    start = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = 124, str(exc.stdout or ""), str(exc.stderr or "")
    wall = time.time() - start
    (args.out / f"{args.part}-run.json").write_text(stdout)
    (args.out / f"{args.part}.log").write_text(stderr[-200_000:])
    lines = [f"# {args.part}: {' '.join(cmd)}", f"exit {code}, wall {wall:.1f} s ({wall / 60:.2f} min)"]
    if (root / "real-ranges.txt").is_file():  # the real range's table: culprits found, minutes, trials
        lines.append((root / "real-ranges.txt").read_text())
    if store.is_file():
        with store.open("rb") as raw, gzip.open(args.out / f"{args.part}.sqlite.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            device_sections.main([str(store), "--trials", "--json", str(args.out / f"{args.part}-parts.json")])
        lines.append(text.getvalue())
        try:
            later = json.loads((args.out / f"{args.part}-parts.json").read_text())["later"]
            lines.insert(
                2,
                f"later trials: device / (warm-up + timed), median {later.get('ratio_median')}x "
                f"(with the exit: {later.get('ratio_with_exit_median')}x)",
            )
        except (OSError, ValueError, KeyError):
            pass
    else:
        lines.append(f"no store at {store}: the run's last output:\n{stderr[-2000:]}")
    (args.out / f"{args.part}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:3]))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""How close the progress line's "trials N of ~M" came to the run's final trial count, read from the logs.

    python -m studies.progress_accuracy LOG [LOG ...] [--from-s 60]

Why: the estimate is judged by what a user sees on the progress line, not by a replay of the
forecast (studies/estimate_accuracy.py replays it on simulated searches and stored runs). A log is
the progress output of one call of `bisector run` or `bisector demo` (its stderr): lines of the form
"... | trials N of ~M | elapsed T | ...", ending with "done: ... K trials ... this call: C trials".
Per log: the estimate over the final count at the first line past `--from-s` seconds of elapsed
time, the worst over- and under-estimate from there on, and the share of lines within 1.5x. A
resumed call's line counts that call's trials: its final is the "this call: C trials" of its
"done:" line. A log may be gzipped (.gz).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from studies import no_such_files
from studies.progress_replay import read

LINE = re.compile(r"trials (\d+) of ~(\d+) \| elapsed (?:(\d+) min|(\d+) s)")
DONE = re.compile(r"done: .*?(\d+) trials \(")
THIS_CALL = re.compile(r"this call: (\d+) trials")


def elapsed_s(match: re.Match[str]) -> float:
    """The line's elapsed time: whole minutes from 1 min on, seconds before (as the line shows it)."""
    return 60.0 * int(match.group(3)) if match.group(3) else float(match.group(4))


def judge(path: Path, from_s: float) -> str:
    text = read(path)
    done = THIS_CALL.findall(text) or DONE.findall(text)
    if not done:
        return f"| {path} | no 'done:' line: the run did not end | | | |"
    final = int(done[-1])
    points = [(elapsed_s(m), int(m.group(2)) / final) for m in LINE.finditer(text)]
    later = [ratio for t, ratio in points if t >= from_s]
    if not later:
        return f"| {path} | {final} | ended before {from_s:.0f} s | | |"
    within = sum(1 / 1.5 <= r <= 1.5 for r in later) / len(later)
    return f"| {path} | {final} | {later[0]:.2f} | {max(later):.2f} / {min(later):.2f} | {within:.0%} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.progress_accuracy", description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--from-s", type=float, default=60.0, help="judge the lines from this elapsed time on")
    args = parser.parse_args(argv)
    error = no_such_files(args.logs, "log", "progress_accuracy")
    if error:
        print(error, file=sys.stderr)
        return 2
    print(
        f"| log | final trials | estimate / final at {args.from_s:.0f} s | worst over / under from then on | "
        "lines within 1.5x |"
    )
    print("|---|---:|---:|---:|---:|")
    for path in args.logs:
        print(judge(path, args.from_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the sandbox costs a trial: the same trivial command started fenced, with and without it.

    PYTHONPATH=$PWD python -m studies.sandbox_cost [--n 20]

A spawned trial worker pays this once per trial (unshare, the init's mounts, its fork); a forked
worker pays it once per run (the zygote's sandbox) and per trial only the subreaper's sweep. The
command is `python -I -S -c pass` so that the difference is the sandbox's, not an import's.
Target: at most 50 ms a trial. Prints the medians and the difference.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bisector.runner import sandbox
from bisector.runner.workers import fenced


def timed(argv: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.sandbox_cost")
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args(argv)
    isolation = sandbox.probe()
    print(f"isolation: {isolation.describe()}")
    if not isolation.sandboxed:
        print("no sandbox on this host: nothing to measure")
        return 1
    command = [sys.executable, "-I", "-S", "-c", "pass"]
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp, d) for d in ("trials", "jit", "scratch")]
        for d in dirs:
            d.mkdir()
        plain = timed(fenced(command), args.n)
        boxed = timed(fenced(sandbox.wrap(command, dirs)), args.n)
    a, b = statistics.median(plain), statistics.median(boxed)
    print(f"fenced, no sandbox: median {a * 1e3:.1f} ms over {args.n}")
    print(f"fenced, sandboxed:  median {b * 1e3:.1f} ms over {args.n}")
    print(f"sandbox cost per spawned trial: {(b - a) * 1e3:.1f} ms (target <= 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

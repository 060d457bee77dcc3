"""What the sandbox costs a trial: the same trivial command started fenced, with and without it.

    PYTHONPATH=$PWD python -m studies.sandbox_cost [--n 20]

A spawned trial worker pays this once per trial (unshare, the init's mounts, its fork); a forked
worker pays it once per run (the zygote's sandbox) and per trial only the subreaper's sweep. The
command is `python -I -S -c pass` so that the difference is the sandbox's, not an import's.
Target: at most 50 ms a trial. Prints the medians and the difference; where the host gives
cgroups (bisector/isolation/cgroups.py), also the same with each command in its own cgroup, and what a
forked worker's own cgroup costs its trial.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bisector.isolation import cgroups, sandbox
from bisector.isolation.cgroups import Limits
from bisector.isolation.fence import kill_cgroup, remove_cgroup
from bisector.isolation.fenced import fenced


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
        limited = [timed(fenced(sandbox.wrap(command, dirs), limits=Limits(1 << 30)), 1)[0] for _ in range(args.n)]
    a, b, c = statistics.median(plain), statistics.median(boxed), statistics.median(limited)
    print(f"fenced, no sandbox: median {a * 1e3:.1f} ms over {args.n}")
    print(f"fenced, sandboxed:  median {b * 1e3:.1f} ms over {args.n}")
    print(f"sandbox cost per spawned trial: {(b - a) * 1e3:.1f} ms (target <= 50 ms)")
    print(f"limits: {cgroups.probe().method}" + (f" ({cgroups.probe().reason})" if not cgroups.probe().active else ""))
    if cgroups.probe().active:
        print(f"fenced, sandboxed, in its cgroup: median {c * 1e3:.1f} ms over {args.n}")
        print(f"sandbox and cgroup cost per spawned trial: {(c - a) * 1e3:.1f} ms (target <= 50 ms)")
    if cgroups.probe().hierarchies:
        print(
            f"a forked worker's own cgroup (made, entered, emptied, removed): median "
            f"{statistics.median(leaf_cost(args.n)) * 1e3:.1f} ms over {args.n}"
        )
    return 0


def leaf_cost(n: int) -> list[float]:
    """What a forked worker's cgroup costs its trial: the leaf made and entered, then emptied and removed."""
    group = cgroups.new_group(Limits(1 << 30))
    assert group is not None
    out = []
    try:
        for i in range(n):
            proc = subprocess.Popen(["sleep", "30"])
            start = time.perf_counter()
            leaf = group.leaf(f"w{i}", Limits(1 << 30))
            leaf.adopt(proc.pid)
            leaf.end()
            out.append(time.perf_counter() - start)
            proc.wait()
    finally:
        for d in group.dirs:
            kill_cgroup(d)
            remove_cgroup(d)
    return out


if __name__ == "__main__":
    sys.exit(main())

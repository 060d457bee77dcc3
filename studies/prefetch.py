"""How much earlier a new commit's first trial reaches its timed work when the warmer builds and
compiles the search's next commits ahead (bisector/measure/warmer.py), on the CPU.

    python -m studies.prefetch [--commits 17] [--step 11] [--compile-s 3] [--parallel 1,2] [--out FILE]

Makes a git repository of `--commits` commits of one GEMM kernel that gets 2x slower at `--step`
and whose first call in a process "compiles" (sleeps `--compile-s` when the commit's Triton cache
dir is empty, then writes its artifact there: a fake, slow, cacheable compile), and runs the real
search over it in a fresh work dir and store each time, with real trial processes: without the
warmer, then with it for each `--parallel` (prefetches at once). On the CPU the first call of
a trial is under the device lock, so a cold compile delays the timed work by its length; on a GPU
it delays the lock instead (benches/trial.py precompiles before it), which leaves the device idle
just the same. Prints per run: search wall time, the new commits, and per commit's first trial
the seconds from the search asking for it (submitted) to its timed section, and the device time
it held. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

KERNEL = textwrap.dedent("""
    import os, time
    import torch

    SLOWER = {slower}
    COMPILE_S = {compile_s}

    def mm(a, b):
        art = os.path.join(os.environ["TRITON_CACHE_DIR"], "mm.bin")
        if not os.path.exists(art):
            time.sleep(COMPILE_S)  # a cold compile
            with open(art, "w") as fh:
                fh.write(str(os.getpid()))
        out = a @ b
        if SLOWER:
            out = (a @ b + out) * 0.5
        return out
""")


def make_repo(root: Path, commits: int, step: int, compile_s: float) -> list[str]:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "study",
        "GIT_AUTHOR_EMAIL": "study@example.invalid",
        "GIT_COMMITTER_NAME": "study",
        "GIT_COMMITTER_EMAIL": "study@example.invalid",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()

    root.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    shas = []
    for k in range(commits):
        (root / "kern.py").write_text(KERNEL.format(slower=k >= step, compile_s=compile_s) + f"# {k}\n")
        git("add", "kern.py")
        git("commit", "-q", "-m", f"change {k}")
        shas.append(git("rev-parse", "HEAD"))
    return shas


def config(repo: Path, where: Path) -> Any:
    from bisector.config import parse

    data = {
        "name": "prefetch",
        "upstream": {"repo": str(repo)},
        "device": {"kind": "cpu"},
        "control": {"backend": "torch"},
        "build": {"recipe": "none"},
        "subject": {"gemm": {"entry": "kern:mm", "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 256, "N": 256, "K": 256, "dtype": "fp32"}]}},
        "protocol": {
            "reps": 5,
            "warmup": 1,
            "flush_mb": 1,
            "timeout_s": 300.0,
            "trials": 2,
            "max_trials": 8,
            "jit_cache_env": ["TRITON_CACHE_DIR"],
            "workers": "fork",
        },
    }
    return parse(data, where / "prefetch.toml")


def run(repo: Path, shas: list[str], work: Path, parallel: int) -> dict[str, Any]:
    import git

    from bisector.build import Builder
    from bisector.measure.probe import StoreProbe
    from bisector.measure.warmer import Warmer, precompile_executor
    from bisector.runner import make_executor
    from bisector.search import SearchSettings, localize
    from bisector.store import Store

    cfg = config(repo, work.parent)
    builder = Builder(git.Repo(repo), cfg.upstream, cfg.build, work / "builds")
    warmer = Warmer(builder, lambda: precompile_executor(cfg, work, parallel), parallel) if parallel else None
    store = Store(work / "store.sqlite")
    executor = make_executor(cfg, work)
    try:
        probe = StoreProbe("study", cfg.shapes, store, builder, executor, warmer=warmer)
        start = time.time()
        result = localize(shas, probe, SearchSettings(interior_points=0, initial_repeats=2, max_repeats=8, rechecks=0))
        wall = time.time() - start
    finally:
        if warmer is not None:
            warmer.close()
        executor.close()
    firsts = [t for t in store.trials("study") if t.slot == 0]
    store.close()
    rows = []
    for t in sorted(firsts, key=lambda t: t.protocol["timeline"]["submitted"]):
        line, phases = t.protocol["timeline"], t.protocol["phases"]
        timed = min((a for name, _, a, _ in phases if name == "timed"), default=None)
        rows.append(
            {
                "sha": t.sha[:8],
                "to_timed_s": (timed - line["submitted"]) if timed else float("nan"),
                "device_s": (line.get("release") or 0) - (line.get("go") or 0),
                "prefetched": "cold_compile" in t.protocol,
            }
        )
    medians = {
        sha[:8]: {k: round(statistics.median(v), 3) for k, v in m.samples.items() if v} or m.reason[:200]
        for sha, m in result.measurements.items()
    }
    return {
        "wall_s": wall,
        "steps": [s.commit[:8] for s in result.steps],
        "dropped": [s.commit[:8] for s in result.dropped],
        "rows": rows,
        "medians": medians,
        "prefetched": list(warmer.started) if warmer else [],
        "cancelled": list(warmer.cancelled) if warmer else [],
    }


def report(name: str, r: dict[str, Any]) -> str:
    new = r["rows"]
    lines = [
        f"{name}: search {r['wall_s']:.1f} s, steps {r['steps']} (dropped at verification {r['dropped']}), "
        f"{len(new)} commits measured; "
        f"prefetched {len(r['prefetched'])}, cancelled {len(r['cancelled'])}"
    ]
    for row in new:
        lines.append(
            f"  {row['sha']}  asked -> timed {row['to_timed_s']:6.2f} s   device {row['device_s']:5.2f} s"
            f"{'   (compiled by a prefetch)' if row['prefetched'] else ''}"
        )
    if not r["steps"]:  # say why: the ratios the search saw
        lines.append(f"  no step found; median ratio per commit: {r['medians']}")
    inner = new[2:]  # GOOD and BAD are asked for before anything can be prefetched
    if inner:
        lines.append(
            f"  new commits after GOOD/BAD: median asked -> timed "
            f"{statistics.median(x['to_timed_s'] for x in inner):.2f} s, "
            f"device held by first trials {sum(x['device_s'] for x in inner):.1f} s in all"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=17)
    ap.add_argument("--step", type=int, default=11)
    ap.add_argument("--compile-s", type=float, default=3.0)
    ap.add_argument("--parallel", default="1,2", help="prefetches at once, one run per value (comma-separated)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["BISECTOR_LOCK_DIR"] = str(root / "locks")  # this study's own device locks
        shas = make_repo(root / "repo", args.commits, args.step, args.compile_s)
        out = [
            f"studies/prefetch.py: {args.commits} commits, step at {args.step}, fake compile "
            f"{args.compile_s:g} s, CPU, {os.cpu_count()} cores"
        ]
        for parallel in (0, *(int(x) for x in args.parallel.split(","))):
            name = f"prefetch on ({parallel} at once)" if parallel else "prefetch off"
            out.append(report(name, run(root / "repo", shas, root / f"work{parallel}", parallel)))
            print(out[-1], flush=True)
    text = "\n".join(out) + "\n"
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build-cache timings on a real upstream: cold builds, cache hits, and patched (revert) builds.

    python -m studies.build_cache --repo /tmp/FlagGems --recipe pip --commits 5

Runs on the host, not in a trial process, so, like every study, it uses `bisector`
(imported inside `main`, so importing this module from a trial stays free of it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def _git(repo: str, *args: str) -> str:
    # bytes, then decode: text mode would turn CRLF into LF and break patches of CRLF files
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout.decode()


def main(argv: list[str] | None = None) -> dict:
    import git

    from bisector.build import Builder
    from bisector.config import Build, Upstream

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="local path of the upstream checkout (left untouched)")
    ap.add_argument("--recipe", choices=("pip", "none"), default="pip")
    ap.add_argument("--ref", default="HEAD")
    ap.add_argument("--commits", type=int, default=5)
    ap.add_argument("--source-dir", default=".")
    ap.add_argument("--import-check", default=None)
    ap.add_argument(
        "--pip-arg", action="append", default=None, help="repeatable; default: --no-deps --no-build-isolation"
    )
    ap.add_argument("--cache-dir", default=None, help="default: a fresh temporary dir (cold)")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    shas = _git(args.repo, "rev-list", "--first-parent", f"-{args.commits}", args.ref).split()[::-1]
    cache = Path(args.cache_dir or tempfile.mkdtemp(prefix="bisector-bench-cache-"))
    build = Build(
        recipe=args.recipe,
        pip_args=tuple(args.pip_arg or ("--no-deps", "--no-build-isolation")),
        import_check=args.import_check,
    )
    builder = Builder(git.Repo(args.repo), Upstream(repo=args.repo, source_dir=args.source_dir), build, cache)

    rows = []
    for phase in ("cold", "hit", "patched", "patched-hit"):
        for sha in shas:
            patch = _git(args.repo, "diff", sha, f"{sha}^") if phase.startswith("patched") else None
            if patch is not None and not patch.strip():
                continue
            t0 = time.monotonic()
            r = builder.build(sha, patch=patch)
            wall = time.monotonic() - t0
            rows.append(
                {
                    "phase": phase,
                    "sha": sha[:10],
                    "status": r.status.value,
                    "cache_hit": r.cache_hit,
                    "seconds": round(wall, 4),
                    "log": r.log_path,
                    "tail": r.log_tail[-300:],
                }
            )
            print(f"{phase:12s} {sha[:10]} {r.status.value:6s} hit={r.cache_hit!s:5s} {wall:8.3f}s")

    summary = {}
    for phase in ("cold", "hit", "patched", "patched-hit"):
        secs = [r["seconds"] for r in rows if r["phase"] == phase and r["status"] == "ok"]
        if secs:
            summary[phase] = {
                "n": len(secs),
                "median_s": round(statistics.median(secs), 4),
                "max_s": round(max(secs), 4),
            }
    out = {
        "repo": args.repo,
        "recipe": args.recipe,
        "commits": [s[:10] for s in shas],
        "cache": str(cache),
        "cache_bytes": builder.cache.total_bytes(),
        "summary": summary,
        "rows": rows,
    }
    print(json.dumps({k: out[k] for k in ("recipe", "cache_bytes", "summary")}, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()

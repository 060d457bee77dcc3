"""Small copies of the real upstreams' ranges, for a machine with no network (the lent GPU).

    python -m studies.real_repos --out DIR [--mirrors /work/.mirror]

For each range described in benches/real/*/range.toml, writes DIR/<lib>.git: a bare repository
holding exactly the commits between the range's good commit and its bad one (first-parent and
merged), their trees and blobs, the good commit marked shallow, and the branch `main` at the bad
commit. Commit ids are the upstream's. A blob the mirror lacks (a mirror keeps no large data
files) is stood in for by an empty blob through `git replace`, so a checkout of any commit works
and its id stays the upstream's; the stand-ins are listed, and are never files a kernel reads.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benches.real.ranges import RANGES_DIR, load_all


def git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], input=stdin, check=True, capture_output=True
    ).stdout


def copy_range(mirror: Path, out: Path, good: str, bad: str) -> list[str]:
    """Write the bare copy; return the ids of the blobs stood in for."""
    # The range's new objects, and the whole tree of the good commit (objects it shares with its
    # parent would otherwise be left out as the parent's).
    listing = git(mirror, "rev-list", "--objects", "--missing=print", bad, f"^{good}^").decode().splitlines()
    listing += git(mirror, "rev-list", "--objects", "--missing=print", "--no-walk", good).decode().splitlines()
    listing = list(dict.fromkeys(line.split()[0] for line in listing))
    missing = [line[1:] for line in listing if line.startswith("?")]
    objects = "".join(line + "\n" for line in listing if not line.startswith("?"))
    commits = set(git(mirror, "rev-list", bad, f"^{good}^").decode().split())
    out.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", str(out)], check=True)
    pack_base = out / "objects" / "pack" / "range"
    subprocess.run(
        ["git", "--git-dir", str(mirror), "pack-objects", "-q", "--missing=allow-any", str(pack_base)],
        input=objects.encode(),
        check=True,
        capture_output=True,
    )
    shallow = []
    for line in git(mirror, "rev-list", "--parents", bad, f"^{good}^").decode().splitlines():
        sha, *parents = line.split()
        if any(p not in commits for p in parents):
            shallow.append(sha)
    (out / "shallow").write_text("".join(s + "\n" for s in sorted(shallow)))
    git(out, "update-ref", "refs/heads/main", bad)
    git(out, "symbolic-ref", "HEAD", "refs/heads/main")
    empty = git(out, "hash-object", "-w", "--stdin", stdin=b"").decode().strip()
    for blob in missing:
        git(out, "replace", "-f", blob, empty)
    return missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    args = ap.parse_args(argv)
    for desc in load_all(RANGES_DIR):
        mirror = args.mirrors / desc.upstream.replace("/", "+") / "repo"
        dest = args.out / f"{desc.lib}.git"
        if dest.exists():
            print(f"{desc.lib}: {dest} exists, kept", file=sys.stderr)
            continue
        stood_in = copy_range(mirror, dest, desc.good, desc.bad)
        print(f"{desc.lib}: {dest} ({len(desc.culprits)} culprits); stand-in blobs: {stood_in or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

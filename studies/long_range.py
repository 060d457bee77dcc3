"""A real library's range length with one step: how long from a cold start to a verified culprit
and its measured revert (issue 23: a 389-commit range in <= 60 s on one H200).

    python -m studies.long_range --device cuda [--commits 389] [--at 247] [--shapes fa/s16384] [--dir DIR]

Writes a repository of `--commits` commits of the demo library (bisector/demo): the first holds the
demo's initial knobs, commit `--at` drops the attention kernel's L2 remap (the demo's #115:
-11% on fa/s16384 on an H200, -25% on fa/s1024 on the CPU), every other commit changes a notes
file only. Then runs `bisector run` on it, cold (fresh store, work dir and JIT caches), with the
demo config of the device, no hunk search, the revert checked on the tip, and prints the wall
time, the culprit and the revert's verdict, with the run's own throughput figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bisector.demo.demo_config import CONFIG_FILES, default_configs_dir
from bisector.demo.history import INITIAL, START_EPOCH, derived
from bisector.demo.repo import _TEMPLATES, BRANCH, _git, _template, commit_record, render

STEP = {"fa_remap": False}


def fast_import(commits: int, at: int) -> bytes:
    texts = {name: _template(name) for name in _TEMPLATES}
    out: list[bytes] = []
    for i in range(commits):
        knobs = derived({**INITIAL, **(STEP if i >= at else {})})
        files = {
            name: render(texts[name], knobs, name)
            for name in _TEMPLATES
            if name != "demolib/utils.py" or knobs["utils_file"]
        }
        # The culprit changes the kernel only (its revert must apply on the tip, as a real one-line
        # fix's would); every other commit appends a note.
        files["NOTES.md"] = "".join(f"- note {k}\n" for k in range(i + 1) if k != at)
        subject = "FA: simplify the program-id mapping" if i == at else f"docs: note {i}"
        entries = []
        for path, text in sorted(files.items()):
            data = text.encode()
            out.append(b"blob\nmark :%d\ndata %d\n%s\n" % (1 + i * 100 + len(entries), len(data), data))
            entries.append(b"M 100644 :%d %s\n" % (1 + i * 100 + len(entries), path.encode()))
        out.append(commit_record(i, 10_000_000, START_EPOCH + i * 600, f"{subject} (#{1000 + i})\n", entries))
    return b"".join(out) + b"done\n"


def write_repo(dest: Path, commits: int, at: int) -> list[str]:
    dest.mkdir(parents=True)
    _git(dest, "init", "-q", "-b", BRANCH)
    _git(dest, "fast-import", "--quiet", "--done", stdin=fast_import(commits, at))
    _git(dest, "reset", "-q", "--hard", BRANCH)
    return _git(dest, "rev-list", "--reverse", BRANCH).split()


def config_text(device: str, upstream: Path) -> str:
    """The demo config of `device`, its upstream the written repository."""
    config = (default_configs_dir() / CONFIG_FILES[device]).read_text()
    return config.replace('repo = "demo"', f'repo = "{upstream}"', 1)


def run_command(root: Path, shas: list[str], shapes: str) -> list[str]:
    """`bisector run` over the whole written range, cold, everything under `root`, its result as JSON."""
    return [
        sys.executable,
        "-m",
        "bisector",
        "run",
        "--config",
        str(root / "config.toml"),
        "--good",
        shas[0],
        "--bad",
        shas[-1],
        "--shapes",
        shapes,
        "--no-hunks",
        "--store",
        str(root / "results.sqlite"),
        "--work-dir",
        str(root / "work"),
        "--report-dir",
        str(root / "report"),
        "--json",
    ]


def timed_run(cmd: list[str], log_path: Path, start: float) -> tuple[subprocess.Popen, str]:
    """Run `cmd`, its stderr written to `log_path` line by line as it comes, each line stamped with
    the seconds since `start` ("[  12.34] progress: ..."), and a last line when the process has
    exited: where the wall goes before the first trial and after the last (imports, report, exit)
    shows without a profiler. Returns the ended process and its stdout."""
    with open(log_path, "w") as log:  # written as the run goes: a stopped run keeps it
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        for line in proc.stderr:  # type: ignore[union-attr]
            log.write(f"[{time.time() - start:8.2f}] {line}")
            log.flush()
        proc.wait()
        reader.join()
        log.write(f"[{time.time() - start:8.2f}] exited {proc.returncode}\n")
    return proc, "".join(out)


def emit(line: str, out: Path | None) -> None:
    """Print the result line, and append it to `out` when given."""
    print(line)
    if out:
        with open(out, "a") as fh:
            fh.write(line + "\n")


def range_args(ap: argparse.ArgumentParser, commits: int, at: int) -> None:
    """The options of a synthetic one-step range, shared by the studies that run one."""
    ap.add_argument("--device", choices=sorted(CONFIG_FILES), default="cpu")
    ap.add_argument("--commits", type=int, default=commits)
    ap.add_argument("--at", type=int, default=at, help="index of the commit that holds the step")
    ap.add_argument("--shapes", default=None, help="default: fa/s16384 (cuda), fa/s1024 (cpu)")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="append the result line here")


def written_range(args: argparse.Namespace, prefix: str) -> tuple[str, Path, list[str]]:
    """(shapes, the run's dir, the written range's SHAs) for `range_args`' options."""
    shapes = args.shapes or ("fa/s16384" if args.device == "cuda" else "fa/s1024")
    root = Path(args.dir or tempfile.mkdtemp(prefix=prefix)).resolve()
    return shapes, root, write_repo(root / "upstream", args.commits, args.at)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    range_args(ap, 389, 247)
    args = ap.parse_args(argv)
    shapes, root, shas = written_range(args, "long-range-")
    (root / "config.toml").write_text(config_text(args.device, root / "upstream"))
    cmd = run_command(root, shas, shapes)
    print(f"long_range: {root}", file=sys.stderr, flush=True)
    start = time.time()
    proc, stdout = timed_run(cmd, root / "progress.log", start)
    wall = time.time() - start
    (root / "run.json").write_text(stdout)
    if proc.returncode != 0:
        print((root / "progress.log").read_text()[-3000:], file=sys.stderr)
        return proc.returncode
    data = json.loads(stdout)
    steps = data.get("steps") or []
    named = [s.get("commit", "")[:12] for s in steps]
    verdicts = [
        {shape: v.get("verdict") for shape, v in (f.get("shapes") or {}).items()} for f in data.get("fixes") or []
    ]
    line = (
        f"{time.strftime('%Y-%m-%d %H:%M')} {args.device} {args.commits} commits, step at {args.at} "
        f"({shas[args.at][:12]}), shapes {shapes}: {wall:.1f} s wall; culprit {named} "
        f"({'exact' if named == [shas[args.at][:12]] else 'NOT exact'}); revert {verdicts}; "
        f"throughput {json.dumps(data.get('throughput', {}))[:400]}"
    )
    emit(line, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Screen and confirm real steps by hand, apart from the bot: for each (library, commit) of a plan,
check the commit out of the small upstream copy (studies/real_repos.py) and, in a fresh process with
a fresh TRITON_CACHE_DIR, time every shape of the library's config (benches/real/<lib>/config.toml)
with `triton.testing.do_bench(..., return_mode="median")`, subject and torch control, after checking
the subject's output against the control's.

    python -m studies.real_screen --repos DIR --plan plan.json --out screen.json [--lib fla flash_attn]

plan.json: [{"lib": "liger", "sha": "<40 hex>", "label": "540575bc^"}, ...]. Prints one line per
(commit, shape) as it goes and writes every figure to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "benches" / "real"


@dataclass(frozen=True)
class ConfigShape:
    """One shape of a library's vendored config, with what a study needs to call it."""

    key: str  # suite/shape
    suite: Any  # the suite object (benches/real/ops.py contract)
    entry: str  # "module:function" of the subject
    params: dict[str, Any]

    def subject(self) -> Any:
        import importlib

        module, _, name = self.entry.partition(":")
        return getattr(importlib.import_module(module), name)


def config_shapes(lib: str, src: Path, suites: Sequence[str] = ()) -> Iterator[ConfigShape]:
    """Each shape of `lib`'s config (of `suites`, or every suite) with the checkout `src` and the
    config's own modules put first on sys.path, in the config's order."""
    import importlib

    cfg = tomllib.loads((REAL / lib / "config.toml").read_text())
    sys.path[:0] = [str(src / cfg["upstream"]["source_dir"]), str(REAL / lib)]
    for name, suite_cfg in cfg["suites"].items():
        if suites and name not in suites:
            continue
        mod_name, _, cls = suite_cfg["module"].partition(":")
        suite = getattr(importlib.import_module(mod_name), cls)()
        for shape in suite_cfg["shapes"]:
            yield ConfigShape(
                f"{name}/{shape['name']}",
                suite,
                cfg["subject"][name]["entry"],
                {k: v for k, v in shape.items() if k != "name"},
            )


def one(lib: str, src: Path, only: tuple[str, ...] = ()) -> list[dict]:
    """In this (fresh) process: time every shape of `lib`'s config at the checkout `src` (or those
    whose `suite/name` starts with one of `only`)."""
    import torch
    import triton

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.time() + 0.5
    while time.time() < end:  # bring the clock up before anything is timed
        a @ a
    torch.cuda.synchronize()
    out = []
    for shape in config_shapes(lib, src):
        if only and not shape.key.startswith(only):
            continue
        row: dict[str, Any] = {"lib": lib, "shape": shape.key}
        try:
            fn = shape.subject()
            inputs = shape.suite.make_inputs(shape.params, "cuda", 0)
            t0 = time.time()
            got = shape.suite.output(fn(**inputs))
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.time() - t0, 3)
            ctrl = shape.suite.control(inputs)
            want = shape.suite.output(ctrl())
            row["max_abs_err"] = float((got - want).abs().max())
            row["subject_ms"] = triton.testing.do_bench(lambda fn=fn, inputs=inputs: fn(**inputs), return_mode="median")
            row["control_ms"] = triton.testing.do_bench(ctrl, return_mode="median")
            row["gbps"] = shape.suite.bytes(shape.params) / row["subject_ms"] / 1e6
        except Exception as exc:  # noqa: BLE001 - a commit that does not run is a finding too
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        out.append(row)
        inputs = None
        torch.cuda.empty_cache()
    return out


def at_commit(
    repos: Path,
    item: dict,
    work: Path,
    index: int,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> list[dict] | str:
    """`python -m <argv>` run in a fresh process with the plan entry's commit checked out and a fresh
    TRITON_CACHE_DIR: the rows it printed as its last line of JSON, or why it gave none. The checkout
    is a worktree, as the bot's builds make (`git archive` does not honour the copy's stand-in blobs),
    removed after."""
    git_dir = str(repos.resolve() / f"{item['lib']}.git")
    src = work / f"{index}-{item['sha'][:12]}"
    subprocess.run(
        ["git", "--git-dir", git_dir, "worktree", "add", "-q", "--detach", str(src), item["sha"]],
        check=True,
        capture_output=True,
    )
    env = {
        **os.environ,
        **(env or {}),
        "TRITON_CACHE_DIR": str(work / f"jit-{index}"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-m", *[a if a != "{src}" else str(src) for a in argv]],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    finally:
        subprocess.run(["git", "--git-dir", git_dir, "worktree", "remove", "--force", str(src)], capture_output=True)
    if proc.returncode != 0:
        return proc.stderr[-600:]
    rows: list[dict] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos", type=Path)
    ap.add_argument("--plan", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--lib", nargs="*", default=[], help="only these libraries' entries of the plan")
    ap.add_argument("--shapes", default="", help="comma-separated `suite/name` prefixes to time (default: all)")
    ap.add_argument("--one", nargs=2, metavar=("LIB", "SRC"), help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=150)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], Path(args.one[1]), tuple(filter(None, args.shapes.split(","))))))
        return 0
    plan = [p for p in json.loads(args.plan.read_text()) if not args.lib or p["lib"] in args.lib]
    work = Path(tempfile.mkdtemp(prefix="real-screen-"))
    rows: list[dict] = []
    gpu = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    for i, item in enumerate(plan):
        t0 = time.time()
        found = at_commit(
            args.repos,
            item,
            work,
            i,
            ["studies.real_screen", "--shapes", args.shapes, "--one", item["lib"], "{src}"],
            timeout=args.timeout,
        )
        if isinstance(found, str):
            found = [{"lib": item["lib"], "shape": "*", "error": found}]
        for row in found:
            row.update(
                sha=item["sha"], label=item.get("label", item["sha"][:8]), process_s=round(time.time() - t0, 1), gpu=gpu
            )
            rows.append(row)
            if "error" in row:
                print(f"{row['lib']:10} {row['label']:12} {row['shape']:18} ERROR {row['error'][-300:]}", flush=True)
            else:
                print(
                    f"{row['lib']:10} {row['label']:12} {row['shape']:18} subject {row['subject_ms']:.4f} ms  "
                    f"control {row['control_ms']:.4f} ms  ratio {row['control_ms'] / row['subject_ms']:.3f}  "
                    f"err {row['max_abs_err']:.3g}  first {row['first_call_s']:.1f} s",
                    flush=True,
                )
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

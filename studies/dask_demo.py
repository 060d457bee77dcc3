"""The demo on several devices through the dask executor: k-ary probes, and a worker killed mid-trial.

    python -m studies.dask_demo --device cuda|cpu --visible 0,1 [--shapes ...] [--kill-after 12]
                                [--no-kill] [--timeout 540] [--dir DIR] [--out FILE]

Issue 24 on the hardware it names: starts a scheduler and one Nanny-supervised worker per device
(`bisector.runner.cluster.local_cluster`, what `--executor-address local` starts, with the same
`HOLD` room for standbys and spares, here in this process so it can watch and kill a worker), and runs

    bisector demo --device D --visible 0,1 --executor dask --executor-address <scheduler> --json

with the shapes given (hunks, reverts and interactions on). The search probes as many commits a
round as the cluster has GPU workers. Once `--kill-after` trial tasks have ended, SIGKILLs the
worker holding a device's lock (`studies.dask_one_gpu.kill_one_mid_trial`); its nanny starts a
fresh one and the scheduler re-runs its trial elsewhere. Prints one line (appended to `--out`):
wall time, probe calls (a k-ary round is one call), trials, the planted steps found, missed and
extra (the demo's manifest), the kill and where its trials re-ran, stored statuses, rows stored
twice, claims left, device sections that overlapped on one device, and each device's busy share
and idle gaps by what it waited for (`studies.idle_gaps.device_gaps`). The run's --json is kept
as demo.json, its progress as progress.log, its store and report in `--dir`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bisector.demo import write_demo_repo
from bisector.demo.demo_config import demo_config
from bisector.runner.cluster import local_cluster, require_distributed
from bisector.runner.launch import default_ahead, held_room
from bisector.runner.lock import lock_path
from studies.dask_one_gpu import device_overlaps, killed_line, run_killing_one, store_counts, trial_processes
from studies.idle_gaps import device_gaps
from studies.long_range import emit


def planted_line(device: str, shapes: list[str], found: list[dict[str, Any]], manifest: Any) -> tuple[str, bool]:
    """The planted steps the run found (their PR numbers), those it missed and the steps it named that
    were not planted; True when it found exactly the planted ones on the shapes measured."""
    prs = {sha: f"#{pr}" for sha, pr in zip(manifest.commits, manifest.prs)}
    planted = {p.sha: f"#{p.pr}" for p in manifest.steps(device) if set(p.shapes(device)) & set(shapes)}
    named = {s.get("commit", "") for s in found}
    hit = sorted(planted[s] for s in named if s in planted)
    missed = sorted(planted[s] for s in set(planted) - named)
    extra = sorted(prs.get(s, s[:10]) for s in named - set(planted))
    exact = not missed and not extra
    return f"planted {len(planted)}: found {hit}, missed {missed}, extra {extra}", exact


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--visible", default="0,1", help="the devices, one dask worker each")
    ap.add_argument("--shapes", default="", help="the demo's --shapes (default: every shape of its config)")
    ap.add_argument("--kill-after", type=int, default=12, help="trial tasks ended before the kill")
    ap.add_argument("--no-kill", action="store_true", help="kill no worker (a clean timing run)")
    ap.add_argument("--timeout", type=float, default=540.0, help="seconds the demo may take")
    ap.add_argument("--dir", type=Path, default=None, help="where the demo goes (default: a new temporary dir)")
    ap.add_argument("--out", type=Path, default=None, help="append the result line to this file")
    args = ap.parse_args(argv)
    devices = [int(d) for d in args.visible.split(",")]
    root = (args.dir or Path(tempfile.mkdtemp(prefix="dask-demo-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    manifest = write_demo_repo(root / "upstream")
    config = demo_config(args.device, root / "upstream")
    shapes = [s for s in args.shapes.split(",") if s] or [s.key for s in config.shapes]
    # The bot, the workers and their trials import this checkout and lock in this run's dir.
    checkout = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)
    os.environ["BISECTOR_LOCK_DIR"] = str(root / "locks")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")  # the workers' INFO lines drown the result
    locks = [lock_path(args.device, d) for d in devices]

    t0 = time.time()
    cluster = local_cluster(devices, threads=1 + default_ahead(config), holds=held_room(config))
    watcher = require_distributed().Client(cluster, set_as_default=False)
    watcher.wait_for_workers(len(devices), timeout=120)
    cluster_s = time.time() - t0
    cmd = [
        sys.executable,
        "-m",
        "bisector",
        "demo",
        "--device",
        args.device,
        "--dir",
        str(root),
        "--json",
        "--visible",
        args.visible,
        "--executor",
        "dask",
        "--executor-address",
        cluster.scheduler_address,
    ]
    cmd += ["--shapes", ",".join(shapes)] if args.shapes else []
    rc, stdout, wall, kill = run_killing_one(
        cmd, watcher, cluster, locks, None if args.no_kill else args.kill_after, args.timeout, root / "progress.log"
    )
    (root / "demo.json").write_text(stdout)
    data = json.loads(stdout) if rc == 0 and stdout.strip() else {}
    found, exact = planted_line(args.device, shapes, data.get("steps") or [], manifest)
    throughput = data.get("throughput") or {}
    store = root / "results.sqlite"
    procs = trial_processes(store) if store.exists() else []
    statuses, twice, left = store_counts(store) if procs else (Counter(), 0, 0)
    sections, overlaps, cross, _ = device_overlaps(procs)
    per_device = Counter(str(p["device"]) for p in procs)
    killed = "no kill asked" if args.no_kill else killed_line(kill, procs)
    line = (
        f"{time.strftime('%Y-%m-%d %H:%M')} {args.device} dask demo, {len(devices)} workers (devices "
        f"{args.visible}), shapes {','.join(shapes)}: rc {rc}, {wall:.1f} s wall (+{cluster_s:.1f} s cluster "
        f"start), measuring {throughput.get('wall_s')} s; probe calls {len(data.get('probe_calls') or [])}, "
        f"commits probed {data.get('probes')}, trials {data.get('trials')} (this call's processes "
        f"{throughput.get('trials')}, per device {dict(per_device)}); {found} "
        f"({'exact' if exact else 'NOT exact'}); {killed}; stored statuses {dict(statuses)}; stored twice "
        f"{twice}; claims left {left}; device sections {sections}: {overlaps} overlapped on one device "
        f"({cross} across workers); {device_gaps(store) if procs else 'no device sections'}; files in {root}"
    )
    emit(line, args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())

"""Two dask workers sharing one device under its lock: a worker killed mid-trial, nothing lost or doubled.

    python -m studies.dask_one_gpu --device cuda|cpu [--commits 40] [--at 27] [--out FILE] [--dir DIR]

Issue 24 on one GPU: writes the long-range repository (studies/long_range.py: `--commits` commits,
one step at `--at`), starts a `distributed.LocalCluster` of two Nanny-supervised worker processes
(one thread each) that both own device 0 of the one GPU (CUDA_VISIBLE_DEVICES=0, BISECTOR_DEVICE=0),
and runs `bisector run` on the demo config of the device with `[executor] kind = "dask"` at that
scheduler and `width = 2` (k-ary probes), one shape (fa/s16384 on cuda, fa/s1024 on the CPU), no
hunks, fixes off unless `--fixes`. While it runs, once `--kill-after` trial tasks have ended,
SIGKILLs the worker that holds the device's file lock (read from /proc/locks; if none is seen
holding it, the first worker seen running a trial, as tests/test_dask_executor.py does); its
nanny starts a fresh one. Afterwards prints one line (appended to `--out`): wall time,
trials, the culprit, the killed worker and where its trials re-ran, stored statuses, rows stored
twice and claims left (the test's queries), and whether any two stored trials held the device at
once (each trial's go..release from its timeline in the store). The run's --json is kept as
run.json and its progress as progress.log in `--dir`. `bisector run` reports no rounds; the line
gives its probe calls instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisector.config import load
from bisector.runner.cluster import require_distributed, worker_env
from bisector.runner.lock import lock_path
from studies.long_range import config_text, emit, range_args, run_command, written_range

TRIAL_KEY = re.compile(r"trial-([0-9a-f]+)-(\d+)-")


@dataclass
class Kill:
    """The worker killed, what it was running, and how it was picked."""

    address: str = ""
    pid: int = 0
    keys: tuple[str, ...] = ()
    how: str = ""
    seen: set[str] = field(default_factory=set)


def dask_config(device: str, upstream: Path, address: str) -> str:
    """The device's demo config on one device, its trials on the dask scheduler at `address`, 2 commits at once."""
    text = config_text(device, upstream)
    text = re.sub(r"(?m)^visible = \[.*\]$", "visible = [0]", text, count=1)
    text = re.sub(r"(?m)^\[executor\]\n(?:(?!\[).*\n)*", "", text)
    return text.rstrip("\n") + f'\n\n[executor]\nkind = "dask"\naddress = "{address}"\nwidth = 2\n'


def lock_holder(path: Path) -> int | None:
    """The pid holding the flock on `path` (/proc/locks), None if free; -1 if /proc/locks cannot be read.
    Matched on the inode alone: on an overlay the lock is listed with the upper file system's device."""
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return None
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return -1
    for line in lines:
        fields = line.split()
        held = "->" not in fields and len(fields) > 5 and fields[1] == "FLOCK"
        if held and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


def kill_one_mid_trial(watcher: Any, device_locks: list[Path], after: int, kill: Kill, stop: threading.Event) -> None:
    """SIGKILL a worker holding a device (one of `device_locks`) once `after` trial tasks have ended (no time assumed);
    if no worker is seen holding it for 20 s (or /proc/locks cannot be read), the first worker seen
    running a trial, 0.5 s in, as tests/test_dask_executor.py does."""
    pids: dict[str, int] = {}
    since = None
    try:
        while not stop.is_set():
            busy = {w: [k for k in keys if k.startswith("trial-")] for w, keys in watcher.processing().items()}
            busy = {w: keys for w, keys in busy.items() if keys}
            running = {k for keys in busy.values() for k in keys}
            kill.seen.update(running)
            if busy and len(kill.seen - running) >= after:
                since = since or time.monotonic()
                if set(busy) - set(pids):
                    pids = watcher.run(os.getpid)
                holders = {lock_holder(lock) for lock in device_locks}
                target, how = next((w for w in sorted(busy) if pids.get(w) in holders), None), "holding a device"
                if target is None and (-1 in holders or time.monotonic() - since > 20):
                    target, how = sorted(busy)[0], "running a trial (no lock holder seen)"
                    time.sleep(0.5)
                if target is not None:
                    os.kill(pids[target], signal.SIGKILL)
                    kill.address, kill.pid, kill.keys, kill.how = target, pids[target], tuple(busy[target]), how
                    return
            stop.wait(0.05)
    except Exception as exc:  # noqa: BLE001 - the line says so; the run goes on
        kill.how = f"the killer failed: {type(exc).__name__}: {exc}"


def trial_processes(store: Path) -> list[dict[str, Any]]:
    """One entry per stored trial process: its commit, slot, status, worker and timeline."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT sha, patch_hash, slot, status, protocol FROM trials ORDER BY id").fetchall()
    out: dict[tuple, dict[str, Any]] = {}
    for sha, patch, slot, status, protocol in rows:
        proto = json.loads(protocol or "{}")
        where = proto.get("where") or {}
        entry = out.setdefault(
            (sha, patch, slot, proto.get("log_path")),
            {
                "sha": sha,
                "slot": slot,
                "statuses": [],
                "worker": where.get("dask_worker", "?"),
                "device": where.get("device", 0),
                "timeline": proto.get("timeline") or {},
            },
        )
        entry["statuses"].append(status)
    return list(out.values())


def device_overlaps(procs: list[dict[str, Any]]) -> tuple[int, int, int, int]:
    """(device sections, sections that began before an earlier one on the same device ended, of those
    across workers, pairs of trial processes of two workers alive at once): the lock's evidence."""
    spans = sorted(
        (t["go"], t["release"], p["worker"], p.get("device", 0))
        for p in procs
        for t in [p["timeline"]]
        if t.get("go") is not None and t.get("release") is not None
    )
    overlaps = cross = 0
    for i, (go, _, worker, device) in enumerate(spans):
        earlier = [(r, w) for _, r, w, d in spans[:i] if r > go and d == device]
        overlaps += bool(earlier)
        cross += any(w != worker for _, w in earlier)
    alive = [
        (t["assigned"] if t.get("assigned") is not None else t.get("started"), t.get("ended"), p["worker"])
        for p in procs
        for t in [p["timeline"]]
    ]
    alive = [a for a in alive if a[0] is not None and a[1] is not None]
    together = sum(
        1 for i, a in enumerate(alive) for b in alive[i + 1 :] if a[2] != b[2] and a[0] < b[1] and b[0] < a[1]
    )
    return len(spans), overlaps, cross, together


def reruns(kill: Kill, procs: list[dict[str, Any]]) -> list[str]:
    """Per trial task of the killed worker: where it ran again and with what statuses."""
    out = []
    for key in kill.keys:
        m = TRIAL_KEY.match(key)
        if m is None:
            continue
        again = [p for p in procs if p["sha"].startswith(m.group(1)) and p["slot"] == int(m.group(2))]
        where = ", ".join(f"{p['worker']} {'/'.join(p['statuses'])}" for p in again) or "NOT re-run"
        out.append(f"{m.group(1)[:8]}#{m.group(2)} -> {where}")
    return out


def killed_line(kill: Kill, procs: list[dict[str, Any]]) -> str:
    """The worker killed and where each of its trials ran again, or why none was."""
    if not kill.address:
        return f"NO worker killed ({len(kill.seen)} trial tasks seen; {kill.how or 'none held a device'})"
    return (
        f"killed {kill.address} (pid {kill.pid}, {kill.how}) with {len(kill.keys)} trial task(s): "
        f"{'; '.join(reruns(kill, procs))}"
    )


def store_counts(store: Path) -> tuple[Counter, int, int]:
    """Stored statuses, rows stored twice, and claims left (the queries of tests/test_dask_executor.py)."""
    with sqlite3.connect(store) as db:
        statuses = Counter(r[0] for r in db.execute("SELECT status FROM trials"))
        twice = db.execute(
            "SELECT sha, patch_hash, slot, shape, COUNT(*) FROM trials "
            "GROUP BY sha, patch_hash, slot, shape HAVING COUNT(*) > 1"
        ).fetchall()
        has_claims = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'claims'").fetchone()[0]
        left = db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] if has_claims else 0
    return statuses, len(twice), left


def start_cluster(device: str, threads: int) -> Any:
    """Two Nanny-supervised worker processes on this host, both owning device 0 of the one device."""
    distributed = require_distributed()
    env = {**worker_env(0), "BISECTOR_LOCK_DIR": os.environ["BISECTOR_LOCK_DIR"]}
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = "0"
    return distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=threads,
        processes=True,
        host="127.0.0.1",
        resources={"GPU": 1},
        env=env,
        memory_limit=0,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )


def scheduler_state(client: Any) -> str:
    """The scheduler's tasks by kind and state, and each worker's threads, tasks processing and
    resources in use against its own (JSON): a run cut at its timeout says what it waited on (the
    one-H200 dask demo stalled at a new commit's first round on 2026-12-04, cause unknown)."""

    def snapshot(dask_scheduler: Any = None) -> dict[str, Any]:
        tasks: Counter = Counter()
        for key, ts in dask_scheduler.tasks.items():
            name = key if isinstance(key, str) else str(key[0])
            tasks[f"{name.split('-')[0]} {ts.state}"] += 1
        workers = {
            ws.address: {
                "nthreads": ws.nthreads,
                "processing": len(ws.processing),
                "used": dict(ws.used_resources),
                "resources": dict(ws.resources),
            }
            for ws in dask_scheduler.workers.values()
        }
        return {"tasks": dict(tasks), "workers": workers}

    try:
        return json.dumps(client.run_on_scheduler(snapshot))
    except Exception as exc:  # noqa: BLE001 - a diagnosis must not hide the run's own result
        return f"unreadable ({type(exc).__name__}: {exc})"


def run_killing_one(
    cmd: list[str], watcher: Any, cluster: Any, device_locks: list[Path], after: int | None, timeout: float, log: Path
) -> tuple[int, str, float, Kill]:
    """Run the bot's command (its stderr to `log`) while `kill_one_mid_trial` watches the cluster (no
    kill with `after` None); then close the watcher and the cluster. (rc, stdout, wall seconds, the
    kill); rc 124 when it ran past `timeout`. The tail of `log` is printed when rc is not 0."""
    kill, stop = Kill(), threading.Event()
    killer = threading.Thread(target=kill_one_mid_trial, args=(watcher, device_locks, after, kill, stop), daemon=True)
    if after is not None:
        killer.start()
    start = time.time()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            # what the run was waiting on, read while the bot still holds its tasks (a stall's cause)
            err.write(f"scheduler at the cut: {scheduler_state(watcher)}\n")
            err.flush()
            proc.kill()
            stdout, _ = proc.communicate()
            rc = 124
        finally:
            wall = time.time() - start
            stop.set()
            if killer.is_alive():
                killer.join(timeout=10)
            watcher.close()
            cluster.close()
    if rc != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
    return rc, stdout, wall, kill


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    range_args(ap, 40, 27)
    ap.add_argument("--threads", type=int, default=1, help="threads (trials at once) per dask worker")
    ap.add_argument("--kill-after", type=int, default=5, help="trial tasks ended before the kill")
    ap.add_argument("--fixes", action="store_true", help="also measure the culprit's revert on the tip")
    ap.add_argument("--timeout", type=float, default=480.0, help="seconds the run may take")
    args = ap.parse_args(argv)
    shapes, root, shas = written_range(args, "dask-one-gpu-")
    # The bot, the workers and their trials import this checkout, lock in this run's dir, see one GPU.
    checkout = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)
    os.environ["BISECTOR_LOCK_DIR"] = str(root / "locks")
    if args.device == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    device_lock = lock_path(args.device, 0)

    t0 = time.time()
    cluster = start_cluster(args.device, args.threads)
    watcher = require_distributed().Client(cluster, set_as_default=False)
    watcher.wait_for_workers(2, timeout=120)
    cluster_s = time.time() - t0
    (root / "config.toml").write_text(dask_config(args.device, root / "upstream", cluster.scheduler_address))
    load(root / "config.toml")  # a bad edit fails here, in one line, before anything runs
    cmd = run_command(root, shas, shapes) + ([] if args.fixes else ["--no-fixes"])
    rc, stdout, wall, kill = run_killing_one(
        cmd, watcher, cluster, [device_lock], args.kill_after, args.timeout, root / "progress.log"
    )
    (root / "run.json").write_text(stdout)
    data = json.loads(stdout) if rc == 0 and stdout.strip() else {}
    named = [s.get("commit", "")[:12] for s in data.get("steps") or []]
    throughput = data.get("throughput") or {}
    procs = trial_processes(root / "results.sqlite") if (root / "results.sqlite").exists() else []
    statuses, twice, left = store_counts(root / "results.sqlite") if procs else (Counter(), 0, 0)
    sections, overlaps, cross, together = device_overlaps(procs)
    per_worker = {k: int(v.get("trials", 0)) for k, v in (throughput.get("per_device") or {}).items()}
    busy = f"{throughput['device_s'] / throughput['wall_s']:.0%}" if throughput.get("wall_s") else "?"
    workers = Counter(p["worker"] for p in procs)
    killed = killed_line(kill, procs)
    line = (
        f"{time.strftime('%Y-%m-%d %H:%M')} {args.device} dask, 2 workers x {args.threads} thread on one device, "
        f"width 2, {args.commits} commits, step at {args.at} ({shas[args.at][:12]}), shape {shapes}, "
        f"fixes {'on' if args.fixes else 'off'}: rc {rc}, {wall:.1f} s wall (+{cluster_s:.1f} s cluster start); "
        f"rounds not reported by the run ({len(data.get('probe_calls') or [])} probe calls, "
        f"{data.get('probes')} commits probed); trials {data.get('trials')} (this call's processes "
        f"{throughput.get('trials')}, per worker {per_worker}, the one device busy {busy}); "
        f"culprit {named} ({'exact' if named == [shas[args.at][:12]] else 'NOT exact'}); {killed}; "
        f"stored statuses {dict(statuses)}; stored twice {twice}; claims left {left}; "
        f"device sections {sections} from workers {dict(workers)}: {overlaps} overlapped ({cross} across workers), "
        f"{together} pairs of trials of the two workers alive at once; files in {root}"
    )
    emit(line, args.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())

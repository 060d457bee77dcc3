"""The dask executor on a local cluster of 2 workers: the same steps as the local executor, and a
worker killed mid-trial loses nothing (its trial re-runs elsewhere, nothing is stored twice)."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bisector import config as config_mod
from bisector import pipeline
from tests.gitfixtures import PLANTED_MATMUL, commit_file, cpu_config, gemm_subject, git

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow


def config(repo: Path) -> str:
    return cpu_config("dask-test", repo, gemm_subject(256), trials=3, max_trials=4, reps=5, min_step_pct=20.0)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Ten commits; #4 makes the GEMM 3x slower, #8 5x faster than that (two planted steps)."""
    repo = tmp_path_factory.mktemp("up")
    git(repo, "init", "-q", "-b", "main")
    shas = [
        commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1),
        commit_file(repo, "lib/gemm.py", PLANTED_MATMUL.format(extra=0), "add gemm (#2)", 2),
    ]
    for k in range(3, 11):
        extra = 0 if k < 5 else 4 if k < 9 else 0
        text = PLANTED_MATMUL.format(extra=extra) if k in (5, 9) else f"note {k}\n"
        shas.append(commit_file(repo, "lib/gemm.py" if k in (5, 9) else f"docs/n{k}.md", text, f"c{k} (#{k})", k))
    return repo, shas


def bisect(tmp: Path, repo: Path, good: str, executor: config_mod.Executor) -> pipeline.RunOutcome:
    cfg_path = tmp / "cfg.toml"
    cfg_path.write_text(config(repo))
    cfg = replace(config_mod.load(cfg_path), executor=executor)
    options = pipeline.RunOptions(
        good=good,
        bad="main",
        store=str(tmp / "s.sqlite"),
        work_dir=str(tmp / "work"),
        report_dir=str(tmp / "report"),
        verify_fixes=False,
        find_hunks=False,
    )
    return pipeline.bisect(cfg, options)


def stored_twice(store: Path) -> list[tuple]:
    with sqlite3.connect(store) as db:
        return db.execute(
            "SELECT sha, patch_hash, slot, shape, COUNT(*) FROM trials "
            "GROUP BY sha, patch_hash, slot, shape HAVING COUNT(*) > 1"
        ).fetchall()


def test_local_cluster_finds_the_steps_the_local_executor_finds(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    (tmp_path / "local").mkdir()
    (tmp_path / "dask").mkdir()
    local = bisect(tmp_path / "local", repo, shas[1], config_mod.Executor("local"))
    remote = bisect(tmp_path / "dask", repo, shas[1], config_mod.Executor("dask", "local"))
    # Both find the slowdown and nothing but the planted steps. Not asked to agree on the fix: once,
    # on a machine at load 7, the local run did not report it (not reproduced since; see the
    # closing note of 2026-12-01).
    for outcome in (local, remote):
        steps = {s.commit for s in outcome.result.steps}
        assert shas[4] in steps and steps <= {shas[4], shas[8]}
    # The dask run used both workers, each trial ran on a worker, and the bot stored each once.
    assert remote.report.throughput is not None and len(remote.report.throughput.per_device) == 2
    assert not stored_twice(tmp_path / "dask" / "s.sqlite")


@pytest.mark.parametrize("devices", [[0, 1], [0]], ids=["two workers", "one worker"])
def test_a_worker_killed_mid_trial_loses_nothing(tmp_path: Path, upstream, devices: list[int]) -> None:
    """With two workers the killed one's trial runs on the other; with one, on the worker its nanny
    starts in its place (a trial pinned to the dead worker's lane waited there for good)."""
    from bisector.runner.cluster import local_cluster

    repo, shas = upstream
    cluster = local_cluster(devices)
    watcher = distributed.Client(cluster, set_as_default=False)
    killed: list[str] = []

    def kill_one_mid_trial() -> None:
        """SIGKILL the process of the first worker seen running a trial task (no time assumed)."""
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline:
            busy = {w: keys for w, keys in watcher.processing().items() if any("trial-" in k for k in keys)}
            if busy:
                address = sorted(busy)[0]
                pids = watcher.run(os.getpid, workers=[address])
                time.sleep(0.5)  # let the trial process start its work
                os.kill(pids[address], signal.SIGKILL)
                killed.append(address)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=kill_one_mid_trial, daemon=True)
    thread.start()
    outcomes: list[pipeline.RunOutcome] = []
    run = threading.Thread(
        target=lambda: outcomes.append(
            bisect(tmp_path, repo, shas[6], config_mod.Executor("dask", cluster.scheduler_address))
        ),
        daemon=True,
    )
    try:
        run.start()
        run.join(timeout=600)
    finally:
        thread.join(timeout=5)
        watcher.close()
        cluster.close()
    assert killed, "no trial was seen running"
    assert outcomes, "the run did not end after the kill (a trial left waiting for the dead worker)"
    outcome = outcomes[0]
    # The killed trial was run again elsewhere, not stored as a crash; every stored trial ran to its end.
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        statuses = [r[0] for r in db.execute("SELECT status FROM trials")]
    assert statuses and set(statuses) == {"ok"}
    assert len(statuses) >= outcome.result.trials
    assert not stored_twice(tmp_path / "s.sqlite")
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        claims = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'claims'").fetchone()[0]
        left = db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] if claims else 0
    assert left == 0  # every claimed trial was stored (or given back): none is waiting for a dead worker


def timelines(store: Path) -> dict[tuple[str, int], dict]:
    """Each stored trial process's timeline, by (commit, slot)."""
    import json

    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT sha, slot, protocol FROM trials WHERE patch_hash IS NULL").fetchall()
    out = {}
    for sha, slot, protocol in rows:
        proto = json.loads(protocol or "{}")
        out[(sha, slot)] = proto.get("timeline") or {}
    return out


def test_held_trials_wait_set_up_on_the_workers_until_the_bot_opens_their_gate(tmp_path: Path, upstream) -> None:
    """With HOLD room (a JIT cache and `[protocol] prefetch`), the run holds standbys and spares on its
    workers, and sends a commit's later trials with its cold first one, each waiting at its gate:
    the same steps, trials the search took already set up, none on a device before its commit's
    first trial released it, nothing stored twice."""
    repo, shas = upstream
    text = cpu_config(
        "dask-hold",
        repo,
        gemm_subject(256),
        trials=3,
        max_trials=4,
        reps=5,
        min_step_pct=20.0,
        jit_cache_env=("BISECTOR_TEST_JIT",),
    ).replace("[thresholds]", "prefetch = 2\n[thresholds]")
    (tmp_path / "cfg.toml").write_text(text)
    cfg = replace(config_mod.load(tmp_path / "cfg.toml"), executor=config_mod.Executor("dask", "local"))
    options = pipeline.RunOptions(
        good=shas[1],
        bad="main",
        store=str(tmp_path / "s.sqlite"),
        work_dir=str(tmp_path / "work"),
        report_dir=str(tmp_path / "report"),
        verify_fixes=False,
        find_hunks=False,
    )
    outcome = pipeline.bisect(cfg, options)
    steps = {s.commit for s in outcome.result.steps}
    assert shas[4] in steps and steps <= {shas[4], shas[8]}
    assert not stored_twice(tmp_path / "s.sqlite")
    seen = timelines(tmp_path / "s.sqlite")
    # Standbys and spares: set up before the search asked for them, then unheld.
    assert [t for t in seen.values() if t.get("unheld")]
    # A later trial sent with its commit's first one: set up meanwhile, on a device only after it.
    early = 0
    for (sha, slot), t in seen.items():
        first = seen.get((sha, 0))
        if slot == 0 or first is None or t.get("go") is None:
            continue
        assert t["go"] >= first["release"] - 1e-3, (sha, slot)
        early += t["submitted"] < first["ended"]
    assert early


def test_a_later_trial_runs_while_every_hold_is_taken(tmp_path: Path, upstream) -> None:
    """A commit's later trial, sent gated with its first, takes a share of the GPU like any trial the
    search waits for, not the HOLD room: with that room filled by a standby never unheld, it still
    runs once its first has ended (it waited for good when it took HOLD: the one-H200 demo stalled)."""
    from bisector.runner.cluster import local_cluster
    from bisector.runner.dask_executor import DaskExecutor
    from bisector.runner.executor import TrialJob

    repo, shas = upstream
    (tmp_path / "cfg.toml").write_text(config(repo).replace("visible = [0, 1]", "visible = [0]"))
    cfg = config_mod.load(tmp_path / "cfg.toml")
    cluster = local_cluster([0], threads=2, holds=1)
    client = distributed.Client(cluster, set_as_default=False)
    executor = DaskExecutor(client, cfg, str(tmp_path / "work"), slots=2, cluster=cluster)
    try:
        executor.wait_for_devices(1)
        assert executor.can_hold
        build = executor.build(shas[2])
        standby = executor.submit(TrialJob(build, cfg.shapes, 7, slot=5, first=True, hold=True))
        first = executor.submit(TrialJob(build, cfg.shapes, 1, slot=0, first=True))
        later = executor.submit(TrialJob(build, cfg.shapes, 2, slot=1, after=first))
        outcome = later.result(timeout=240)
        assert first.done() and [r.status.value for r in outcome.records] == ["ok"]
        assert outcome.timeline.go >= first.result().timeline.release - 1e-3  # on the device after its first
        assert not standby.done()  # still held, set up, waiting at its gate
        executor.cancel(standby)
    finally:
        executor.close()

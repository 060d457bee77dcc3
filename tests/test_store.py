"""The result store on real SQLite files: round trips, migrations, concurrent writers, kill -9."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas
import pytest
from click.testing import CliRunner

from bisector.commands.store_cmd import command as store_command
from bisector.errors import EXIT_BAD_INPUT, BadInput, StoreError
from bisector.model import BuildResult, BuildStatus, Commit, Shape, TrialRecord, TrialStatus
from bisector.store import MissingStore, Store, default_path
from bisector.store.migrations import SCHEMA_VERSION, machine_hash

CAMPAIGN = "h200-triton:https://github.com/example/kernels"
SHAPES = (
    Shape("fa", "s4096", (("B", 2), ("D", 128), ("H", 32), ("S", 4096), ("causal", False), ("dtype", "bf16"))),
    Shape("gemm", "m8192", (("K", 8192), ("M", 8192), ("N", 8192), ("dtype", "fp16"), ("layout", "nn"))),
)
MACHINE = {
    "device": "NVIDIA H200",
    "driver": "570.86",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "cuda": "13.0",
    "sm_clock_mhz": 1980,
}


def record(sha: str, shape: str = "fa/s4096", n: int = 20, seed: int = 0, **kw: object) -> TrialRecord:
    """A trial whose samples are awkward floats, so a lossy round trip shows."""
    subject = tuple(1.0 / (3 + i + seed) + 1e-9 * i for i in range(n))
    control = tuple(math.pi / (7 + i + seed) for i in range(n))
    fields = dict(
        sha=sha,
        shape=shape,
        status=TrialStatus.OK,
        subject_ms=subject,
        control_ms=control,
        subject_tflops=477.123456789,
        control_tflops=673.1,
        ratio=0.7088,
        compile_s=1.25,
        max_abs_err=3.0e-4,
        max_rel_err=2.5e-4,
        telemetry={"before": {"temp_c": 41}, "after": {"temp_c": 55}},
        machine=MACHINE,
        protocol={"reps": n, "warmup": 3, "flush_mb": 512, "cold": True},
        started_at="2026-11-02T01:00:00+00:00",
        finished_at="2026-11-02T01:00:09+00:00",
    )
    fields.update(kw)
    return TrialRecord(**fields)  # type: ignore[arg-type]


def test_round_trip_keeps_every_raw_sample(tmp_path: Path) -> None:
    a, b = "a" * 40, "b" * 40
    records = [
        record(a, seed=1),
        record(a, "gemm/m8192", n=50, seed=2),
        record(b, seed=3),
        record(b, status=TrialStatus.WRONG, max_abs_err=7.5, error="mismatch", log_tail="line1\nline2"),
        record(b, patch_hash="p1", seed=4),
        record(
            b,
            status=TrialStatus.CRASH,
            subject_ms=(),
            control_ms=(),
            ratio=None,
            subject_tflops=None,
            error="illegal memory access",
        ),
    ]
    with Store(tmp_path / "r.sqlite") as store:
        store.add_trials(CAMPAIGN, records, shapes=SHAPES)
        store.add_trials("other", [record(a, seed=9)])
    with Store(tmp_path / "r.sqlite") as store:
        assert store.trials(CAMPAIGN) == records
        assert store.trials(CAMPAIGN, sha=a) == records[:2]
        assert store.trials(CAMPAIGN, sha=b, patch_hash=None) == [records[2], records[3], records[5]]
        assert store.trials(CAMPAIGN, patch_hash="p1") == [records[4]]
        assert store.trials(CAMPAIGN, status="wrong") == [records[3]]
        assert store.trials(CAMPAIGN, shape="gemm/m8192", status=TrialStatus.OK) == [records[1]]
        assert store.count_ok(CAMPAIGN, b, "fa/s4096") == 1
        assert store.count_ok(CAMPAIGN, b, "fa/s4096", patch_hash="p1") == 1
        assert store.count_ok(CAMPAIGN, a, "gemm/m8192") == 1
        assert store.count_ok(CAMPAIGN, a, "fa/s9999") == 0
        assert len(store.trials("other")) == 1
        frame = store.frame(CAMPAIGN)
    assert len(frame) == len(records)
    assert frame.loc[1, "subject_ms"] == list(records[1].subject_ms)
    assert frame.loc[0, "params"]["S"] == 4096 and frame.loc[0, "dtype"] == "bf16"
    assert frame.loc[1, "suite"] == "gemm" and frame.loc[1, "dtype"] == "fp16"
    assert list(frame["value"][:3]) == [0.7088] * 3
    # The clock is kept in the record but does not split one machine into two groups.
    assert frame["machine_hash"].nunique() == 1
    assert machine_hash({**MACHINE, "sm_clock_mhz": 1410}) == machine_hash(MACHINE)
    assert machine_hash({**MACHINE, "driver": "580.1"}) != machine_hash(MACHINE)


def test_add_trials_is_all_or_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.sqlite")
    bad = record(None)  # type: ignore[arg-type]  # violates NOT NULL on the second insert
    with pytest.raises(StoreError, match=r"NOT NULL constraint failed: trials.sha"):
        store.add_trials(CAMPAIGN, [record("c" * 40), bad])
    assert store.trials(CAMPAIGN) == []
    store.add_trials(CAMPAIGN, [record("c" * 40)])  # the connection is usable afterwards
    assert len(store.trials(CAMPAIGN)) == 1


def test_commits_builds_and_nights(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.sqlite")
    commits = [
        Commit("1" * 40, "2026-07-31T10:00:00+00:00", "ann", "Add trait (#950)", 950),
        Commit("2" * 40, "2026-08-17T10:00:00+00:00", "bob", "Move helpers", None),
    ]
    store.add_commits(CAMPAIGN, commits)
    store.add_commits(
        CAMPAIGN,
        [
            Commit("2" * 40, "2026-08-17T10:00:00+00:00", "bob", "Move helpers (#930)", 930),
            Commit("1" * 40, "2026-07-31T10:00:00+00:00", "ann", "Add trait (#950)", None),
        ],
    )
    assert store.commits(CAMPAIGN) == [commits[0], Commit("2" * 40, commits[1].date, "bob", "Move helpers (#930)", 930)]

    ok = BuildResult("1" * 40, BuildStatus.OK, "/src/1", prefix="/p/1", log_path="/l/1", seconds=12.5, cache_hit=True)
    failed = BuildResult("2" * 40, BuildStatus.FAILED, "/src/2", seconds=3.0, patch_hash="h", log_tail="error: x")
    store.add_build(CAMPAIGN, ok, "pip")
    store.add_build(CAMPAIGN, failed, "command")
    assert store.builds(CAMPAIGN) == [ok, failed]
    assert store.builds(CAMPAIGN, sha="2" * 40) == [failed]

    assert store.last_good_night(CAMPAIGN) is None
    store.record_night(CAMPAIGN, "2026-11-01", "1" * 40, {"steps": []})
    store.record_night(CAMPAIGN, "2026-11-02", "2" * 40, {"steps": [{"commit": "2" * 40}]}, good=False)
    assert store.last_good_night(CAMPAIGN) == ("2026-11-01", "1" * 40)
    store.record_night(CAMPAIGN, "2026-11-02", "2" * 40, {"steps": []}, good=True)  # re-run replaces
    assert store.last_good_night(CAMPAIGN) == ("2026-11-02", "2" * 40)
    assert [n.verdict for n in store.nights(CAMPAIGN)] == [{"steps": []}, {"steps": []}]
    assert store.last_good_night("other") is None

    store.add_trials(CAMPAIGN, [record("1" * 40), record("1" * 40, status=TrialStatus.TIMEOUT)])
    (counts,) = store.info().campaigns
    # one trial process (its slot unknown: by its start and log), two measurements of it stored
    assert (
        counts.commits,
        counts.builds,
        counts.trials,
        counts.measurements,
        counts.measurements_ok,
        counts.nights,
    ) == (2, 2, 1, 2, 1, 2)
    frame = store.frame()
    assert list(frame["commit_pr"]) == [950, 950] and list(frame["commit_author"]) == ["ann", "ann"]


# The schema as the first bisector release wrote it, spelled out here on purpose: if a migration
# in bisector/store/migrations.py is ever edited instead of appended, this file stops upgrading.
V1_SCHEMA = """
CREATE TABLE commits (campaign TEXT NOT NULL, sha TEXT NOT NULL, date TEXT, author TEXT, subject TEXT,
    pr INTEGER, PRIMARY KEY (campaign, sha));
CREATE TABLE builds (id INTEGER PRIMARY KEY, campaign TEXT NOT NULL, sha TEXT NOT NULL, patch_hash TEXT,
    recipe TEXT, status TEXT NOT NULL, seconds REAL, cache_hit INTEGER, source_dir TEXT, prefix TEXT,
    log_path TEXT, log_tail TEXT, created_at TEXT NOT NULL);
CREATE TABLE trials (id INTEGER PRIMARY KEY, campaign TEXT NOT NULL, sha TEXT NOT NULL, patch_hash TEXT,
    suite TEXT NOT NULL, shape TEXT NOT NULL, params TEXT NOT NULL, dtype TEXT, status TEXT NOT NULL,
    subject_ms TEXT NOT NULL, control_ms TEXT NOT NULL, subject_tflops REAL, control_tflops REAL,
    ratio REAL, compile_s REAL, max_abs_err REAL, max_rel_err REAL, error TEXT, log_tail TEXT,
    telemetry TEXT NOT NULL, machine TEXT NOT NULL, protocol TEXT NOT NULL, started_at TEXT, finished_at TEXT);
CREATE INDEX trials_lookup ON trials (campaign, sha, patch_hash, shape);
CREATE INDEX builds_lookup ON builds (campaign, sha, patch_hash);
PRAGMA user_version = 1;
"""


def test_migrates_a_v1_store_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?)", (CAMPAIGN, "f" * 40, "2026-08-06", "cy", "x", 974))
    conn.execute(
        "INSERT INTO trials (campaign, sha, patch_hash, suite, shape, params, dtype, status, subject_ms, control_ms,"
        " subject_tflops, control_tflops, ratio, compile_s, max_abs_err, max_rel_err, error, log_tail, telemetry,"
        " machine, protocol, started_at, finished_at)"
        " VALUES (?, ?, NULL, 'fa', 'fa/s4096', '{\"S\": 4096}', 'bf16', 'ok', '[1.5, 1.25]', '[1.0, 1.0]',"
        " 1256.7, 1252.0, 1.0037, 2.0, 0.0, 0.0, '', '', '{}', ?, '{\"reps\": 2}', 't0', 't1')",
        (CAMPAIGN, "f" * 40, json.dumps(MACHINE)),
    )
    conn.commit()
    conn.close()

    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 5
        (trial,) = store.trials(CAMPAIGN)
        assert trial.slot == 0  # v3: the old row is its commit's first trial process
        assert trial.subject_ms == (1.5, 1.25) and trial.control_ms == (1.0, 1.0)
        assert trial.ratio == 1.0037 and trial.machine == MACHINE and trial.protocol == {"reps": 2}
        # v4: an old trial has no kernel method, latency or host time (timed by events around each call)
        assert trial.kernel_method == "" and trial.latency_ratio is None and trial.subject_latency_ms == ()
        assert store.frame().loc[0, "machine_hash"] == machine_hash(MACHINE)  # back-filled
        assert store.commits(CAMPAIGN)[0].pr == 974
        store.record_night(CAMPAIGN, "2026-11-03", "f" * 40, {})  # the table v2 added
        store.add_trials(
            CAMPAIGN,
            [
                record(
                    "f" * 40,
                    kernel_method="cuda_graph",
                    latency_ratio=0.4,
                    subject_latency_ms=(0.1, 0.12),
                    control_latency_ms=(0.04, 0.05),
                    subject_host_ms=(0.09, 0.11, 0.1),
                    control_host_ms=(0.01,),
                )
            ],
        )
    with Store(path) as store:  # opening a current store changes nothing
        assert store.schema_version == 5 and len(store.trials(CAMPAIGN)) == 2
        new = store.trials(CAMPAIGN)[1]
        assert new.kernel_method == "cuda_graph" and new.latency_ratio == 0.4
        assert new.subject_latency_ms == (0.1, 0.12) and new.subject_host_ms == (0.09, 0.11, 0.1)
        assert new.control_latency_ms == (0.04, 0.05) and new.control_host_ms == (0.01,)
        assert store.rows()[1]["call_ms"]["subject_host_ms"] == [0.09, 0.11, 0.1]
        assert store.last_good_night(CAMPAIGN) == ("2026-11-03", "f" * 40)


def test_newer_or_foreign_files_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite"
    conn = sqlite3.connect(newer)
    conn.execute("CREATE TABLE trials (id INTEGER)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=rf"newer.sqlite: schema version {SCHEMA_VERSION + 1} is newer"):
        Store(newer)
    assert sqlite3.connect(newer).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1

    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not a database, just some text that is long enough " * 20)
    with pytest.raises(StoreError, match=r"junk.sqlite: file is not a database"):
        Store(junk)

    with pytest.raises(MissingStore, match=r"nowhere.sqlite: no such store") as info:
        Store(tmp_path / "nowhere.sqlite", create=False)
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert not (tmp_path / "nowhere.sqlite").exists()


def test_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BISECTOR_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if sys.platform.startswith("linux"):
        assert default_path() == tmp_path / "cache" / "bisector" / "results.sqlite"
        with Store() as store:
            assert store.path == default_path() and store.path.exists()
    monkeypatch.setenv("BISECTOR_STORE", str(tmp_path / "env.sqlite"))
    assert default_path() == tmp_path / "env.sqlite"


WRITER = textwrap.dedent("""
    import os, sys, time
    from bisector.model import TrialRecord, TrialStatus
    from bisector.store import Store
    path, worker, batches, size, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    while not os.path.exists(start):
        time.sleep(0.005)
    store = Store(path)
    for b in range(batches):
        sha = f"{worker}-{b}"
        store.add_trials("c", [TrialRecord(sha=sha, shape=f"fa/s{i}", status=TrialStatus.OK,
                                           subject_ms=tuple(b + i / 7 + k / 1000 for k in range(64)),
                                           control_ms=tuple(b - i / 3 for _ in range(64)), ratio=b / 7)
                               for i in range(size)])
        print(b, flush=True)
""")


def expected_samples(b: int, i: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return tuple(b + i / 7 + k / 1000 for k in range(64)), tuple(b - i / 3 for _ in range(64))


def check_batch(trials: list[TrialRecord], b: int, size: int) -> None:
    assert sorted(t.shape for t in trials) == sorted(f"fa/s{i}" for i in range(size))
    for t in trials:
        i = int(t.shape.removeprefix("fa/s"))
        assert (t.subject_ms, t.control_ms) == expected_samples(b, i) and t.ratio == b / 7


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def spawn(script: Path, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Four processes open a fresh store at the same instant (racing on the migration) and write."""
    script, path, start = tmp_path / "writer.py", tmp_path / "shared.sqlite", tmp_path / "go"
    script.write_text(WRITER)
    workers, batches, size = 4, 25, 4
    procs = [spawn(script, path, w, batches, size, start) for w in range(workers)]
    time.sleep(0.5)  # let the interpreters start, then release them together
    start.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.split() == [str(b) for b in range(batches)]
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert len(store.trials("c")) == workers * batches * size
        for w in range(workers):
            for b in range(batches):
                check_batch(store.trials("c", sha=f"{w}-{b}"), b, size)
    assert integrity(path) == "ok"


def killed_writer(tmp_path: Path, path: Path, size: int, batches: int) -> list[int]:
    """A writer process killed with SIGKILL somewhere after it reported `batches` batches of `size`
    trials; the batches it reported (each committed)."""
    script, start = tmp_path / "writer.py", tmp_path / "go"
    script.write_text(WRITER)
    start.touch()
    proc = spawn(script, path, "w", 100_000, size, start)
    assert proc.stdout is not None
    reported = []
    while len(reported) < batches:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "writer died"
        reported.append(int(line))
    time.sleep(random.uniform(0.0, 0.03))  # land anywhere in a later batch, not just after a print
    os.kill(proc.pid, signal.SIGKILL)
    reported += [int(line) for line in proc.stdout]  # printed before death: committed too
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert reported == list(range(len(reported)))
    return reported


def test_kill_9_keeps_every_committed_trial(tmp_path: Path) -> None:
    path, size = tmp_path / "killed.sqlite", 32
    reported = killed_writer(tmp_path, path, size, 40)

    assert integrity(path) == "ok"
    with Store(path) as store:
        stored = store.trials("c")
        for b in reported:
            check_batch(store.trials("c", sha=f"w-{b}"), b, size)
        # Batches committed after the last line we read are whole too: no transaction is half there.
        batches = sorted({int(t.sha.split("-")[1]) for t in stored})
        assert batches == list(range(len(batches))) and len(batches) >= len(reported)
        for b in batches[len(reported) :]:
            check_batch(store.trials("c", sha=f"w-{b}"), b, size)
        store.add_trials("c", [record("after-kill")])  # and the store takes writes again
    assert integrity(path) == "ok"


def test_export_csv_and_json_read_back(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    records = [record("a" * 40, seed=1), record("b" * 40, "gemm/m8192", n=5, ratio=float("nan"))]
    with Store(path) as store:
        store.add_trials(CAMPAIGN, records, shapes=SHAPES)
        store.add_trials("other", [record("c" * 40)])
        assert store.export("csv", tmp_path / "t.csv", campaign=CAMPAIGN) == 2
        assert store.export("csv", tmp_path / "b.csv", campaign=CAMPAIGN, shas=["b" * 40, "x"]) == 1
        assert list(store.frame(shas={"a" * 40, "c" * 40})["campaign"]) == [CAMPAIGN, "other"]
        buffer = io.StringIO()
        assert store.export("json", buffer) == 3
        with pytest.raises(BadInput, match="unknown export format 'xml'"):
            store.export("xml", buffer)

    frame = pandas.read_csv(tmp_path / "t.csv")
    assert list(frame["sha"]) == ["a" * 40, "b" * 40] and list(frame["shape"]) == ["fa/s4096", "gemm/m8192"]
    assert frame.loc[0, "value"] == 0.7088 and math.isnan(frame.loc[1, "value"])
    for row, rec in zip(frame.itertuples(), records):
        assert tuple(json.loads(row.subject_ms)) == rec.subject_ms
        assert tuple(json.loads(row.control_ms)) == rec.control_ms
    assert json.loads(frame.loc[1, "params"])["M"] == 8192
    assert json.loads(frame.loc[0, "machine"]) == MACHINE
    assert list(pandas.read_csv(tmp_path / "b.csv")["shape"]) == ["gemm/m8192"]

    rows = json.loads(buffer.getvalue())  # strict JSON: NaN became null
    assert [r["campaign"] for r in rows] == [CAMPAIGN, CAMPAIGN, "other"]
    assert rows[1]["value"] is None and rows[0]["subject_ms"] == list(records[0].subject_ms)
    assert pandas.DataFrame(rows).loc[0, "telemetry"] == dict(records[0].telemetry)


def test_cli_info_and_export(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with Store(path) as store:
        store.add_trials(CAMPAIGN, [record("a" * 40), record("a" * 40, status=TrialStatus.CRASH)])
        store.add_commits(CAMPAIGN, [Commit("a" * 40, "2026-08-01", "ann", "s", 1)])
    runner = CliRunner()
    result = runner.invoke(store_command, ["info", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert f"store: {path}" in result.output and f"schema version: {SCHEMA_VERSION}" in result.output
    line = next(x for x in result.output.splitlines() if x.startswith(CAMPAIGN))
    assert line.split()[1:] == ["1", "0", "1", "2", "1", "0"]
    result = runner.invoke(store_command, ["info", "--store", str(path), "--json"])
    assert json.loads(result.output)["campaigns"][0]["measurements_ok"] == 1

    out = tmp_path / "x.csv"
    result = runner.invoke(
        store_command, ["export", "--store", str(path), "--format", "csv", "--out", str(out), "--campaign", CAMPAIGN]
    )
    assert result.exit_code == 0, result.output
    assert list(pandas.read_csv(out)["status"]) == ["ok", "crash"]
    result = runner.invoke(store_command, ["export", "--store", str(path), "--format", "json"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 2

    result = runner.invoke(store_command, ["export", "--store", str(tmp_path / "none.sqlite")])
    assert result.exit_code == EXIT_BAD_INPUT
    assert result.output.strip() == f"error: {tmp_path / 'none.sqlite'}: no such store"


def test_copy_takes_the_trials_a_killed_writer_left_in_its_wal(tmp_path: Path) -> None:
    """`bisector store copy` after the bot was killed: its last trials sit in the -wal beside the file
    (no checkpoint ran), so a copy of the file alone lacks them; the command's copy has them all, in
    one file a run can resume from."""
    path, size = tmp_path / "live.sqlite", 4
    reported = killed_writer(tmp_path, path, size, 5)
    assert path.with_name("live.sqlite-wal").stat().st_size > 0

    plain = tmp_path / "plain.sqlite"
    plain.write_bytes(path.read_bytes())  # what `cp` of the store file alone carries
    with sqlite3.connect(plain) as conn:
        in_plain = (
            conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
            if conn.execute("SELECT name FROM sqlite_master WHERE name = 'trials'").fetchone()
            else 0
        )
    assert in_plain < len(reported) * size

    copied = tmp_path / "carry" / "copy.sqlite"
    cli = [sys.executable, "-m", "bisector", "store", "copy", "--store", str(path), "--out"]
    out = subprocess.run([*cli, str(copied)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count = int(out.stderr.split("copied ")[1].split()[0])
    assert count >= len(reported) * size
    assert not copied.with_name("copy.sqlite-wal").exists() and integrity(copied) == "ok"
    with sqlite3.connect(copied) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    with Store(copied) as store:  # a run resumes from the copy
        assert len(store.trials("c")) == count
        for b in reported:
            check_batch(store.trials("c", sha=f"w-{b}"), b, size)

    packed = tmp_path / "copy.sqlite.gz"
    assert subprocess.run([*cli, str(packed)], capture_output=True, text=True, timeout=120).returncode == 0
    (tmp_path / "unpacked.sqlite").write_bytes(gzip.decompress(packed.read_bytes()))
    with Store(tmp_path / "unpacked.sqlite", readonly=True) as store:
        assert len(store.trials("c")) == count

    again = subprocess.run([*cli, str(copied)], capture_output=True, text=True, timeout=120)
    assert again.returncode == EXIT_BAD_INPUT
    assert again.stderr.strip() == f"error: {copied}: exists; a store copy never overwrites a file"
    assert not list(tmp_path.glob("**/*.part*"))

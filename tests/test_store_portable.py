"""No path of this machine in what leaves it: the store itself, `store export`, trials.csv, the report
(issue 21); and a store written with the old, path-holding campaign key still resumes.

One real `bisector run` (a fresh process, real git upstream, real trials, real SQLite) over a
two-commit range; then the same store rewritten as an older bisector left it, and resumed.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from bisector.model import TrialRecord, TrialStatus
from bisector.store import Store, campaign_key
from bisector.store.campaigns import renamed, upstream_id
from bisector.store.migrations import MIGRATIONS, SCHEMA_VERSION
from tests.test_nightly import bisector, make_upstream, trial_count, write_config

# An absolute path under one of these (`../work`, a relative one, is not)
MACHINE = re.compile(r"(?<![\w.~<>-])/(?:tmp|home|root|work)\b")


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("portable")
    up = make_upstream(tmp / "upstream")
    cfg = write_config(tmp, str(tmp / "upstream"))
    out = bisector(
        tmp,
        "run",
        "--config",
        str(cfg),
        "--good",
        up["base"],
        "--bad",
        up["docs"],
        "--no-fixes",
        "--no-hunks",
        "--work-dir",
        str(tmp / "work"),
        "--report-dir",
        str(tmp / "report"),
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return {"tmp": tmp, "up": up, "cfg": cfg, "store": tmp / "store.sqlite"}


def machine_paths(text: str, tmp: Path) -> list[str]:
    return [m.group(0) for m in MACHINE.finditer(text)] + ([str(tmp)] if str(tmp) in text else [])


def store_text(path: Path) -> dict[str, str]:
    """Every value of every table, as text, by table."""
    out = {}
    with sqlite3.connect(path) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            out[table] = "\n".join(" ".join(map(str, row)) for row in db.execute(f"SELECT * FROM {table}"))
    return out


def test_the_store_holds_no_path_of_this_machine(ran: dict) -> None:
    tables = store_text(ran["store"])
    for table, text in tables.items():
        assert not machine_paths(text, ran["tmp"]), (table, text[:2000])
    with sqlite3.connect(ran["store"]) as db:
        assert {c for (c,) in db.execute("SELECT DISTINCT campaign FROM trials")} == {"trig:upstream"}
        builds = db.execute("SELECT source_dir, log_path FROM builds").fetchall()
    assert builds and all(src.startswith("<builds>/") and log.startswith("<builds>/") for src, log in builds), builds


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_store_export_trials_csv_and_report_hold_none_either(ran: dict, fmt: str) -> None:
    out = bisector(ran["tmp"], "store", "export", "--store", str(ran["store"]), "--format", fmt)
    assert out.returncode == 0 and out.stdout.count("trig:upstream") >= 6, out.stderr[-2000:]
    assert not machine_paths(out.stdout, ran["tmp"]), out.stdout[:3000]
    report = ran["tmp"] / "report"
    assert (report / "trials.csv.gz").is_file(), sorted(p.name for p in report.iterdir())
    for path in report.rglob("*"):
        if path.is_file() and path.suffix in (".md", ".csv", ".json"):
            assert not machine_paths(path.read_text(), ran["tmp"]), path
        elif path.name.endswith(".csv.gz"):
            assert not machine_paths(gzip.decompress(path.read_bytes()).decode(), ran["tmp"]), path


def test_an_offline_replay_finds_its_builds_again(ran: dict) -> None:
    out = bisector(
        ran["tmp"],
        "run",
        "--config",
        str(ran["cfg"]),
        "--good",
        ran["up"]["base"],
        "--bad",
        ran["up"]["docs"],
        "--offline",
        "--no-fixes",
        "--no-hunks",
        "--work-dir",
        str(ran["tmp"] / "work"),
        "--report-dir",
        str(ran["tmp"] / "offline"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Replayed offline" in (ran["tmp"] / "offline" / "report.md").read_text()


def test_a_store_with_the_old_campaign_key_resumes(ran: dict, tmp_path: Path) -> None:
    """As bisector wrote it before: the key held the upstream's absolute path, schema version 4."""
    old = tmp_path / "old.sqlite"
    shutil.copy(ran["store"], old)
    legacy = f"trig:{ran['tmp'] / 'upstream'}"
    with sqlite3.connect(old) as db:
        for table in ("commits", "builds", "trials", "nightly", "claims"):
            db.execute(f"UPDATE {table} SET campaign = ?", (legacy,))
        db.execute("PRAGMA user_version = 4")
    before = trial_count(old)
    out = bisector(
        ran["tmp"],
        "run",
        "--config",
        str(ran["cfg"]),
        "--good",
        ran["up"]["base"],
        "--bad",
        ran["up"]["docs"],
        "--no-fixes",
        "--no-hunks",
        "--store",
        str(old),
        "--work-dir",
        str(ran["tmp"] / "work"),
        "--report-dir",
        str(tmp_path / "report"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert trial_count(old) == before, "the resumed run measured again: its trials were not found"
    with sqlite3.connect(old) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert {c for (c,) in db.execute("SELECT DISTINCT campaign FROM trials")} == {"trig:upstream"}


def test_store_export_scrubs_rows_an_older_bisector_stored(tmp_path: Path) -> None:
    """Rows of a store written before the trial records were made portable kept absolute paths."""
    work = "/tmp/ci-7/work"
    rec = TrialRecord(
        sha="a" * 40,
        shape="gemm/m256",
        status=TrialStatus.CRASH,
        error=f"trial process ended; see {work}/trials/aaaa/001/log.txt",
        log_tail='File "/home/ada/src/lib/kern/ops.py", line 3, in mm\n'
        'File "/private/var/x/y/z.py", line 9\nFile "/work/wt/x/benches/trial.py", line 1',
        protocol={"log_path": f"{work}/trials/aaaa/001/log.txt", "jit": f"{work}/jit/aaaa"},
    )
    with Store(tmp_path / "s.sqlite") as store:
        store.add_trials("old:/home/ada/lib", [rec])
    for fmt in ("csv", "json"):
        out = bisector(tmp_path, "store", "export", "--store", str(tmp_path / "s.sqlite"), "--format", fmt)
        assert out.returncode == 0, out.stderr[-2000:]
        assert not machine_paths(out.stdout, tmp_path), out.stdout
    row = json.loads(out.stdout)[0]
    assert row["protocol"] == {"log_path": "trials/aaaa/001/log.txt", "jit": "jit/aaaa"}
    assert "…/kern/ops.py" in row["log_tail"] and "…/y/z.py" in row["log_tail"] and row["campaign"] == "old:…/lib"


@pytest.mark.parametrize(
    "repo, shown",
    [
        ("/tmp/x/upstream", "upstream"),
        ("/tmp/x/upstream/", "upstream"),
        ("file:///tmp/a%20b/lib", "lib"),
        ("../lib", "lib"),
        ("https://user:ghp_secret@github.com/org/lib.git?x=1", "https://github.com/org/lib.git"),
        ("git@github.com:org/lib.git", "git@github.com:org/lib.git"),
    ],
)
def test_a_campaign_names_its_upstream_without_a_machines_path(repo: str, shown: str) -> None:
    assert upstream_id(repo) == shown and renamed(f"cfg:{repo}") == f"cfg:{shown}"


def test_the_migration_renames_every_table_and_merges_two_checkouts(tmp_path: Path) -> None:
    """Schema 4 as the old bisector made it; two checkouts of one upstream (same config name) become
    one campaign, a commit they share stored once."""
    path = tmp_path / "v4.sqlite"
    with sqlite3.connect(path) as db:
        for step in MIGRATIONS[:4]:
            step(db)
        db.execute("PRAGMA user_version = 4")
        for key in ("cfg:/tmp/a/lib", "cfg:/home/b/lib"):
            db.execute("INSERT INTO commits (campaign, sha, subject) VALUES (?, ?, 's')", (key, "c" * 40))
            db.execute(
                "INSERT INTO builds (campaign, sha, status, created_at) VALUES (?, ?, 'ok', 'now')", (key, "c" * 40)
            )
            db.execute(
                "INSERT INTO nightly (campaign, date, sha, good, verdict, recorded_at) VALUES "
                "(?, '2026-01-01', ?, 1, '{}', 'now')",
                (key, "c" * 40),
            )
        db.execute(
            "INSERT INTO commits (campaign, sha, subject) VALUES ('x:https://github.com/o/r', ?, 's')", ("d" * 40,)
        )
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [c.campaign for c in store.info().campaigns] == ["cfg:lib", "x:https://github.com/o/r"]
        assert [c.sha for c in store.commits("cfg:lib")] == ["c" * 40]
        assert len(store.builds("cfg:lib")) == 2 and len(store.nights("cfg:lib")) == 1
    from bisector.config import parse

    cfg = parse(
        {
            "name": "cfg",
            "upstream": {"repo": "/anywhere/else/lib"},
            "device": {"kind": "cpu"},
            "control": {"backend": "torch"},
            "subject": {"gemm": {"entry": "k:mm", "adapter": "torch"}},
            "suites": {"gemm": {"shapes": [{"name": "a", "M": 8, "N": 8, "K": 8, "dtype": "fp32"}]}},
        },
        tmp_path / "c.toml",
    )
    assert campaign_key(cfg) == "cfg:lib"  # the same upstream moved: the same campaign

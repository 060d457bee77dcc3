"""Schema of the result store, as an ordered list of migrations.

`PRAGMA user_version` holds the number of migrations applied. A migration is appended, never
edited: a store written by an older bisector is upgraded in place when it is opened, and a store
written by a newer one is refused instead of being misread.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Mapping

from bisector.store.campaigns import renamed

Migration = Callable[[sqlite3.Connection], None]

# Keys of the machine fingerprint that vary from run to run on the same machine (current clocks,
# temperatures, ...): kept in the record, left out of the hash that groups trials by machine.
_VOLATILE = ("clock", "temp", "power", "util", "time", "memory_used", "fan")


def machine_hash(machine: Mapping[str, object]) -> str:
    """A short stable id of a machine fingerprint, blind to volatile readings such as clocks."""
    stable = {k: v for k, v in machine.items() if not any(word in k.lower() for word in _VOLATILE)}
    text = json.dumps(stable, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _script(conn: sqlite3.Connection, script: str) -> None:
    """Run statements one by one: `executescript` would COMMIT the caller's open transaction."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _v1(conn: sqlite3.Connection) -> None:
    """Commits, builds and trials with every raw sample."""
    _script(
        conn,
        """
        CREATE TABLE commits (
            campaign TEXT NOT NULL, sha TEXT NOT NULL, date TEXT, author TEXT, subject TEXT, pr INTEGER,
            PRIMARY KEY (campaign, sha));
        CREATE TABLE builds (
            id INTEGER PRIMARY KEY, campaign TEXT NOT NULL, sha TEXT NOT NULL, patch_hash TEXT,
            recipe TEXT, status TEXT NOT NULL, seconds REAL, cache_hit INTEGER, source_dir TEXT,
            prefix TEXT, log_path TEXT, log_tail TEXT, created_at TEXT NOT NULL);
        CREATE TABLE trials (
            id INTEGER PRIMARY KEY, campaign TEXT NOT NULL, sha TEXT NOT NULL, patch_hash TEXT,
            suite TEXT NOT NULL, shape TEXT NOT NULL, params TEXT NOT NULL, dtype TEXT,
            status TEXT NOT NULL, subject_ms TEXT NOT NULL, control_ms TEXT NOT NULL,
            subject_tflops REAL, control_tflops REAL, ratio REAL, compile_s REAL,
            max_abs_err REAL, max_rel_err REAL, error TEXT, log_tail TEXT,
            telemetry TEXT NOT NULL, machine TEXT NOT NULL, protocol TEXT NOT NULL,
            started_at TEXT, finished_at TEXT);
        CREATE INDEX trials_lookup ON trials (campaign, sha, patch_hash, shape);
        CREATE INDEX builds_lookup ON builds (campaign, sha, patch_hash);
        """,
    )


def _v2(conn: sqlite3.Connection) -> None:
    """Machine fingerprint hash for grouping, and the nightly trigger's state."""
    conn.execute("ALTER TABLE trials ADD COLUMN machine_hash TEXT")
    rows = conn.execute("SELECT id, machine FROM trials").fetchall()
    conn.executemany(
        "UPDATE trials SET machine_hash = ? WHERE id = ?",
        [(machine_hash(json.loads(machine or "{}")), id_) for id_, machine in rows],
    )
    _script(
        conn,
        """
        CREATE INDEX trials_machine ON trials (campaign, machine_hash);
        CREATE TABLE nightly (
            campaign TEXT NOT NULL, date TEXT NOT NULL, sha TEXT NOT NULL, good INTEGER NOT NULL,
            verdict TEXT NOT NULL, recorded_at TEXT NOT NULL,
            PRIMARY KEY (campaign, date));
        """,
    )


def _v3(conn: sqlite3.Connection) -> None:
    """Which trial process of its (commit, patch) a row came from, and claims on the next ones.

    Two runs on one store measured the same (commit, shape, seed) twice: each counted what was
    stored and started the same next trial. A run now claims a slot before it starts its trial;
    a claim held by a live process is waited for, one whose owner is gone is taken over. Old rows
    get their slot from their order: one process = one log file."""
    conn.execute("ALTER TABLE trials ADD COLUMN slot INTEGER")
    slots: dict[tuple[object, ...], dict[str, int]] = {}
    updates = []
    for id_, campaign, sha, patch, protocol in conn.execute(
        "SELECT id, campaign, sha, patch_hash, protocol FROM trials ORDER BY id"
    ).fetchall():
        log = str(json.loads(protocol or "{}").get("log_path") or id_)
        seen = slots.setdefault((campaign, sha, patch), {})
        updates.append((seen.setdefault(log, len(seen)), id_))
    conn.executemany("UPDATE trials SET slot = ? WHERE id = ?", updates)
    _script(
        conn,
        """
        CREATE TABLE claims (
            campaign TEXT NOT NULL, sha TEXT NOT NULL, patch_hash TEXT NOT NULL DEFAULT '', slot INTEGER NOT NULL,
            owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, claimed_at REAL NOT NULL,
            PRIMARY KEY (campaign, sha, patch_hash, slot));
        CREATE INDEX trials_slot ON trials (campaign, sha, patch_hash, slot);
        """,
    )


def _v4(conn: sqlite3.Connection) -> None:
    """Kernel time apart from call latency (issue 26): how each trial's kernel times were taken,
    the latency and host time per call as raw samples (JSON: subject_latency_ms, control_latency_ms,
    subject_host_ms, control_host_ms), and the latency ratio. Older rows keep NULL: their samples
    were timed by events around each call, and they have no latency to compare."""
    for column in ("kernel_method TEXT", "call_ms TEXT", "latency_ratio REAL"):
        conn.execute(f"ALTER TABLE trials ADD COLUMN {column}")


def _v5(conn: sqlite3.Connection) -> None:
    """Campaign keys without a path of this machine (bisector/store/campaigns.py): `demo:/tmp/x/upstream`
    becomes `demo:upstream` in every table, so a run of the same config resumes. Two old keys that
    now agree (one config, two checkouts of one upstream) are one campaign: their rows are kept,
    a commit's or a night's row once."""
    tables = ("commits", "builds", "trials", "nightly", "claims")
    old = {row[0] for table in tables for row in conn.execute(f"SELECT DISTINCT campaign FROM {table}")}
    for key in sorted(old):
        new = renamed(key)
        if new == key:
            continue
        for table in tables:
            conn.execute(f"UPDATE OR IGNORE {table} SET campaign = ? WHERE campaign = ?", (new, key))
            conn.execute(f"DELETE FROM {table} WHERE campaign = ?", (key,))  # a row the new key already had


MIGRATIONS: tuple[Migration, ...] = (_v1, _v2, _v3, _v4, _v5)
SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def pending(version: int) -> tuple[Migration, ...]:
    """The migrations a store at `version` still needs; empty when it is current."""
    return MIGRATIONS[version:]


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the store up to SCHEMA_VERSION inside the caller's write transaction.

    The caller holds `BEGIN IMMEDIATE`, so two processes opening a fresh file at once cannot
    both apply the same migration: the second one re-reads the version after the first commits.
    Returns the version found before migrating.
    """
    found = schema_version(conn)
    for number, step in enumerate(pending(found), start=found + 1):
        step(conn)
        conn.execute(f"PRAGMA user_version = {number:d}")
    return found

"""The result store: one SQLite file holding commits, builds, nights and every raw sample.

Why SQLite in WAL mode: several worker processes append trials at once, readers never block
writers, and a transaction that returned from COMMIT survives a `kill -9` of its writer. Every
write method is one `BEGIN IMMEDIATE ... COMMIT`, so a killed writer leaves whole batches or none.
Queries return the model's frozen dataclasses; `frame()` and `export()` are for pandas users.
"""

from __future__ import annotations

import csv
import enum
import gzip
import json
import math
import os
import shutil
import socket
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import platformdirs

from bisector.errors import BadInput, StoreError
from bisector.model import CALL_KEYS, BuildResult, BuildStatus, Commit, Shape, TrialRecord, TrialStatus
from bisector.paths import absolute
from bisector.store import campaigns
from bisector.store.migrations import SCHEMA_VERSION, machine_hash, migrate, schema_version
from bisector.store.totals import CampaignCounts, StoreInfo, campaign_processes

if TYPE_CHECKING:
    import pandas

    from bisector.config import Config

BUSY_TIMEOUT_S = 60.0
FORMATS = ("csv", "json")

# One row per trial in frame() and export(): `value` (= ratio) is what `bisector analyze` reads.
COLUMNS = (
    "id",
    "campaign",
    "sha",
    "shape",
    "value",
    "status",
    "patch_hash",
    "suite",
    "dtype",
    "params",
    "subject_ms",
    "control_ms",
    "subject_tflops",
    "control_tflops",
    "ratio",
    "compile_s",
    "max_abs_err",
    "max_rel_err",
    "error",
    "log_tail",
    "machine_hash",
    "machine",
    "protocol",
    "telemetry",
    "started_at",
    "finished_at",
    "commit_date",
    "commit_author",
    "commit_subject",
    "commit_pr",
    "kernel_method",
    "call_ms",
    "latency_ratio",
)
_JSON_COLUMNS = ("params", "subject_ms", "control_ms", "machine", "protocol", "telemetry", "call_ms")
_SELECT = (
    "SELECT t.id, t.campaign, t.sha, t.shape, t.ratio AS value, t.status, t.patch_hash, t.suite, t.dtype,"
    " t.params, t.subject_ms, t.control_ms, t.subject_tflops, t.control_tflops, t.ratio, t.compile_s,"
    " t.max_abs_err, t.max_rel_err, t.error, t.log_tail, t.machine_hash, t.machine, t.protocol,"
    " t.telemetry, t.started_at, t.finished_at, c.date AS commit_date, c.author AS commit_author,"
    " c.subject AS commit_subject, c.pr AS commit_pr, t.kernel_method, t.call_ms, t.latency_ratio"
    " FROM trials t LEFT JOIN commits c ON c.campaign = t.campaign AND c.sha = t.sha"
)


class MissingStore(StoreError, BadInput):
    """The user named a store file that does not exist (exit code 2)."""


class NotAStore(StoreError, BadInput):
    """The user named a file that is not a bisector store: not SQLite, damaged or truncated, or
    another program's database (exit code 2). The file is left exactly as it was."""


# SQLite's primary result codes for a file that is not a database or is damaged.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
# What each schema version must hold; a file without them is another program's database.
_TABLES = {1: {"commits", "builds", "trials"}, 2: {"commits", "builds", "trials", "nightly"}}


class _Any(enum.Enum):
    ANY = "any"


ANY = _Any.ANY  # "do not filter on patch_hash" (None means: unpatched trials only)


@dataclass(frozen=True)
class Night:
    """One nightly run of a campaign: the newest commit it measured and what it concluded."""

    date: str
    sha: str
    good: bool
    verdict: Mapping[str, object]


@dataclass(frozen=True)
class Claims:
    mine: tuple[int, ...]  # slots this run now measures
    theirs: tuple[int, ...]  # slots another live run is measuring: wait for their rows


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot (with the pid, it names one process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().decode(errors="replace").rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: this host, this process (pid and start time: a reused pid is not us)."""

    host: str
    pid: int
    started: str

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}:{self.started}"

    @classmethod
    def me(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), _start_time(os.getpid()))

    def alive(self, host: str, pid: int, key: str, claimed_at: float, lease_s: float) -> bool:
        """Whether another claim's owner may still deliver: on this host, its process exists as it
        was; elsewhere, its lease has not run out."""
        if host != self.host:
            return time.time() - claimed_at < lease_s
        return key == f"{host}:{pid}:{_start_time(pid)}" and _start_time(pid) != ""


def default_path() -> Path:
    """`$BISECTOR_STORE`, else results.sqlite in the user's cache dir."""
    env = os.environ.get("BISECTOR_STORE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("bisector")) / "results.sqlite"


def campaign_key(config: Config) -> str:
    """Results are comparable within one config measuring one upstream (bisector/store/campaigns.py:
    no path of this machine in it)."""
    return campaigns.campaign_key(config.name, config.upstream.repo)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _status(value: TrialStatus | str) -> str:
    return value.value if isinstance(value, TrialStatus) else TrialStatus(value).value


class Store:
    """A handle on one store file; safe to share between threads of one process."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True, readonly: bool = False) -> None:
        """readonly: for commands that only read (`store info`, `store export`, `plan --from-store`):
        the file is opened with SQLite's read-only mode (immutable when no writer has a -wal beside
        it: read-only mode would create -wal and -shm files), so neither its journal mode nor its
        tables can change, and no file appears. A store of an older schema is refused, not
        upgraded: a file whose tables merely look like ours may be another program's."""
        self.path = Path(absolute(path) if path is not None else absolute(default_path()))
        self.readonly = readonly
        if self.path.is_dir():
            raise NotAStore(f"{self.path}: is a directory, not a store file")
        if not self.path.exists():
            if not create or readonly:
                raise MissingStore(f"{self.path}: no such store")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._connect()
        try:
            self._open()
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> None:
        with self._errors():
            if self.readonly:
                live = self.path.with_name(self.path.name + "-wal").exists()
                uri = f"file:{urllib.parse.quote(str(self.path))}?{'mode=ro' if live else 'immutable=1'}"
                self._conn = sqlite3.connect(
                    uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
            else:
                self._conn = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )

    def _open(self) -> None:
        with self._errors():
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version, tables = self._identity()
            self._check_version(version)
            self._check_is_ours(version, tables)
            if self.readonly and version < SCHEMA_VERSION:
                raise NotAStore(
                    f"{self.path}: schema version {version}, older than this bisector's "
                    f"({SCHEMA_VERSION}); reading commands never upgrade a store (a run with it does); "
                    "it was left unchanged"
                )
            if self.readonly:
                return
            self._switch_to_wal()
            # FULL: a COMMIT that returned is on disk, not only in the OS cache.
            self._conn.execute("PRAGMA synchronous = FULL")
        if schema_version(self._conn) < SCHEMA_VERSION:
            with self._write() as conn:
                version = schema_version(conn)
                self._check_version(version)
                self._check_is_ours(version, _tables(conn))
                migrate(conn)

    def _identity(self) -> tuple[int, set[str]]:
        """Schema version and tables, read in one transaction: a store being created by another
        process at this moment is seen either empty or complete, never half-way."""
        self._conn.execute("BEGIN")
        try:
            return schema_version(self._conn), _tables(self._conn)
        finally:
            self._conn.execute("COMMIT")

    def _check_is_ours(self, version: int, tables: set[str]) -> None:
        """Refuse another program's SQLite file before anything is written to it: opening one
        used to add bisector's tables and switch it to WAL."""
        if version == 0:
            if tables:
                names = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise NotAStore(
                    f"{self.path}: not a bisector store (an SQLite database with tables {names}); it was left unchanged"
                )
            if self.readonly:
                raise NotAStore(f"{self.path}: not a bisector store (an empty file)")
            return
        missing = _TABLES.get(version, set()) - tables
        if missing:
            raise NotAStore(
                f"{self.path}: not a bisector store (schema version {version} but no "
                f"{', '.join(sorted(missing))} table); it was left unchanged"
            )

    def _switch_to_wal(self) -> None:
        """Switching the journal mode needs a moment alone with the file, and SQLite can answer
        "database is locked" at once, busy timeout or not, while other processes open it too."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _check_version(self, found: int) -> None:
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {found} is newer than this bisector's "
                f"({SCHEMA_VERSION}); upgrade bisector or use another store"
            )

    @property
    def schema_version(self) -> int:
        with self._lock, self._errors():
            return schema_version(self._conn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
            if code == _SQLITE_NOTADB or "not a database" in str(exc):
                raise NotAStore(
                    f"{self.path}: file is not a database (not an SQLite file, or its header "
                    "is damaged); name another store"
                ) from None
            if code == _SQLITE_CORRUPT or "malformed" in str(exc):
                raise NotAStore(
                    f"{self.path}: database disk image is malformed (the file is damaged or "
                    "truncated); name another store or restore a copy"
                ) from None
            raise StoreError(f"{self.path}: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock up front so it cannot deadlock later."""
        with self._lock, self._errors():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock, self._errors():
            cursor = self._conn.cursor()
            cursor.row_factory = sqlite3.Row
            return cursor.execute(sql, args).fetchall()

    # -- commits and builds ------------------------------------------------------------------

    def add_commits(self, campaign: str, commits: Sequence[Commit]) -> None:
        """Insert or refresh commit metadata (a re-run may learn a PR number it lacked)."""
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO commits (campaign, sha, date, author, subject, pr) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (campaign, sha) DO UPDATE SET date = excluded.date, author = excluded.author,"
                " subject = excluded.subject, pr = COALESCE(excluded.pr, commits.pr)",
                [(campaign, c.sha, c.date, c.author, c.subject, c.pr) for c in commits],
            )

    def commits(self, campaign: str) -> list[Commit]:
        rows = self._query(
            "SELECT sha, date, author, subject, pr FROM commits WHERE campaign = ? ORDER BY date, sha", (campaign,)
        )
        return [
            Commit(sha=r["sha"], date=r["date"], author=r["author"], subject=r["subject"], pr=r["pr"]) for r in rows
        ]

    def add_build(self, campaign: str, build: BuildResult, recipe: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO builds (campaign, sha, patch_hash, recipe, status, seconds, cache_hit, source_dir,"
                " prefix, log_path, log_tail, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    campaign,
                    build.sha,
                    build.patch_hash,
                    recipe,
                    build.status.value,
                    build.seconds,
                    int(build.cache_hit),
                    build.source_dir,
                    build.prefix,
                    build.log_path,
                    build.log_tail,
                    _now(),
                ),
            )

    def builds(self, campaign: str, sha: str | None = None) -> list[BuildResult]:
        """Every build attempt, oldest first."""
        sql, args = "SELECT * FROM builds WHERE campaign = ?", [campaign]
        if sha is not None:
            sql, args = sql + " AND sha = ?", [*args, sha]
        return [
            BuildResult(
                sha=r["sha"],
                status=BuildStatus(r["status"]),
                source_dir=r["source_dir"],
                prefix=r["prefix"],
                log_path=r["log_path"],
                seconds=r["seconds"],
                cache_hit=bool(r["cache_hit"]),
                patch_hash=r["patch_hash"],
                log_tail=r["log_tail"],
            )
            for r in self._query(sql + " ORDER BY id", args)
        ]

    # -- trials ------------------------------------------------------------------------------

    def add_trials(
        self, campaign: str, records: Sequence[TrialRecord], shapes: Mapping[str, Shape] | Sequence[Shape] = ()
    ) -> None:
        """Append trials in one transaction: all of them are committed, or none.

        `shapes` (by key) fills the params and dtype columns; TrialRecord names its shape by key only.
        """
        by_key = shapes if isinstance(shapes, Mapping) else {s.key: s for s in shapes}
        rows = []
        for r in records:
            shape = by_key.get(r.shape)
            params = shape.as_dict() if shape is not None else {}
            rows.append(
                (
                    campaign,
                    r.sha,
                    r.patch_hash,
                    r.shape.split("/", 1)[0],
                    r.shape,
                    _dumps(params),
                    params.get("dtype"),
                    _status(r.status),
                    _dumps(list(r.subject_ms)),
                    _dumps(list(r.control_ms)),
                    r.subject_tflops,
                    r.control_tflops,
                    r.ratio,
                    r.compile_s,
                    r.max_abs_err,
                    r.max_rel_err,
                    r.error,
                    r.log_tail,
                    _dumps(dict(r.telemetry)),
                    _dumps(dict(r.machine)),
                    machine_hash(r.machine),
                    _dumps(dict(r.protocol)),
                    r.started_at,
                    r.finished_at,
                    r.slot,
                    r.kernel_method or None,
                    _call_ms(r),
                    r.latency_ratio,
                )
            )
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO trials (campaign, sha, patch_hash, suite, shape, params, dtype, status, subject_ms,"
                " control_ms, subject_tflops, control_tflops, ratio, compile_s, max_abs_err, max_rel_err, error,"
                " log_tail, telemetry, machine, machine_hash, protocol, started_at, finished_at, slot,"
                " kernel_method, call_ms, latency_ratio)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            conn.executemany(
                "DELETE FROM claims WHERE campaign = ? AND sha = ? AND patch_hash = ? AND slot = ?",
                sorted({(campaign, r.sha, r.patch_hash or "", r.slot) for r in records if r.slot is not None}),
            )

    # -- claims: one writer per trial ----------------------------------------------------------

    def claim(
        self, campaign: str, sha: str, patch_hash: str | None, need: int, owner: Owner, lease_s: float = 6 * 3600
    ) -> Claims:
        """Claim slots for `need` more trial processes of (sha, patch), counting those another live
        run is measuring now (`theirs`: wait for them rather than measure the same trial twice).
        Claims of owners that are gone (a dead pid on this host, or older than `lease_s`) are
        taken over. The slots are the lowest free ones, so a resumed run draws the same seeds."""
        patch = patch_hash or ""
        with self._write() as conn:
            stored = {
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT slot FROM trials"
                    " WHERE campaign = ? AND sha = ? AND patch_hash IS ? AND slot IS NOT NULL",
                    (campaign, sha, patch_hash),
                )
            }
            theirs, mine_before = [], []
            for slot, who, host, pid, at in conn.execute(
                "SELECT slot, owner, host, pid, claimed_at FROM claims WHERE campaign = ? AND sha = ? AND"
                " patch_hash = ?",
                (campaign, sha, patch),
            ).fetchall():
                if who == owner.key:
                    mine_before.append(slot)
                elif slot not in stored and owner.alive(host, pid, who, at, lease_s):
                    theirs.append(slot)
                else:
                    conn.execute(
                        "DELETE FROM claims WHERE campaign = ? AND sha = ? AND patch_hash = ? AND slot = ?",
                        (campaign, sha, patch, slot),
                    )
            taken = stored | set(theirs) | set(mine_before)
            mine: list[int] = []
            slot = 0
            while len(mine) < need - len(theirs):
                if slot not in taken:
                    mine.append(slot)
                slot += 1
            now = time.time()
            conn.executemany(
                "INSERT OR REPLACE INTO claims (campaign, sha, patch_hash, slot, owner, host, pid,"
                " claimed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(campaign, sha, patch, k, owner.key, owner.host, owner.pid, now) for k in mine],
            )
        return Claims(tuple(mine), tuple(sorted(theirs)))

    def unclaim(self, campaign: str, sha: str, patch_hash: str | None, slots: Sequence[int], owner: Owner) -> None:
        """Give back claims whose trials will not be stored (the run stopped or the trial failed to start)."""
        with self._write() as conn:
            conn.executemany(
                "DELETE FROM claims WHERE campaign = ? AND sha = ? AND patch_hash = ? AND slot = ? AND owner = ?",
                [(campaign, sha, patch_hash or "", k, owner.key) for k in slots],
            )

    def trials(
        self,
        campaign: str,
        sha: str | None = None,
        shape: str | None = None,
        patch_hash: str | _Any | None = ANY,
        status: TrialStatus | str | None = None,
    ) -> list[TrialRecord]:
        """Trials in the order they were stored. patch_hash=None selects unpatched trials only."""
        sql = "SELECT * FROM trials WHERE campaign = ?"
        args: list[str | None] = [campaign]
        for column, value in (("sha", sha), ("shape", shape)):
            if value is not None:
                sql, args = sql + f" AND {column} = ?", [*args, value]
        if patch_hash is not ANY:
            sql, args = sql + " AND patch_hash IS ?", [*args, patch_hash]
        if status is not None:
            sql, args = sql + " AND status = ?", [*args, _status(status)]
        return [_record(r) for r in self._query(sql + " ORDER BY id", args)]

    def count_ok(self, campaign: str, sha: str, shape: str, patch_hash: str | None = None) -> int:
        """OK trials of one (commit, patch, shape): what a resumed probe already has."""
        row = self._query(
            "SELECT COUNT(*) FROM trials WHERE campaign = ? AND sha = ? AND shape = ?"
            " AND patch_hash IS ? AND status = ?",
            (campaign, sha, shape, patch_hash, TrialStatus.OK.value),
        )
        return int(row[0][0])

    def rows(self, campaign: str | None = None, shas: Collection[str] | None = None) -> list[dict[str, Any]]:
        """One dict per trial (COLUMNS), JSON columns decoded, joined with commit metadata."""
        sql, args = _SELECT, []
        if campaign is not None:
            sql, args = sql + " WHERE t.campaign = ?", [campaign]
        out = []
        wanted = set(shas) if shas is not None else None
        for row in self._query(sql + " ORDER BY t.id", args):
            if wanted is not None and row["sha"] not in wanted:
                continue
            item = dict(row)
            for column in _JSON_COLUMNS:
                item[column] = json.loads(item[column]) if item[column] is not None else None
            out.append(item)
        return out

    def frame(self, campaign: str | None = None, shas: Collection[str] | None = None) -> pandas.DataFrame:
        """One row per trial with the raw samples as lists."""
        import pandas

        return pandas.DataFrame(self.rows(campaign, shas), columns=list(COLUMNS))

    def export(
        self,
        fmt: str,
        out: str | Path | TextIO,
        campaign: str | None = None,
        shas: Collection[str] | None = None,
        portable: Callable[[Any], Any] | None = None,
    ) -> int:
        """Write trials as CSV (JSON columns as JSON strings) or a JSON array; returns the count.
        `portable` rewrites each row's values (bisector/portable.py: no path of this machine). A path
        ending in `.gz` is gzipped: raw repetitions compress ~6x, and a report's files are committed
        and posted."""
        if fmt not in FORMATS:
            raise BadInput(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
        rows = self.rows(campaign, shas)
        if portable is not None:
            rows = [portable(row) for row in rows]
        if isinstance(out, (str, Path)):
            opener = gzip.open if str(out).endswith(".gz") else open
            with opener(out, "wt", newline="", encoding="utf-8") as handle:
                _write_rows(fmt, rows, handle)
        else:
            _write_rows(fmt, rows, out)
        return len(rows)

    def copy(self, dest: str | Path) -> int:
        """Copy the whole store into one new file with SQLite's online backup, consistent while a run
        writes to it; returns the copy's trial count. Why not `cp`: the latest trials of a running or
        killed bot sit in the `-wal` beside the file until a checkpoint, and a copy of the file alone
        lacks them (an H200 demo's store copied so after its bot was killed held its trials to 336 s
        of 440). The copy is in rollback-journal mode, one file to carry (a run resumed from it switches
        it back); a name ending in `.gz` is gzipped. An existing file is never overwritten."""
        target = Path(absolute(dest))
        if target.exists():
            raise BadInput(f"{target}: exists; a store copy never overwrites a file")
        target.parent.mkdir(parents=True, exist_ok=True)
        db, packed = target.with_name(target.name + ".part"), target.with_name(target.name + ".gz.part")
        db.unlink(missing_ok=True)  # a killed copy's
        try:
            with self._lock, self._errors():
                out = sqlite3.connect(db)
                try:
                    self._conn.backup(out)
                    out.execute("PRAGMA journal_mode = DELETE")
                    count = int(out.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
                finally:
                    out.close()
            if target.name.endswith(".gz"):
                with open(db, "rb") as raw, gzip.open(packed, "wb") as zipped:
                    shutil.copyfileobj(raw, zipped)
                packed.replace(target)
            else:
                db.replace(target)
        finally:
            db.unlink(missing_ok=True)
            packed.unlink(missing_ok=True)
        return count

    # -- nightly -----------------------------------------------------------------------------

    def record_night(
        self, campaign: str, date: str, sha: str, verdict: Mapping[str, object], good: bool = True
    ) -> None:
        """Remember one night; re-running a night replaces it. Only good nights become baselines."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO nightly (campaign, date, sha, good, verdict, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (campaign, date, sha, int(good), _dumps(dict(verdict)), _now()),
            )

    def last_good_night(self, campaign: str) -> tuple[str, str] | None:
        rows = self._query(
            "SELECT date, sha FROM nightly WHERE campaign = ? AND good = 1 ORDER BY date DESC LIMIT 1", (campaign,)
        )
        return (rows[0]["date"], rows[0]["sha"]) if rows else None

    def nights(self, campaign: str) -> list[Night]:
        rows = self._query("SELECT date, sha, good, verdict FROM nightly WHERE campaign = ? ORDER BY date", (campaign,))
        return [Night(r["date"], r["sha"], bool(r["good"]), json.loads(r["verdict"])) for r in rows]

    # -- summary -----------------------------------------------------------------------------

    def info(self) -> StoreInfo:
        counts: dict[str, dict[str, int]] = {}
        for table, name, extra in (
            ("commits", "commits", ""),
            ("builds", "builds", ""),
            ("nightly", "nightly", ""),
            ("trials", "measurements", ""),
            ("trials", "measurements_ok", " WHERE status = 'ok'"),
        ):
            for row in self._query(f"SELECT campaign, COUNT(*) FROM {table}{extra} GROUP BY campaign"):
                counts.setdefault(row[0], {})[name] = int(row[1])
        processes = campaign_processes(
            self._query(
                "SELECT campaign, sha, patch_hash, slot, started_at, "
                "CASE WHEN slot IS NULL THEN protocol END FROM trials"
            )
        )
        campaigns = tuple(
            CampaignCounts(
                campaign=name,
                commits=c.get("commits", 0),
                builds=c.get("builds", 0),
                trials=processes.get(name, 0),
                measurements=c.get("measurements", 0),
                measurements_ok=c.get("measurements_ok", 0),
                nights=c.get("nightly", 0),
            )
            for name, c in sorted(counts.items())
        )
        return StoreInfo(path=str(self.path), schema_version=self.schema_version, campaigns=campaigns)


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {r[0] for r in rows if not r[0].startswith("sqlite_")}


def _call_ms(r: TrialRecord) -> str | None:
    lists = {k: list(getattr(r, k)) for k in CALL_KEYS if getattr(r, k)}
    return _dumps(lists) if lists else None


def _record(r: sqlite3.Row) -> TrialRecord:
    calls = json.loads(r["call_ms"]) if r["call_ms"] else {}
    return TrialRecord(
        sha=r["sha"],
        shape=r["shape"],
        status=TrialStatus(r["status"]),
        subject_ms=tuple(json.loads(r["subject_ms"])),
        control_ms=tuple(json.loads(r["control_ms"])),
        subject_tflops=r["subject_tflops"],
        control_tflops=r["control_tflops"],
        ratio=r["ratio"],
        compile_s=r["compile_s"],
        max_abs_err=r["max_abs_err"],
        max_rel_err=r["max_rel_err"],
        error=r["error"] or "",
        log_tail=r["log_tail"] or "",
        telemetry=json.loads(r["telemetry"]),
        machine=json.loads(r["machine"]),
        protocol=json.loads(r["protocol"]),
        patch_hash=r["patch_hash"],
        started_at=r["started_at"] or "",
        finished_at=r["finished_at"] or "",
        slot=r["slot"],
        kernel_method=r["kernel_method"] or "",
        latency_ratio=r["latency_ratio"],
        **{k: tuple(calls.get(k) or ()) for k in CALL_KEYS},
    )


def _finite(value: Any) -> Any:
    """Strict JSON has no NaN or Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _write_rows(fmt: str, rows: list[dict[str, Any]], out: TextIO) -> None:
    if fmt == "json":
        json.dump([_finite(row) for row in rows], out, indent=1, allow_nan=False)
        out.write("\n")
        return
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (_dumps(v) if k in _JSON_COLUMNS and v is not None else v) for k, v in row.items()})

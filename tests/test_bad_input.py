"""Every bad input is answered by the real CLI, in a fresh process, with exit 2 and one line
`error: ...` naming the file, key or ref, and changes nothing.

Each case here raised a traceback, exited 1, printed a garbled message, or (another program's
SQLite file) was modified, before it was fixed.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bisector.model import Commit, TrialRecord, TrialStatus
from bisector.store import Store
from tests.gitfixtures import squash_history

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """name = "bad-input"
[upstream]
repo = "{repo}"
[device]
kind = "cpu"
[control]
backend = "torch"
[subject.fa]
entry = "lib:attn"
adapter = "torch"
[[suites.fa.shapes]]
name = "s128"
B = 1
H = 2
S = 128
D = 64
dtype = "fp32"
"""


def env(tmp: Path) -> dict[str, str]:
    out = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
    out.pop("BISECTOR_STORE", None)
    return out


def bisector(tmp: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args],
        capture_output=True,
        text=True,
        env=env(tmp),
        cwd=cwd or tmp,
        timeout=300,
    )


def one_line_error(out: subprocess.CompletedProcess[str], *names: str, code: int = 2) -> str:
    """The single stderr line of a refused input; it must name each of `names`."""
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("bad") / "upstream"
    return repo, squash_history(repo, n=4)


def write_config(tmp: Path, repo: object, text: str = CONFIG) -> Path:
    path = tmp / "c.toml"
    path.write_text(text.format(repo=repo))
    return path


def test_tolerance_given_as_a_string(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "/tmp/x", CONFIG + '[thresholds]\ntolerances = {{ fa = ["tight", 0.01] }}\n')
    line = one_line_error(bisector(tmp_path, "check-config", str(cfg)), str(cfg), "thresholds.tolerances.fa")
    assert line.endswith("must be [atol, rtol], two numbers >= 0, got ['tight', 0.01]")


def test_non_utf8_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(CONFIG.format(repo="/tmp/x").encode() + b'description = "caf\xe9"\n')
    line = one_line_error(bisector(tmp_path, "check-config", str(cfg)), str(cfg))
    assert line.endswith("not UTF-8 text (byte 0xe9 on line 18)")


def test_non_utf8_step_model(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    model = tmp_path / "model.toml"
    model.write_bytes(b"[shapes]\nfa_s4096 = 480.0 # \xff\n")
    out = bisector(
        tmp_path, "simulate", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--model", str(model)
    )
    assert one_line_error(out, str(model)).endswith("not UTF-8 text (byte 0xff on line 2)")


def test_non_utf8_patch_file(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    cfg = write_config(tmp_path, repo)
    patch = tmp_path / "fix.diff"
    patch.write_bytes(
        b"diff --git a/lib.py b/lib.py\n--- a/lib.py\n+++ b/lib.py\n@@ -1 +1 @@\n-value = 3\n+value = '\xe9'\n"
    )
    out = bisector(tmp_path, "build", "--config", str(cfg), "--patch", "fix.diff", "--cache-dir", "builds", shas[0])
    assert one_line_error(out, str(patch)).endswith("not UTF-8 text (byte 0xe9 on line 6)")
    assert not (tmp_path / "builds").exists()  # refused before anything was built


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_demo_dir_naming_a_file(tmp_path: Path, where: str) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    given = "notes.txt" if where == "file" else "notes.txt/demo"
    line = one_line_error(bisector(tmp_path, "demo", "--dir", given), str(tmp_path / given), "--dir")
    assert "not a directory" in line
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["notes.txt"]


@pytest.mark.parametrize("given", ["a,1", "0,0", ","])
def test_demo_visible_devices_that_are_not_a_list_of_indices(tmp_path: Path, given: str) -> None:
    line = one_line_error(
        bisector(tmp_path, "demo", "--device", "cpu", "--dir", "d", "--visible", given), "--visible", repr(given)
    )
    assert "device indices" in line or "named twice" in line
    assert not (tmp_path / "d").exists()  # refused before the demo repository was written


def make_store(path: Path) -> None:
    with Store(path) as store:
        store.add_commits("c", [Commit("a" * 40, "2026-08-01", "ann", "s", 1)])
        store.add_trials(
            "c",
            [
                TrialRecord(
                    sha=f"{i:040x}",
                    shape="fa/s128",
                    status=TrialStatus.OK,
                    subject_ms=tuple(float(k) for k in range(300)),
                    control_ms=tuple(float(k) for k in range(300)),
                    ratio=1.0,
                )
                for i in range(200)
            ],
        )
    with sqlite3.connect(path) as conn:  # everything in the main file, as after a clean close
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real store truncated to half, a header-only piece, and text that is not SQLite at all."""
    root = tmp_path_factory.mktemp("stores")
    whole = root / "whole.sqlite"
    make_store(whole)
    data = whole.read_bytes()
    assert len(data) > 100_000
    out = {"truncated": root / "truncated.sqlite", "header": root / "header.sqlite", "text": root / "text.sqlite"}
    out["truncated"].write_bytes(data[: len(data) // 2])
    out["header"].write_bytes(data[:100])
    out["text"].write_text("these are my notes, not a database\n" * 50)
    return out


READERS = [
    ("store", "info", "--store"),
    ("store", "export", "--store"),
    ("plan", "--repo", "{repo}", "--good", "{good}", "--bad", "{bad}", "--from-store"),
]


@pytest.mark.parametrize("kind", ["truncated", "header", "text"])
@pytest.mark.parametrize("reader", READERS, ids=["info", "export", "plan"])
def test_damaged_store_given_to_a_reading_command(
    tmp_path: Path, upstream, damaged, kind: str, reader: tuple[str, ...]
) -> None:
    repo, shas = upstream
    path = damaged[kind]
    before = digest(path)
    args = [a.format(repo=repo, good=shas[0], bad=shas[-1]) for a in reader]
    line = one_line_error(bisector(tmp_path, *args, str(path)), str(path))
    assert ("damaged or truncated" in line) or ("file is not a database" in line), line
    assert digest(path) == before


def test_damaged_store_given_to_run(tmp_path: Path, upstream, damaged) -> None:
    repo, shas = upstream
    cfg = write_config(tmp_path, repo)
    path = damaged["truncated"]
    before = digest(path)
    out = bisector(
        tmp_path,
        "run",
        "--config",
        str(cfg),
        "--good",
        shas[0],
        "--bad",
        shas[-1],
        "--store",
        str(path),
        "--work-dir",
        "work",
    )
    one_line_error(out, str(path))
    assert digest(path) == before


def foreign_db(path: Path) -> str:
    """Another program's SQLite file (rollback journal, its own tables); returns its digest."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO notes (body) VALUES (?)", [(f"note {i}",) for i in range(100)])
    conn.commit()
    conn.close()
    return digest(path)


@pytest.mark.parametrize("args", [("store", "info"), ("store", "export"), ("store", "export", "--format", "json")])
def test_foreign_sqlite_file_is_refused_and_left_unchanged(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = tmp_path / "app.db"
    before = foreign_db(path)
    line = one_line_error(bisector(tmp_path, *args, "--store", "app.db"), str(path))
    assert "not a bisector store" in line and "notes" in line
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("app.db")) == ["app.db"]  # no -wal, -shm
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["notes"]


def test_foreign_sqlite_file_given_to_run_is_refused_too(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    cfg = write_config(tmp_path, repo)
    path = tmp_path / "app.db"
    before = foreign_db(path)
    out = bisector(
        tmp_path,
        "run",
        "--config",
        str(cfg),
        "--good",
        shas[0],
        "--bad",
        shas[-1],
        "--store",
        "app.db",
        "--work-dir",
        "work",
    )
    assert "not a bisector store" in one_line_error(out, str(path))
    assert digest(path) == before


def test_empty_file_is_not_a_store_for_reading(tmp_path: Path) -> None:
    (tmp_path / "empty.sqlite").write_bytes(b"")
    line = one_line_error(bisector(tmp_path, "store", "info", "--store", "empty.sqlite"), "empty.sqlite")
    assert "not a bisector store" in line and (tmp_path / "empty.sqlite").read_bytes() == b""


def test_reading_a_real_store_still_works_read_only(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    make_store(path)
    os.chmod(path, 0o444)  # read-only opening: a file we may not write is still readable
    try:
        out = bisector(tmp_path, "store", "info", "--store", "r.sqlite")
        assert out.returncode == 0, out.stderr
        assert "c " in out.stdout and "200" in out.stdout
    finally:
        os.chmod(path, 0o644)


@pytest.mark.parametrize("url", ["file:///nonexistent/bisector-upstream", "file://{tmp}/plain-dir"])
def test_file_url_that_is_not_a_repository(tmp_path: Path, url: str) -> None:
    (tmp_path / "plain-dir").mkdir()
    url = url.format(tmp=tmp_path)
    line = one_line_error(bisector(tmp_path, "range", "v1", "v2", "--repo", url), url)
    assert "no such repository" in line or "not a git repository" in line
    assert "['" not in line and "stderr" not in line


def test_file_url_as_upstream_repo_names_the_config_key(tmp_path: Path) -> None:
    url = "file:///nonexistent/bisector-upstream"
    cfg = write_config(tmp_path, url)
    out = bisector(
        tmp_path,
        "run",
        "--config",
        str(cfg),
        "--good",
        "v1",
        "--bad",
        "v2",
        "--store",
        "s.sqlite",
        "--work-dir",
        "work",
    )
    line = one_line_error(out, str(cfg), "upstream.repo", url)
    assert "no such repository" in line
    assert not (tmp_path / "s.sqlite").exists()


def test_unexpected_exception_is_one_line_and_its_traceback_goes_to_a_log(tmp_path: Path) -> None:
    """A bug is still one line; the traceback is kept in the crash log for a maintainer."""
    code = (
        "import click\nfrom bisector.commands.common import fail_on_error\n"
        "@click.command()\n@fail_on_error\ndef boom():\n    {}['missing-key']\nboom()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env(tmp_path), cwd=tmp_path, timeout=60
    )
    log = tmp_path / "cache" / "bisector" / "bisector.log"
    line = one_line_error(out, "KeyError", str(log), code=1)
    assert line.startswith("error: unexpected KeyError: 'missing-key'")
    assert "Traceback" in log.read_text() and "missing-key" in log.read_text()


@pytest.mark.parametrize(
    "value, key",
    [
        ('"latncy"', "thresholds.timing"),
        ('{{ gemm = "wall" }}', "thresholds.timing.gemm"),
        ('{{ attn = "kernel" }}', "thresholds.timing.attn"),
    ],
)
def test_bad_timing_names_file_and_key(tmp_path: Path, value: str, key: str) -> None:
    cfg = write_config(tmp_path, "/tmp/x", CONFIG + f"[thresholds]\ntiming = {value}\n")
    line = one_line_error(bisector(tmp_path, "check-config", str(cfg)), str(cfg), key)
    assert "kernel, latency" in line or "unknown suite" in line


def lookalike_db(path: Path) -> str:
    """Another program's database whose tables happen to carry our first schema's names and which
    sets a user_version of its own: it used to be "upgraded" (switched to WAL, tables added)."""
    conn = sqlite3.connect(path)
    for table in ("commits", "builds", "trials"):
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    return digest(path)


@pytest.mark.parametrize("args", [("store", "info"), ("store", "export")])
def test_reading_commands_never_upgrade_a_file(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = tmp_path / "app.db"
    before = lookalike_db(path)
    line = one_line_error(bisector(tmp_path, *args, "--store", "app.db"), str(path))
    assert "never upgrade" in line
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("app.db")) == ["app.db"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


@pytest.mark.parametrize("args", [("store", "info"), ("store", "export")])
def test_reading_a_wal_store_creates_no_file_beside_it(tmp_path: Path, args: tuple[str, ...]) -> None:
    path = tmp_path / "r.sqlite"
    # a real store, in WAL mode, made by a process that has ended: no -wal or -shm left beside it
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from tests.test_bad_input import make_store; make_store(Path(sys.argv[1]))",
            str(path),
        ],
        env=env(tmp_path),
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("r.sqlite")) == ["r.sqlite"]
    before = digest(path)
    out = bisector(tmp_path, *args, "--store", "r.sqlite")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("r.sqlite")) == ["r.sqlite"]
    assert digest(path) == before


def test_an_unknown_ref_creates_nothing(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    cfg = write_config(tmp_path, repo)
    out = bisector(
        tmp_path,
        "run",
        "--config",
        str(cfg),
        "--good",
        "nosuchref",
        "--bad",
        shas[-1],
        "--store",
        "s.sqlite",
        "--work-dir",
        "work",
        "--report-dir",
        "report",
    )
    assert "nosuchref" in one_line_error(out, "nosuchref")
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "c.toml")
    assert made == [], f"a run refused for a bad ref left {made}"  # no store, work dir, report or last-store

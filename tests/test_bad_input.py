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
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True,
                          env=env(tmp), cwd=cwd or tmp, timeout=300)


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
    out = bisector(tmp_path, "simulate", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--model",
                   str(model))
    assert one_line_error(out, str(model)).endswith("not UTF-8 text (byte 0xff on line 2)")


def test_non_utf8_patch_file(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    cfg = write_config(tmp_path, repo)
    patch = tmp_path / "fix.diff"
    patch.write_bytes(b"diff --git a/lib.py b/lib.py\n--- a/lib.py\n+++ b/lib.py\n@@ -1 +1 @@\n-value = 3\n"
                      b"+value = '\xe9'\n")
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


def test_unexpected_exception_is_one_line_and_its_traceback_goes_to_a_log(tmp_path: Path) -> None:
    """A bug is still one line; the traceback is kept in the crash log for a maintainer."""
    code = ("import click\nfrom bisector.commands.common import fail_on_error\n"
            "@click.command()\n@fail_on_error\ndef boom():\n    {}['missing-key']\nboom()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(tmp_path),
                         cwd=tmp_path, timeout=60)
    log = tmp_path / "cache" / "bisector" / "bisector.log"
    line = one_line_error(out, "KeyError", str(log), code=1)
    assert line.startswith("error: unexpected KeyError: 'missing-key'")
    assert "Traceback" in log.read_text() and "missing-key" in log.read_text()

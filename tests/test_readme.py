"""The README is for users: short, no run logs, its commands the ones CI runs, its config valid.

It had grown to 11,168 words, 45% of them dated paragraphs of measurements, with no walk-through
for bisecting one's own library; the history now lives in docs/HISTORY.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DEMO = "pip install torch==2.13.0 -e . && bisector demo"
TESTS = "pip install torch==2.13.0 -e '.[test]' && python -m pytest"


def test_short_and_undated() -> None:
    words = len(re.sub(r"(?ms)^```.*?^```", "", README).split())
    assert words <= 2500, f"{words} words"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README), "a dated paragraph: it belongs in docs/HISTORY.md"


def test_the_two_commands_are_the_ones_ci_runs() -> None:
    blocks = re.findall(r"(?ms)^```sh\n(.*?)^```", README)
    assert [DEMO] in [b.strip().splitlines() for b in blocks] and [TESTS] in [b.strip().splitlines() for b in blocks]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0 -e '.[test]'" in ci and "python -m pytest" in ci


def test_the_own_library_config_passes_check_config(tmp_path: Path) -> None:
    section = README.split("## Bisect your own library", 1)[1].split("\n## ", 1)[0]
    (config,) = re.findall(r"(?ms)^```toml\n(.*?)^```", section)
    path = tmp_path / "my-lib.toml"
    path.write_text(config)
    out = subprocess.run(
        [sys.executable, "-m", "bisector", "check-config", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "fa/s16384" in out.stdout and "gemm/m8192" in out.stdout


def test_every_subcommand_has_its_line() -> None:
    from bisector.cli import _COMMANDS

    table = README.split("## Subcommands", 1)[1].split("\n## ", 1)[0]
    assert [c for c in _COMMANDS if f"`bisector {c}" not in table] == []

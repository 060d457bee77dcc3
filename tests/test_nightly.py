"""`bisector nightly` twice on a growing fixture upstream, for real: git, builds, trial processes, SQLite.

Night 1 records the tip as good; then commits land, one of them doing the GEMM twice; night 2 finds
the step, bisects it, writes the report with the trend plot; night 2 again measures nothing new.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.gitfixtures import commit_file, git

FAST = textwrap.dedent("""
    def mm(a, b):
        return a @ b
""")
SLOW = textwrap.dedent("""
    def mm(a, b):
        for _ in range(3):  # the work done four times: a quarter of the TFLOP/s
            a @ b
        return a @ b
""")


def make_upstream(root: Path) -> dict[str, str]:
    """main: base (fast) -> docs (#901); returns the shas."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "kern").mkdir()
    (root / "kern" / "__init__.py").write_text("")
    git(root, "add", "kern/__init__.py")
    base = commit_file(root, "kern/ops.py", FAST, "initial import", 1)
    docs = commit_file(root, "README.md", "kern\n", "docs (#901)", 2)
    return {"base": base, "docs": docs}


def grow(root: Path) -> dict[str, str]:
    """Three more commits on main; the middle one (#903) makes the GEMM slower."""
    a = commit_file(root, "NOTES.md", "notes\n", "notes (#902)", 3)
    slow = commit_file(root, "kern/ops.py", SLOW, "refactor mm (#903)", 4)
    c = commit_file(root, "CHANGES.md", "changes\n", "changelog (#904)", 5)
    return {"a": a, "slow": slow, "c": c}


def write_config(
    tmp: Path,
    upstream: str,
    base_url: str = "http://127.0.0.1:9",
    repo: str | None = "org/lib",
    token_env: str = "BISECTOR_TEST_TOKEN",
) -> Path:
    publish = f'repo = "{repo}"\n' if repo else ""
    text = textwrap.dedent(f'''
        name = "trig"
        store = "{tmp / "store.sqlite"}"

        [upstream]
        repo = "{upstream}"
        branch = "main"

        [build]
        recipe = "none"
        cache_dir = "{tmp / "builds"}"

        [device]
        kind = "cpu"

        [control]
        backend = "torch"

        [subject.gemm]
        entry = "kern.ops:mm"
        adapter = "torch"

        [[suites.gemm.shapes]]
        name = "m256"
        M = 256
        N = 256
        K = 256
        dtype = "fp32"

        [protocol]
        trials = 3
        max_trials = 12
        reps = 5
        warmup = 1
        flush_mb = 1
        timeout_s = 120
        env = {{ OMP_NUM_THREADS = "1", MKL_NUM_THREADS = "1" }}

        [thresholds]
        min_step_pct = 10.0
        alpha = 0.05

        [report]
        dir = "{tmp / "reports"}"
    ''') + textwrap.dedent(f'''
        [publish]
        {publish}token_env = "{token_env}"
        base_url = "{base_url}"
        commit_status = false
    ''')
    path = tmp / "trig.toml"
    path.write_text(text)
    return path


def cli_env(tmp: Path, **extra: str) -> dict[str, str]:
    # PYTHONPATH: the code of this checkout, not whichever one is installed in editable mode.
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "BISECTOR_LOCK_DIR": str(tmp / "locks"),
        "RUNNER_NAME": "test-runner",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        **extra,
    }
    env.pop("BISECTOR_STORE", None)
    return env


def bisector(tmp: Path, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real click command in a fresh process (called through its module until cli.py registers it)."""
    module = name.replace("-", "_") + "_cmd"
    code = f"from bisector.commands.{module} import command; command(prog_name='bisector {name}')"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env or cli_env(tmp),
        cwd=tmp,
        timeout=300,
    )


def trial_count(store: Path) -> int:
    with sqlite3.connect(store) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])


def nights(store: Path) -> list[tuple[str, str, int, dict]]:
    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT date, sha, good, verdict FROM nightly ORDER BY date").fetchall()
    return [(d, s, g, json.loads(v)) for d, s, g, v in rows]


@pytest.mark.slow
def test_two_nights_find_bisect_and_do_not_measure_twice(tmp_path: Path) -> None:
    up = make_upstream(tmp_path / "upstream")
    cfg = write_config(tmp_path, str(tmp_path / "upstream"))
    store = tmp_path / "store.sqlite"
    reports = tmp_path / "reports" / "nightly"

    first = bisector(
        tmp_path,
        "nightly",
        "--config",
        str(cfg),
        "--date",
        "2026-08-01",
        "--no-fixes",
        "--dry-run",
        str(tmp_path / "dry1"),
    )
    assert first.returncode == 0, first.stderr
    assert "(first night)" in first.stdout
    [(date, sha, good, verdict)] = nights(store)
    assert (date, sha, good) == ("2026-08-01", up["docs"], 1)
    assert trial_count(store) == 3
    assert (reports / "2026-08-01.md").exists() and (reports / "2026-08-01-trend.png").stat().st_size > 1000

    new = grow(tmp_path / "upstream")
    # as the workflow's GPU job: measure only, the plan to a file (no token in its environment)
    plan = tmp_path / "publish-plan.json"
    second = bisector(
        tmp_path, "nightly", "--config", str(cfg), "--date", "2026-08-02", "--no-fixes", "--plan-out", str(plan)
    )
    assert second.returncode == 0, second.stderr
    assert f"publish plan: {plan}" in second.stdout and "published:" not in second.stdout
    # as the publish job: the plan posted (here as a dry run)
    posted = bisector(
        tmp_path, "publish", "--plan", str(plan), "--config", str(cfg), "--dry-run", str(tmp_path / "dry2")
    )
    assert posted.returncode == 0, posted.stderr
    assert "is not good against" in second.stdout
    # stderr is a pipe: plain progress lines, through the A/B and into the bisection, whose range
    # (docs..c, 4 commits) extends the estimate of the A/B's two commits.
    progress = [line for line in second.stderr.splitlines() if line.startswith("progress: ")]
    assert any(line.startswith(f"progress: {new['c'][:7]} ") for line in progress), second.stderr
    assert any(line.startswith(f"progress: {new['slow'][:7]} ") for line in progress), second.stderr
    expected = [int(m.group(1)) for m in map(re.compile(r"trials \d+ of ~(\d+)").search, progress) if m]
    assert expected[0] < expected[-1] and progress[-1].startswith("progress: done: ")
    rows = nights(store)
    assert [(d, s, g) for d, s, g, _ in rows] == [("2026-08-01", up["docs"], 1), ("2026-08-02", new["c"], 0)]
    verdict = rows[1][3]
    assert verdict["baseline"] == up["docs"]
    assert verdict["shapes"]["gemm/m256"]["verdict"] == "slower"
    assert [(s["commit"], s["pr"]) for s in verdict["steps"]] == [(new["slow"], 903)]
    report = (reports / "2026-08-02.md").read_text()
    assert "NOT good" in report and new["slow"][:12] in report and "(#903)" in report
    # the question the nightly answers comes first: slower than the last good night, on what, whose PR
    answer = report.splitlines()[2]
    assert answer.startswith(f"**Answer**: slower than the last good night (`{up['docs'][:12]}`): gemm/m256 -")
    assert answer.endswith(f"; the bisection blames #903 (`{new['slow'][:12]}`).")
    assert "![trend](2026-08-02-trend.png)" in report and (reports / "2026-08-02-trend.png").exists()
    assert "| 2026-08-01 |" in report and "| 2026-08-02 |" in report
    assert (reports / "2026-08-02-bisect" / "report.md").exists()
    # the dry run wrote the comment for the culprit PR, not a network call
    published = sorted(p.name for p in (tmp_path / "dry2").iterdir())
    assert any(name.endswith("comment-pr-903.json") for name in published), published
    body = next((tmp_path / "dry2").glob("*comment-pr-903.md")).read_text()
    assert "#903" in body and "regression" in body

    before = trial_count(store)
    again = bisector(tmp_path, "nightly", "--config", str(cfg), "--date", "2026-08-02", "--no-fixes")
    assert again.returncode == 0, again.stderr
    assert "nothing measured" in again.stdout
    assert trial_count(store) == before
    assert len(nights(store)) == 2
    assert (reports / "2026-08-02.md").read_text() == report


def test_bad_date_is_one_line_bad_input(tmp_path: Path) -> None:
    make_upstream(tmp_path / "upstream")
    cfg = write_config(tmp_path, str(tmp_path / "upstream"))
    out = bisector(tmp_path, "nightly", "--config", str(cfg), "--date", "2026-13-01")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: --date: not a date YYYY-MM-DD: '2026-13-01'"
    out = bisector(tmp_path, "nightly", "--config", str(cfg), "--plan-out", "p.json", "--dry-run", "d")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: --plan-out posts nothing already: drop --dry-run"


def test_a_regressed_night_whose_bisection_blames_nothing_says_why(tmp_path: Path) -> None:
    from bisector import config as config_mod
    from bisector.store import Night
    from bisector.triggers.nightly import render_markdown

    cfg = config_mod.load(write_config(tmp_path, str(tmp_path / "upstream")))
    a, b, c = ("a" * 40, "b" * 40, "c" * 40)
    verdict = {
        "baseline": a,
        "shapes": {"gemm/m256": {"verdict": "slower", "change_pct": -12.0, "ci95": [-15, -9]}},
        "steps": [],
        "dropped": [{"commit": b, "pr": 903, "shapes": ["gemm/m256"], "change_pct": {"gemm/m256": -11.0}}],
        "unsure": [{"before": b, "after": c, "shapes": ["gemm/m256"]}],
    }
    night = Night("2026-08-02", c, False, verdict)
    text = render_markdown(cfg, night, [night], {}, {}, "trend.png")
    assert text.splitlines()[2] == (
        f"**Answer**: slower than the last good night (`{a[:12]}`): gemm/m256 -12.0%; "
        "the bisection blames no single commit (below)."
    )
    assert "No step held between the last good night and this one" in text
    assert f"- dropped (did not hold on re-measurement): `{b[:12]}` (#903): gemm/m256 -11.0%" in text
    assert f"- unsure at the trial cap: `{b[:12]}`..`{c[:12]}` in gemm/m256" in text
    held = Night("2026-08-02", c, False, {**verdict, "steps": verdict["dropped"], "dropped": [], "unsure": []})
    found = render_markdown(cfg, held, [held], {}, {}, "trend.png")
    assert f"- `{b[:12]}` (#903): gemm/m256 -11.0%" in found and "No step held" not in found

"""`bisector run` on a small real upstream: a step, its verified revert, resume, offline replay."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from bisector import config as config_mod
from bisector.pipeline import Session, beside
from bisector.why.kernel_diff.regenerate import compile_commit
from tests.gitfixtures import PLANTED_MATMUL, commit_file, cpu_config, gemm_subject, git

pytestmark = pytest.mark.slow


def config(repo: Path) -> str:
    return cpu_config(
        "pipeline-test",
        repo,
        gemm_subject(512),
        trials=4,
        max_trials=8,
        reps=5,
        min_step_pct=10.0,
        extra='[publish]\nrepo = "ada/lib"\n',
    )


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = [commit_file(repo, "lib/__init__.py", "", "initial (#1)", 1)]
    shas.append(commit_file(repo, "lib/gemm.py", PLANTED_MATMUL.format(extra=0), "add gemm (#2)", 2))
    for k in range(3, 6):
        shas.append(commit_file(repo, f"docs/n{k}.md", f"note {k}\n", f"docs {k} (#{k})", k))
    # The culprit touches three places; only its lib/gemm.py hunk slows the GEMM.
    (repo / "README.md").write_text("lib: a GEMM\n")
    (repo / "lib" / "__init__.py").write_text('"""lib."""\n')
    git(repo, "add", "README.md", "lib/__init__.py")
    shas.append(commit_file(repo, "lib/gemm.py", PLANTED_MATMUL.format(extra=4), "refactor the loop (#6)", 6))
    for k in range(7, 9):
        shas.append(commit_file(repo, f"docs/n{k}.md", f"note {k}\n", f"docs {k} (#{k})", k))
    return repo, shas


def run(tmp_path: Path, repo: Path, good: str, *extra: str) -> dict:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config(repo))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "run",
            "--config",
            str(cfg),
            "--good",
            good,
            "--bad",
            "main",
            "--store",
            str(tmp_path / "s.sqlite"),
            "--work-dir",
            str(tmp_path / "work"),
            "--report-dir",
            str(tmp_path / "report"),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def trials(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


def test_step_found_revert_restores_resume_and_offline(tmp_path: Path, upstream) -> None:
    repo, shas = upstream
    result = run(tmp_path, repo, shas[1])
    (step,) = result["steps"]
    assert step["commit"] == shas[5] and step["pr"] == 6 and step["change_pct"]["gemm/m512"] < -50

    report = (tmp_path / "report" / "report.md").read_text()
    patch = tmp_path / "report" / f"revert-{shas[5][:7]}.patch"
    assert patch.exists() and "range(4)" in patch.read_text()
    # The revert, built and measured on the tip side by side with the tip and the step's parent,
    # restores the pre-step speed: no significant loss against the parent, a gain against the tip
    # (4 trials of each, 8 where a busy machine left its place against the parent open).
    (fix,) = result["fixes"]
    shape = fix["shapes"]["gemm/m512"]
    assert fix["commit"] == shas[5] and fix["applied"] and fix["trials"] in (4, 8)
    # On a busy 2-core machine the intervals can stay too wide to decide (seen: -10.5% [-29, +13]
    # against the parent at 8 trials; -38% [-59, -7] with both cores spun by other work): then
    # "undecided", never "not restored", and the revert still clearly above the tip's loss.
    assert shape["verdict"] in ("restored", "undecided"), shape
    if shape["verdict"] == "undecided":
        tip_loss = 100 * (shape["tflops"]["tip"] / shape["tflops"]["parent"] - 1)
        assert shape["vs_parent"]["ci95"][1] > tip_loss / 2, shape
    assert shape["vs_tip"]["change_pct"] > 50 and shape["tflops"]["revert"] > shape["tflops"]["tip"]
    assert f"| m512 | **{shape['verdict']}**" in report
    # Down to the hunk: README and lib/__init__.py without lib/gemm.py do not slow it, lib/gemm.py alone does.
    (hunk,) = result["hunks"]
    assert hunk["commit"] == shas[5] and hunk["of"] == 3 and hunk["alone"]
    assert [h.split(" ")[0] for h in hunk["hunks"]] == ["lib/gemm.py"]
    assert "range(4)" in Path(hunk["patch"]).read_text() and "README" not in Path(hunk["patch"]).read_text()
    assert "1 of 3 hunks carry the step alone" in report and "```diff" in report
    assert report.count("— reproduces the step") == 1 and report.count("— does not reproduce the step") == 1
    plan = json.loads((tmp_path / "report" / "publish-plan.json").read_text())
    # the revert patch goes with the culprit when it was measured to restore (undecided: not offered)
    assert plan["culprits"][0]["pr"] == 6 and (
        bool(plan["culprits"][0].get("patch")) == (shape["verdict"] == "restored")
    )
    assert "1 of 3 hunks carry the step alone: `lib/gemm.py @@" in plan["culprits"][0]["hunk"]
    assert "+    for _ in range(4)" in plan["culprits"][0]["hunk_diff"]

    # Nothing that leaves the machine names one of its directories: the report, its CSV, the plan.
    for path in (tmp_path / "report").rglob("*"):
        if path.is_file() and path.suffix in (".md", ".csv", ".json", ".patch", ".diff"):
            text = path.read_text()
            for machine in ("/tmp", "/home", "/root", str(tmp_path)):
                assert machine not in text, (path.name, machine, text[max(0, text.find(machine) - 200) :][:400])
    with sqlite3.connect(tmp_path / "s.sqlite") as db:  # the store's trials: paths under the work dir relative to it
        logs = [json.loads(p)["log_path"] for (p,) in db.execute("SELECT protocol FROM trials")]
    assert logs and all(log.startswith("trials/") for log in logs), logs[:3]
    # The step was verified on fresh trials of a new worker lineage (a zygote that forked none of the
    # search's trials): the culprit's trials come from both.
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        lineages = {
            json.loads(p)["worker"]["lineage"]
            for (p,) in db.execute("SELECT protocol FROM trials WHERE sha = ? AND patch_hash IS NULL", (shas[5],))
        }
    assert 0 in lineages and max(lineages) >= 1, lineages
    assert "in trial processes that share no history with the search's" in report

    before = trials(tmp_path)
    # A resumed run whose JIT dirs are gone compiles the step's commits again: one cold trial of
    # the culprit from its kept build, in a real trial process, nothing stored (this CPU subject
    # compiles no Triton kernel, so the answer says that rather than pretending one was kept).
    cfg = config_mod.load(tmp_path / "cfg.toml")
    cfg = replace(cfg, protocol=replace(cfg.protocol, jit_cache_env=("TRITON_CACHE_DIR",)))
    session = Session(cfg, str(tmp_path / "s.sqlite"), str(tmp_path / "work"))
    try:
        why = compile_commit(session, shas[5])
    finally:
        session.close()
    assert why.startswith("a trial of it ran again (ok)") and "compiled no kernel" in why, why
    assert (tmp_path / "work" / "jit" / shas[5] / "triton_cache_dir").is_dir() and trials(tmp_path) == before

    again = run(tmp_path, repo, shas[1])
    assert trials(tmp_path) == before, "a re-run measured again"
    assert [s["commit"] for s in again["steps"]] == [shas[5]]

    offline = run(tmp_path, repo, shas[1], "--offline", "--no-fixes")
    assert [s["commit"] for s in offline["steps"]] == [shas[5]] and trials(tmp_path) == before
    assert "Replayed offline" in (tmp_path / "report" / "report.md").read_text()


def test_counts_agree_everywhere_after_a_kill_and_a_resume(tmp_path: Path, upstream) -> None:
    """A real run killed once some trials are stored, then resumed: the header, the per-commit table,
    stdout, the progress display's last line and --json name one set of counts, over both calls,
    with the resumed call's own beside them; never "no trial process ran"."""
    import os
    import re
    import signal
    import time

    repo, shas = upstream
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config(repo))
    args = [
        sys.executable,
        "-m",
        "bisector",
        "run",
        "--config",
        str(cfg),
        "--good",
        shas[1],
        "--bad",
        "main",
        "--store",
        str(tmp_path / "s.sqlite"),
        "--work-dir",
        str(tmp_path / "work"),
        "--report-dir",
        str(tmp_path / "report"),
        "--no-hunks",
    ]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            if (tmp_path / "s.sqlite").exists() and processes(tmp_path) >= 6:
                break
            time.sleep(0.5)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)  # the run and its trial processes: a kill -9 mid-run
        first.wait()
    killed_at = processes(tmp_path)
    assert killed_at >= 1

    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    total = processes(tmp_path)
    report = (tmp_path / "report" / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("Upstream "))
    counts = re.search(r"(\d+) commits \(GOOD and BAD included\), (\d+) measured.*?; (\d+) trials", header)
    assert counts, header
    in_range, measured, trials = (int(x) for x in counts.groups())
    assert in_range == len(shas) - 1 and trials == total
    table = report.split("## Per measured commit", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert measured == len(rows), (header, rows)
    this_call = int(re.search(r"this call: (\d+) trials", header).group(1))
    assert 0 < this_call == total - killed_at and "over every call" in header
    assert "no trial process ran" not in report.lower()
    summary = out.stdout.splitlines()[0]
    assert counts.group(0) in summary and f"this call: {this_call} trials" in summary
    done = [line for line in out.stderr.splitlines() if line.startswith("progress: done: ")]
    assert done and counts.group(0) in done[-1]

    again = run(tmp_path, repo, shas[1], "--no-hunks")  # nothing left to measure: --json says the same
    totals = again["totals"]
    assert (totals["range_commits"], totals["measured"], totals["trials"]) == (in_range, measured, total)
    assert totals["this_call"]["trials"] == 0


def processes(tmp_path: Path) -> int:
    """Trial processes stored (one row per shape each); 0 while the run has not made its tables yet."""
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        try:
            return db.execute("SELECT COUNT(*) FROM (SELECT DISTINCT sha, patch_hash, slot FROM trials)").fetchone()[0]
        except sqlite3.OperationalError:  # the store file exists, its schema not yet
            return 0


def test_work_beside_the_later_stages_runs_on_its_own_thread_and_raises_where_asked() -> None:
    """The kernels' reading (cuobjdump, ptxas) goes on beside the fixes stage on a GPU host: its
    result, or its error, comes where the report asks for it."""
    started = threading.Event()
    release = threading.Event()

    def work() -> str:
        started.set()
        assert release.wait(30)
        return threading.current_thread().name

    later = beside(work, background=True)
    assert started.wait(30) and not later.done()  # the caller goes on meanwhile
    release.set()
    assert later.result(30) != threading.current_thread().name
    assert beside(lambda: threading.current_thread().name, background=False).result() == threading.current_thread().name

    def broken() -> None:
        raise ValueError("no cuobjdump output")

    with pytest.raises(ValueError, match="no cuobjdump"):
        beside(broken, background=True).result(30)

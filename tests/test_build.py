"""Per-commit builds on real fixture repositories: real git worktrees, real pip, real subprocesses."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import git
import pytest
from click.testing import CliRunner

from bisector.build import Builder, Prefetcher, bisection_candidates
from bisector.build.cache import Cache
from bisector.commands.build_cmd import command as build_command
from bisector.config import Build, BuildStep, Upstream
from bisector.errors import RefError
from bisector.model import BuildStatus
from tests.gitfixtures import commit_file
from tests.gitfixtures import git as run_git
from tests.llvm_pins import pin_history

PYPROJECT = textwrap.dedent("""\
    [build-system]
    requires = ["setuptools>=61"]
    build-backend = "setuptools.build_meta"
    [project]
    name = "fixturepkg"
    version = "0.1"
    [tool.setuptools]
    packages = ["fixturepkg"]
""")


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    """A package whose VALUE changes per commit; commit 3 is broken; the pin changes at commit 2."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "pyproject.toml", PYPROJECT, "packaging", 1)
    commit_file(repo, "pin.txt", "llvm-aaaa\n", "pin llvm", 1)
    shas = []
    for k in range(5):
        body = "VALUE = (\n" if k == 3 else f"VALUE = {k}\n"  # k == 3: a syntax error
        if k == 2:
            (repo / "pin.txt").write_text("llvm-bbbb\n")
            run_git(repo, "add", "pin.txt")
        shas.append(commit_file(repo, "fixturepkg/__init__.py", body, f"change {k} (#{900 + k})", 2 + k))
    return repo, shas


def make_builder(repo: Path, tmp_path: Path, **build_kw: object) -> Builder:
    return Builder(git.Repo(repo), Upstream(repo=str(repo)), Build(**build_kw), tmp_path / "cache")


def read_value(source_dir: str) -> str:
    return (Path(source_dir) / "fixturepkg" / "__init__.py").read_text()


def snapshot(repo: Path) -> tuple[str, str, str, str]:
    index = hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()
    return (
        run_git(repo, "rev-parse", "HEAD"),
        index,
        run_git(repo, "status", "--porcelain", "--ignored"),
        (repo / "fixturepkg" / "__init__.py").read_text(),
    )


def test_none_recipe_builds_worktree_and_cache_hit_is_instant(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="none", import_check="fixturepkg")
    first = builder.build(shas[1])
    assert first.status is BuildStatus.OK and not first.cache_hit
    assert read_value(first.source_dir) == "VALUE = 1\n"
    again = Builder(
        git.Repo(repo), Upstream(repo=str(repo)), Build(recipe="none", import_check="fixturepkg"), tmp_path / "cache"
    ).build(shas[1][:8])  # a new process would see the same entry
    assert again.cache_hit and again.status is BuildStatus.OK
    assert again.source_dir == first.source_dir
    # no worktree, no import check: a fraction of the first build's time (relative, so a busy machine
    # slows both sides)
    assert again.seconds < first.seconds / 2, (again.seconds, first.seconds)
    other = builder.build(shas[2])
    assert read_value(other.source_dir) == "VALUE = 2\n" and other.source_dir != first.source_dir


def test_user_checkout_is_never_touched(upstream, tmp_path):
    repo, shas = upstream
    (repo / "fixturepkg" / "__init__.py").write_text("VALUE = 'local edit'\n")  # a dirty checkout
    before = snapshot(repo)
    builder = make_builder(repo, tmp_path, recipe="none")
    for sha in shas[:3]:
        assert builder.build(sha).status is BuildStatus.OK
    builder.build(shas[0], patch=_value_patch(repo, shas[0], "0", "42"))
    assert snapshot(repo) == before


def test_unknown_commit_is_bad_input(upstream, tmp_path):
    repo, _ = upstream
    with pytest.raises(RefError, match="deadbeef"):
        make_builder(repo, tmp_path).build("deadbeef")


def test_failing_build_is_failed_with_log_tail(upstream, tmp_path):
    repo, shas = upstream
    step = BuildStep(
        run="if grep -q 'VALUE = ($' fixturepkg/__init__.py; then echo 'error: cannot compile' >&2;"
        " exit 3; fi; echo compiled"
    )
    builder = make_builder(repo, tmp_path, recipe="command", steps=(step,))
    bad = builder.build(shas[3])
    assert bad.status is BuildStatus.FAILED and not bad.cache_hit
    assert "exit 3" in bad.log_tail and "error: cannot compile" in bad.log_tail
    assert "error: cannot compile" in Path(bad.log_path).read_text()
    assert not Path(builder.cache.slot("entries", builder.entry_key(shas[3])).path).exists()
    assert builder.build(shas[3]) is bad  # remembered: a search does not pay for it twice
    good = builder.build(shas[2])
    assert good.status is BuildStatus.OK and "compiled" in Path(good.log_path).read_text()


def test_import_failure_is_failed(upstream, tmp_path):
    repo, shas = upstream
    result = make_builder(repo, tmp_path, recipe="none", import_check="fixturepkg").build(shas[3])
    assert result.status is BuildStatus.FAILED
    assert "import failed: fixturepkg" in result.log_tail and "SyntaxError" in result.log_tail


def test_step_timeout_is_failed(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="command", steps=(BuildStep(run="sleep 20", timeout_s=0.5),))
    start = time.monotonic()
    result = builder.build(shas[0])
    assert result.status is BuildStatus.FAILED and "timeout after 0.5s" in result.log_tail
    assert time.monotonic() - start < 5


KILL_SCRIPT = """
import sys, git
from pathlib import Path
from bisector.build import Builder
from bisector.config import Build, BuildStep, Upstream
repo, cache, sha = sys.argv[1:]
step = BuildStep(run=STEP)
Builder(git.Repo(repo), Upstream(repo=repo), Build(recipe="command", steps=(step,)), Path(cache)).build(sha)
"""
SLOW_STEP = (
    'echo half > half-built.txt; if [ -n "$SLOW_BUILD" ]; then echo $$ > "$BISECTOR_PREFIX/../step.pid";'
    " exec sleep 60; fi; echo done > built.txt"
)


def test_build_killed_midway_leaves_no_usable_entry(upstream, tmp_path):
    repo, shas = upstream
    cache = tmp_path / "cache"
    script = KILL_SCRIPT.replace("STEP", repr(SLOW_STEP))
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(repo), str(cache), shas[1]],
        env={**os.environ, "SLOW_BUILD": "1"},
        cwd=Path(__file__).parent.parent,
    )
    builder = Builder(
        git.Repo(repo), Upstream(repo=str(repo)), Build(recipe="command", steps=(BuildStep(run=SLOW_STEP),)), cache
    )
    slot = builder.cache.slot("entries", builder.entry_key(shas[1]))
    pid_file = slot.path / "step.pid"
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), "the build never reached its slow step"
    step_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(ProcessLookupError):  # a sandboxed step's pid is its namespace's; gone anyway
        os.killpg(step_pid, signal.SIGKILL)  # the step ran in its own session: end it as a crash would not
    assert (slot.path / "tree" / "half-built.txt").exists() and not slot.is_complete()
    result = builder.build(shas[1])
    assert result.status is BuildStatus.OK and not result.cache_hit
    assert (Path(result.source_dir) / "built.txt").read_text() == "done\n"
    assert "(created)" in Path(result.log_path).read_text()  # the dirty worktree was not reused
    assert builder.build(shas[1]).cache_hit


def _value_patch(repo: Path, sha: str, old: str, new: str) -> str:
    return textwrap.dedent(f"""\
        diff --git a/fixturepkg/__init__.py b/fixturepkg/__init__.py
        --- a/fixturepkg/__init__.py
        +++ b/fixturepkg/__init__.py
        @@ -1 +1 @@
        -VALUE = {old}
        +VALUE = {new}
        """)


def test_patched_build_differs_from_plain(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="none", import_check="fixturepkg")
    patch = _value_patch(repo, shas[1], "1", "100")
    patched = builder.build(shas[1], patch=patch)
    plain = builder.build(shas[1])
    assert patched.status is BuildStatus.OK and plain.status is BuildStatus.OK
    assert patched.patch_hash and plain.patch_hash is None
    assert read_value(patched.source_dir) == "VALUE = 100\n" and read_value(plain.source_dir) == "VALUE = 1\n"
    assert builder.build(shas[1], patch=patch).cache_hit
    # a revert of a later commit, applied to a descendant, is a patched build too
    revert = git.Repo(repo).git.diff(shas[2], shas[1]) + "\n"
    reverted = builder.build(shas[2], patch=revert)
    assert read_value(reverted.source_dir) == "VALUE = 1\n"


def test_patch_that_does_not_apply_names_the_file(upstream, tmp_path):
    repo, shas = upstream
    result = make_builder(repo, tmp_path).build(shas[2], patch=_value_patch(repo, shas[2], "7", "8"))
    assert result.status is BuildStatus.FAILED
    assert "patch does not apply" in result.log_tail and "fixturepkg/__init__.py" in result.log_tail


def test_pip_recipe_installs_into_per_commit_prefix(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(
        repo, tmp_path, recipe="pip", pip_args=("--no-deps", "--no-build-isolation"), import_check="fixturepkg"
    )
    result = builder.build(shas[4])
    assert result.status is BuildStatus.OK, result.log_tail
    assert result.prefix == result.source_dir and Path(result.prefix, "fixturepkg", "__init__.py").exists()
    assert not (Path(result.prefix).parent / "tree").exists()  # the worktree went after the install
    out = subprocess.run(
        [sys.executable, "-c", "import fixturepkg, torch; print(fixturepkg.VALUE)"],
        env={**os.environ, "PYTHONPATH": result.prefix},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.stdout.strip() == "4", out.stderr  # and the host's torch is still importable
    assert builder.build(shas[4]).cache_hit


def test_shared_step_is_built_once_per_pin(upstream, tmp_path, monkeypatch):
    repo, shas = upstream
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(tmp_path))  # the counter lies outside the build
    counter = tmp_path / "llvm-builds.txt"
    llvm = BuildStep(
        run=f'cat pin.txt >> {counter}; cp pin.txt "$LLVM_DIR/llvm.txt"', key_files=("pin.txt",), shared_dir="LLVM_DIR"
    )
    uses = BuildStep(run='cp "$LLVM_DIR/llvm.txt" linked-llvm.txt')
    builder = make_builder(repo, tmp_path, recipe="command", steps=(llvm, uses))
    results = [builder.build(sha) for sha in (shas[0], shas[1], shas[2], shas[4])]
    assert all(r.status is BuildStatus.OK for r in results)
    assert counter.read_text().splitlines() == ["llvm-aaaa", "llvm-bbbb"]
    linked = [(Path(r.source_dir) / "linked-llvm.txt").read_text().strip() for r in results]
    assert linked == ["llvm-aaaa", "llvm-aaaa", "llvm-bbbb", "llvm-bbbb"]


def test_shared_step_follows_a_pin_that_moves_to_another_file(tmp_path, monkeypatch):
    """FlyDSL's LLVM pin moved from llvm-hash.txt to llvm-build-info.json, then a patch came: one
    build per pin, each commit linked to its own; a commit left with no pin file fails that step."""
    repo = tmp_path / "pins"
    eras = pin_history(repo)
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(tmp_path))  # the counter lies outside the build
    counter = tmp_path / "llvm-builds.txt"
    llvm = BuildStep(
        run=f'echo "$BISECTOR_SHA" >> {counter}; cp thirdparty/llvm-* "$LLVM_DIR"/',
        key_files=("scripts/build_llvm.sh", "thirdparty/llvm-*"),
        shared_dir="LLVM_DIR",
    )
    uses = BuildStep(run='ls "$LLVM_DIR" > linked.txt')
    builder = make_builder(repo, tmp_path, recipe="command", steps=(llvm, uses))
    shas = eras["txt"] + eras["json"] + eras["patch"]
    results = [builder.build(sha) for sha in shas]
    assert all(r.status is BuildStatus.OK for r in results), [r.log_tail for r in results]
    assert counter.read_text().split() == [eras["txt"][0], eras["json"][0], eras["patch"][0]]
    linked = [(Path(r.source_dir) / "linked.txt").read_text().split() for r in results]
    assert (
        linked
        == [["llvm-hash.txt"]] * 3
        + [["llvm-build-info.json"]] * 2
        + [["llvm-build-info.json", "llvm-rocdl-lld-argv0.patch"]] * 3
    )
    run_git(repo, "rm", "-q", "thirdparty/llvm-build-info.json", "thirdparty/llvm-rocdl-lld-argv0.patch")
    run_git(repo, "commit", "-q", "-m", "drop the pin")
    gone = builder.build(run_git(repo, "rev-parse", "HEAD"))
    assert gone.status is BuildStatus.FAILED
    assert "key files 'thirdparty/llvm-*' match nothing in commit" in gone.log_tail


def test_lru_eviction_removes_oldest_entry_and_its_worktree(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="none")
    first = builder.build(shas[0])
    size = builder.cache.total_bytes()
    builder.cache.max_bytes = int(size * 2.5)
    second = builder.build(shas[1])
    used = tmp_path / "cache" / "used"
    os.utime(used / f"entries-{Path(second.source_dir).parent.name}")  # recently used: survives
    time.sleep(0.02)
    os.utime(used / f"entries-{Path(first.source_dir).parent.name}", (1, 1))  # long unused
    builder.build(shas[2])  # three entries do not fit: the least recently used goes
    assert not Path(first.source_dir).exists()
    assert Path(second.source_dir).exists()
    listed = run_git(repo, "worktree", "list")
    assert first.source_dir not in listed and second.source_dir in listed
    assert not builder.build(shas[0]).cache_hit


def test_cache_skips_locked_and_incomplete_entries(tmp_path):
    cache = Cache(tmp_path / "c", max_bytes=0)
    slots = []
    for i in range(3):
        slot = cache.slot("entries", f"k{i}")
        slot.path.mkdir(parents=True)
        (slot.path / "data").write_bytes(b"x" * 1000)
        if i < 2:
            slot.finalize({})
        slots.append(slot)
    with slots[0].lock:
        assert cache.evict() == ["k1"]  # k0 is in use, k2 never completed (it does not count)
    assert slots[0].is_complete() and not slots[1].path.exists() and slots[2].path.exists()


def test_two_threads_building_one_commit_build_it_once(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="command", steps=(BuildStep(run="sleep 0.5; date >> stamp"),))
    results = []
    threads = [threading.Thread(target=lambda: results.append(builder.build(shas[0]))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.cache_hit for r in results) == [False, True]
    assert len((Path(results[0].source_dir) / "stamp").read_text().splitlines()) == 1


def test_prefetch_overlaps_with_a_running_trial(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="command", steps=(BuildStep(run="sleep 2"),))
    start = time.monotonic()
    with Prefetcher(builder, parallel=2) as pool:
        pool.prefetch([shas[1], shas[2]])
        trial_start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import time; time.sleep(2)"], check=True)  # the "trial"
        trial = time.monotonic() - trial_start
        results = [pool.build(shas[1]), pool.build(shas[2])]
    elapsed = time.monotonic() - start
    assert all(r.status is BuildStatus.OK and not r.cache_hit for r in results)
    assert all(r.seconds >= 2.0 for r in results)
    # One after the other it would take the trial plus both builds (>= 6 s); at once about the
    # longest of them. Measured against the run's own durations, so a busy machine slows both sides.
    serial = trial + sum(r.seconds for r in results)
    assert elapsed < serial - 2.0, (elapsed, serial)


def test_prefetcher_builds_unqueued_commit_now(upstream, tmp_path):
    repo, shas = upstream
    builder = make_builder(repo, tmp_path, recipe="none")
    with Prefetcher(builder, parallel=1) as pool:
        result = pool.build(shas[0])
    assert result.status is BuildStatus.OK


def test_bisection_candidates_are_midpoints_by_level():
    commits = [f"c{i}" for i in range(9)]
    assert bisection_candidates(commits, 0, 8, depth=1) == ["c4"]
    assert bisection_candidates(commits, 0, 8, depth=2) == ["c4", "c2", "c6"]
    assert bisection_candidates(commits, 3, 4) == []


CONFIG = """
name = "fixture"
[upstream]
repo = "{repo}"
[build]
recipe = "none"
import_check = "fixturepkg"
cache_dir = "{cache}"
parallel = 2
[device]
kind = "cpu"
[control]
backend = "torch"
[subject.fa]
entry = "fixturepkg:attn"
[suites.fa]
shapes = [{{B = 1, H = 1, S = 128, D = 64}}]
"""


def test_cli_build_reports_status_time_and_hits(upstream, tmp_path):
    repo, shas = upstream
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG.format(repo=repo, cache=tmp_path / "cache"))
    runner = CliRunner()
    first = runner.invoke(build_command, ["--config", str(cfg), "--json", shas[0], shas[1]])
    assert first.exit_code == 0, first.output
    rows = json.loads(first.output)
    assert [r["status"] for r in rows] == ["ok", "ok"] and not any(r["cache_hit"] for r in rows)
    again = runner.invoke(build_command, ["--config", str(cfg), shas[0][:10], shas[3]])
    assert again.exit_code == 1  # shas[3] does not import
    assert "hit" in again.output and "failed" in again.output and "import failed" in again.output
    bad = runner.invoke(build_command, ["--config", str(cfg), "nosuchref"])
    assert bad.exit_code == 2 and "nosuchref" in bad.output


def test_cli_patch_file_with_crlf_lines_applies(upstream, tmp_path):
    repo, _shas = upstream
    (repo / "win.py").write_bytes(b"A = 1\r\nB = 2\r\n")
    run_git(repo, "add", "win.py")
    run_git(repo, "commit", "-q", "-m", "crlf file")
    head = run_git(repo, "rev-parse", "HEAD")
    patch = tmp_path / "fix.diff"
    patch.write_bytes(
        b"diff --git a/win.py b/win.py\n--- a/win.py\n+++ b/win.py\n@@ -1,2 +1,2 @@\n A = 1\r\n-B = 2\r\n+B = 3\r\n"
    )
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG.format(repo=repo, cache=tmp_path / "cache"))
    out = CliRunner().invoke(build_command, ["--config", str(cfg), "--patch", str(patch), "--json", head])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert row["patch_hash"] and (Path(row["source_dir"]) / "win.py").read_bytes() == b"A = 1\r\nB = 3\r\n"


def test_worktree_is_never_reused(upstream, tmp_path):
    """A tree is where build steps write: even one that looks clean is checked out anew."""
    from bisector.build.worktree import Worktrees

    repo, shas = upstream
    trees = Worktrees(git.Repo(repo), tmp_path / "wt.lock")
    path = tmp_path / "wt" / "tree"
    assert trees.ensure(path, shas[0]) is False
    (path / "marker").write_text("x")
    (path / "marker").unlink()
    assert trees.ensure(path, shas[0]) is False and path.is_dir()
    (path / "build-output.o").write_text("x")
    assert trees.ensure(path, shas[0]) is False and not (path / "build-output.o").exists()
    assert trees.ensure(path, shas[1]) is False and (path / "fixturepkg" / "__init__.py").read_text() == "VALUE = 1\n"
    trees.remove(path)
    assert not path.exists() and path not in trees.registered()

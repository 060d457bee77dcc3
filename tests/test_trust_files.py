"""Code under test attacks the bot's files and messages as issue 57 found it could (items 1, 5, 6).

Real upstream modules run in real trial processes (spawned and forked, in the sandbox where the
host has one), real build steps in bash. Each attack here worked before the bot opened what trials
and steps write only through its own fds (bisector/isolation/safe_fs.py), took results from the
trial's own socket, accepted `ready` once and killed only what it started.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path

import git
import pytest

from bisector.build import Builder
from bisector.config import Build, BuildStep, Upstream, parse
from bisector.isolation import sandbox
from bisector.model import BuildResult, BuildStatus, TrialStatus
from bisector.runner import make_executor
from bisector.runner.executor import TrialJob
from tests.gitfixtures import commit_file
from tests.gitfixtures import git as run_git
from tests.processes import alive

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
SOURCES = pytest.mark.parametrize("source", ["spawn", "fork"])
A, B = "a" * 40, "b" * 40

KERNELS = textwrap.dedent('''
    import json, os, socket, sys, tempfile, time
    import torch

    PROBES = {probes!r}
    SECRET = {secret!r}
    VICTIM = {victim!r}
    VICTIM_PID = {victim_pid!r}

    def _commit():
        return os.path.basename(os.path.dirname(os.getcwd()))  # trials/<commit tag>/<this trial>

    def link_log(a, b):
        """Replace this trial's log.txt by a link to a file holding a token, then crash."""
        os.unlink("log.txt")
        os.symlink(SECRET, "log.txt")
        os._exit(3)

    def fifo_log(a, b):
        """Replace this trial's log.txt by a FIFO nobody writes, then crash."""
        os.unlink("log.txt")
        os.mkfifo("log.txt")
        os._exit(3)

    def plant(a, b):
        """Commit A's trial: put links where commit B's trial dir and JIT dir will be made."""
        work = os.path.dirname(os.path.dirname(os.path.dirname(os.getcwd())))
        at = {{"trials": os.path.join(work, "trials", "b" * 12), "jit": os.path.join(work, "jit", "b" * 40)}}
        for name, link in at.items():
            if _commit().startswith("aaaa") and not os.path.lexists(link):  # called once per repetition
                os.symlink(os.path.join(VICTIM, name), link)
        return a @ b

    def say_ready(a, b):
        """Say `ready` again, naming a process of the host, then hang until the time limit."""
        line = (json.dumps({{"msg": "ready", "pid": VICTIM_PID}}) + "\\n").encode()
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{{fd}}").startswith("socket:"):
                    socket.socket(fileno=os.dup(int(fd))).sendall(line)
            except OSError:
                pass
        time.sleep(600)
        return a @ b

    _filled = []

    def fill_scratch(a, b):
        """Fill the temp dir (up to 1.5 GiB, once per trial) and leave it all there; note what was seen."""
        if not _filled:
            _filled.append(1)
            tmp = tempfile.gettempdir()
            mark = os.path.join(tmp, "junk")
            found = os.path.exists(mark)
            written, chunk = 0, b"x" * (16 << 20)
            try:
                with open(mark, "ab") as fh:
                    while written < (3 << 29):
                        fh.write(chunk)
                        fh.flush()
                        written += len(chunk)
            except OSError as exc:
                pass
            parent = os.path.dirname(tmp)
            with open(os.path.join(PROBES, str(time.time_ns()) + ".json"), "w") as fh:
                json.dump({{"tmp": tmp, "found": found, "written": written, "beside": sorted(os.listdir(parent))}}, fh)
        return a @ b
''')


def config(tmp_path: Path, entry: str, timeout: float = 120.0, jit: tuple[str, ...] = ()):
    data = {
        "name": "x",
        "upstream": {"repo": str(tmp_path)},
        "device": {"kind": "cpu", "visible": [0]},
        "control": {"backend": "torch"},
        "subject": {"gemm": {"entry": entry, "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 32, "N": 32, "K": 32, "dtype": "fp32"}]}},
        "protocol": {"reps": 2, "warmup": 1, "flush_mb": 1, "timeout_s": timeout, "jit_cache_env": list(jit)},
    }
    return parse(data, tmp_path / "x.toml")


def upstream(tmp_path: Path, **values: object) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    values = {"secret": "", "victim": "", "victim_pid": 0, "probes": "", **values}
    (src / "kern.py").write_text(KERNELS.format(**values))
    return src


def run(cfg, tmp_path: Path, source: str, *jobs: TrialJob):
    with make_executor(cfg, tmp_path / "work", source=source, ahead=0, lock_devices=False) as executor:
        return [executor.run([job])[0] for job in jobs]


def job(cfg, src: Path, sha: str, first: bool = False) -> TrialJob:
    return TrialJob(BuildResult(sha, BuildStatus.OK, str(src)), cfg.shapes, seed=1, first=first)


@linux
@SOURCES
def test_a_log_replaced_by_a_link_is_not_read(tmp_path: Path, source: str) -> None:
    """Item 1: a crashed trial's log.txt turned into a link to a file holding a token; the bot
    stores a crash's log tail (store, export, trials.csv.gz), so it must not read through the link."""
    token = "ghp_" + uuid.uuid4().hex
    secret = tmp_path / "secret.env"
    secret.write_text(f"GITHUB_TOKEN={token}\n")
    src = upstream(tmp_path, secret=str(secret))
    cfg = config(tmp_path, "kern:link_log")
    (outcome,) = run(cfg, tmp_path, source, job(cfg, src, A))
    (rec,) = outcome.records
    assert rec.status is TrialStatus.CRASH, rec
    log = tmp_path / "work" / rec.protocol["log_path"]
    assert log.is_symlink(), "the attack did not take place"
    assert token not in rec.log_tail + rec.error + str(rec.protocol), "the bot read the token through the link"
    assert "not read" in rec.log_tail, rec.log_tail


@linux
def test_a_log_replaced_by_a_fifo_does_not_hang_the_bot(tmp_path: Path) -> None:
    """Item 1: a FIFO at log.txt, which an open for reading waits on for ever."""
    src = upstream(tmp_path)
    cfg = config(tmp_path, "kern:fifo_log")
    got: list = []
    worker = threading.Thread(target=lambda: got.extend(run(cfg, tmp_path, "fork", job(cfg, src, A))), daemon=True)
    worker.start()
    worker.join(timeout=300)
    assert got, "the bot hung reading a trial's log"
    (rec,) = got[0].records
    assert rec.status is TrialStatus.CRASH and "not read" in rec.log_tail, rec.log_tail


@linux
@SOURCES
def test_links_planted_at_another_commits_dirs_are_not_written_through(tmp_path: Path, source: str) -> None:
    """Item 1: commit A's trial puts links at commit B's `trials/<sha>` and `jit/<sha>`; the bot
    makes B's trial dir and JIT dirs where they belong, writing nothing where the links point."""
    victim = tmp_path / "victim"
    (victim / "trials").mkdir(parents=True)
    (victim / "jit").mkdir()
    src = upstream(tmp_path, victim=str(victim))
    cfg = config(tmp_path, "kern:plant", jit=("TRITON_CACHE_DIR",))
    first, second = run(cfg, tmp_path, source, job(cfg, src, A, first=True), job(cfg, src, B))
    assert first.records[0].status is TrialStatus.OK, first.records[0].error + first.records[0].log_tail
    (rec,) = second.records
    assert rec.status is TrialStatus.OK, rec.error + rec.log_tail
    written = sorted(str(p.relative_to(victim)) for p in victim.rglob("*"))
    assert written == ["jit", "trials"], f"the bot wrote through a trial's links: {written}"
    work = tmp_path / "work"
    assert (work / "trials" / ("b" * 12)).is_dir() and not (work / "trials" / ("b" * 12)).is_symlink()
    assert (work / "jit" / B / "triton_cache_dir").is_dir() and not (work / "jit" / B).is_symlink()


@linux
@SOURCES
def test_a_ready_naming_another_process_gets_it_killed_never(tmp_path: Path, source: str) -> None:
    """Item 5: a trial re-sends `ready` with the pid of a host process (its own group), then hangs:
    at the trial's time limit the bot kills the trial, and that process lives on."""
    victim = subprocess.Popen(["sleep", "900"], start_new_session=True)
    try:
        src = upstream(tmp_path, victim_pid=victim.pid)
        cfg = config(tmp_path, "kern:say_ready", timeout=20.0)
        (outcome,) = run(cfg, tmp_path, source, job(cfg, src, A))
        (rec,) = outcome.records
        assert rec.status is TrialStatus.TIMEOUT, rec.error + rec.log_tail
        assert victim.poll() is None and alive(victim.pid), "the bot killed a process it never started"
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


@linux
@SOURCES
def test_a_trials_scratch_is_its_own_bounded_and_gone_after_it(tmp_path: Path, source: str, monkeypatch) -> None:
    """Item 6: two trials in a row each fill their temp dir and leave it full. Each had a temp dir
    of its own, the second found nothing of the first's, nothing is left after them, and where the
    sandbox runs, a trial's temp files are bounded (its private tmpfs) rather than the disk's."""
    probes = tmp_path / "probes"
    probes.mkdir()
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(probes))
    src = upstream(tmp_path, probes=str(probes))
    cfg = config(tmp_path, "kern:fill_scratch")
    outcomes = run(cfg, tmp_path, source, job(cfg, src, A), job(cfg, src, A))
    assert all(o.records[0].status is TrialStatus.OK for o in outcomes), [o.records[0].error for o in outcomes]
    seen = [json.loads(p.read_text()) for p in sorted(probes.glob("*.json"))]
    assert len(seen) == 2 and all(s["written"] for s in seen), seen
    assert not seen[1]["found"], f"the second trial found the first's temp files: {seen}"
    if source == "fork":  # one sandbox for both: the first's dir was gone when the second looked
        assert os.path.basename(seen[0]["tmp"]) not in seen[1]["beside"], seen
    scratch = tmp_path / "work" / "scratch"
    assert not scratch.exists() or not any(scratch.iterdir()), f"left in scratch: {list(scratch.iterdir())}"
    if sandbox.applies(gpu=False):
        assert all(s["written"] <= sandbox.SHM_MB << 20 for s in seen), [s["written"] for s in seen]


# -- build steps -------------------------------------------------------------------------------


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """Two commits of one branch with the same pin, and a pull request's head off it (same pin)."""
    path = tmp_path / "upstream"
    path.mkdir()
    run_git(path, "init", "-q", "-b", "main")
    commit_file(path, "pin.txt", "llvm-aaaa\n", "pin", 1)
    shas = [commit_file(path, "code.txt", "one\n", "one", 2), commit_file(path, "code.txt", "two\n", "two", 3)]
    run_git(path, "checkout", "-q", "-b", "pr")
    shas.append(commit_file(path, "code.txt", "evil\n", "a pull request", 4))
    run_git(path, "checkout", "-q", "main")
    return path, shas


def builder(repo: Path, tmp_path: Path, *steps: BuildStep) -> Builder:
    return Builder(git.Repo(repo), Upstream(repo=str(repo)), Build(recipe="command", steps=steps), tmp_path / "cache")


def test_a_build_step_cannot_steer_the_caches_own_files(repo, tmp_path: Path) -> None:
    """Item 1: a step links `.complete.tmp` and `.last_used` of its entry to files of the bot's;
    finishing and using the entry must not write them."""
    path, shas = repo
    victims = [tmp_path / "victim-complete.txt", tmp_path / "victim-used.txt"]
    for v in victims:
        v.write_text("the bot's own\n")
        os.utime(v, (1, 1))
    step = BuildStep(run=f"ln -s {victims[0]} ../.complete.tmp; ln -s {victims[1]} ../.last_used")
    b = builder(path, tmp_path, step)
    first = b.build(shas[0])
    assert first.status is BuildStatus.OK, first.log_tail
    assert (Path(first.source_dir).parent / ".last_used").is_symlink(), "the attack did not take place"
    assert b.build(shas[0]).cache_hit
    for v in victims:
        assert v.read_text() == "the bot's own\n" and v.stat().st_mtime == 1, f"the bot wrote {v}"


def test_a_shared_dir_is_shared_by_the_branch_alone_and_sealed(repo, tmp_path: Path) -> None:
    """Item 6: a pull request's build fills the keyed step's shared dir first (same pin as the
    branch); the branch's commits must not link against it. Then the branch's sealed dir is changed
    (as an unsandboxed writer could): the next build finds it changed and builds it again."""
    path, shas = repo
    llvm = BuildStep(run='cp code.txt "$LLVM_DIR/built-from.txt"', key_files=("pin.txt",), shared_dir="LLVM_DIR")
    uses = BuildStep(run='cp "$LLVM_DIR/built-from.txt" linked.txt; echo "$LLVM_DIR" > llvm-dir.txt')
    b = builder(path, tmp_path, llvm, uses)
    pr = b.build(shas[2])
    assert pr.status is BuildStatus.OK, pr.log_tail
    assert (Path(pr.source_dir) / "linked.txt").read_text() == "evil\n"
    mains = [b.build(sha) for sha in shas[:2]]
    assert all(r.status is BuildStatus.OK for r in mains), [r.log_tail for r in mains]
    linked = [(Path(r.source_dir) / "linked.txt").read_text() for r in mains]
    assert linked == ["one\n", "one\n"], f"the branch linked against a pull request's build: {linked}"
    shared = Path((Path(mains[0].source_dir) / "llvm-dir.txt").read_text().strip())
    assert not (shared / "built-from.txt").stat().st_mode & 0o222, "the shared output was not made read-only"
    os.chmod(shared / "built-from.txt", 0o644)
    (shared / "built-from.txt").write_text("changed\n")
    three = commit_file(path, "code.txt", "three\n", "three", 5)
    fresh = builder(path, tmp_path, llvm, uses).build(three)  # a later run, same cache
    assert fresh.status is BuildStatus.OK, fresh.log_tail
    assert (Path(fresh.source_dir) / "linked.txt").read_text() == "three\n", "a changed shared dir was used"


def test_a_link_in_a_jit_dir_is_not_carried_into_the_report(tmp_path: Path) -> None:
    """Item 1, the kernel diff: a trial may write its commit's JIT dir; a kernel's stage there made
    a link to a file holding a token must not be copied beside the report, nor the dir made a link."""
    from bisector.why.kernel_diff import artifacts
    from bisector.why.kernel_diff.collect import keep_commit

    token = "ghp_" + uuid.uuid4().hex
    secret = tmp_path / "secret.env"
    secret.write_text(f"GITHUB_TOKEN={token}\n")
    work = tmp_path / "work"
    kernel = work / "jit" / A / "triton_cache_dir" / "abc"
    kernel.mkdir(parents=True)
    (kernel / "k.json").write_text(json.dumps({"name": "k"}))
    (kernel / "k.ttir").write_text("module { tt.func @k() }\n")
    (kernel / "k.llir").symlink_to(secret)
    (work / "jit" / B).symlink_to(work / "jit" / A)
    out = tmp_path / "report"
    kept = keep_commit(work, out, A)
    texts = [gzip.decompress(p.read_bytes()).decode() for p in kept.rglob("*.gz")]
    assert texts and any("tt.func" in t for t in texts), texts
    assert not any(token in t for t in texts), "a linked stage was copied into the report"
    assert not artifacts.find_kernels(work / "jit" / B), "the kernels of a linked JIT dir were read"

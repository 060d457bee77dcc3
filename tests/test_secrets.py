"""No secret reachable by code under test: the real CLI, a fake token in its environment, an
upstream whose build step, import check and kernel each go looking for it.

`python -m bisector run --publish` runs as a subprocess (as the console script would) with
GITHUB_TOKEN, BISECTOR_GITHUB_TOKEN, a *_PAT and a URL with a password in its environment, on a
real git upstream built with the `command` recipe. The upstream's code, wherever the bot runs it,
reads its own environment, /proc/<pid>/environ and cmdline of every ancestor (walking
/proc/<pid>/stat), the files its ancestors hold open and the files in their working directories,
and writes everything it read to a file. None of it may hold a secret; a canary variable that is
not a secret must be found, so the probes are known to have read what they claim. Publishing still
works: the local GitHub server saw the token, which the bot read from its in-memory vault.

Run as root (CI does) the probes can read every process's /proc files; only the scrubbed re-exec
keeps the bot's own /proc/<pid>/environ clean. Where the host allows the sandbox
(bisector/isolation/sandbox.py) the probes see no ancestor outside it at all: their own PID namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import git as gitpython
import pytest

from bisector.build import Builder
from bisector.config import Build, BuildStep, Upstream
from bisector.isolation import sandbox
from bisector.isolation.sandbox import probe as sandbox_probe
from bisector.model import BuildStatus
from tests.devices import CONTROL, DEVICES
from tests.fakegithub import FakeGitHub
from tests.gitfixtures import commit_file, git

needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {
    "GITHUB_TOKEN": "ghp_probeA0123456789abcdefghijklmnopqrstu",
    "BISECTOR_GITHUB_TOKEN": "ghp_probeB0123456789abcdefghijklmnopqrstu",
    "MY_PAT": "probeC-plain-looking-personal-access-token",
    "DATABASE_URL": "postgres://app:probeD-password@db.internal/prod",
}
NEEDLES = ("probeA0123456789", "probeB0123456789", "probeC-plain-looking", "probeD-password")
CANARY = "canary-value-7f3a"

PROBE = '''"""Upstream code that goes looking for the bot's token (what a hostile fork PR would do)."""
import json, os, stat, sys

CAP = 256 * 1024


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(CAP).decode("utf-8", "replace")
    except OSError as exc:
        return f"<{type(exc).__name__}: {exc}>"


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _regular_files(paths):
    out = {}
    for path in paths:
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                out[path] = _read(path)
        except OSError:
            pass
    return out


def look(tag):
    found = {"tag": tag, "pid": os.getpid(), "argv": sys.argv, "environ": dict(os.environ),
             "self_environ": _read("/proc/self/environ"), "ancestors": []}
    pid = os.getppid()
    while pid > 1:
        fd_dir, cwd = f"/proc/{pid}/fd", f"/proc/{pid}/cwd"
        try:
            fds = [os.path.join(fd_dir, n) for n in os.listdir(fd_dir)]
        except OSError as exc:
            fds = []
        try:
            cwd_files = [os.path.join(cwd, n) for n in os.listdir(cwd)]
        except OSError:
            cwd_files = []
        found["ancestors"].append({
            "pid": pid, "cmdline": _read(f"/proc/{pid}/cmdline").replace("\\0", " "),
            "environ": _read(f"/proc/{pid}/environ"), "open_files": _regular_files(fds),
            "cwd_files": _regular_files(cwd_files)})
        pid = _ppid(pid)
    found["own_cwd_files"] = _regular_files(os.listdir("."))
    out = os.path.join(os.environ["PROBE_DIR"], f"{tag}-{os.getpid()}.json")
    with open(out, "w") as fh:
        json.dump(found, fh)


if __name__ == "__main__":
    look(sys.argv[1])
'''

KERNEL = """from lib import probe

_looked = False


def matmul(a, b):
    global _looked
    if not _looked:
        _looked = True
        probe.look("kernel")
    return a @ b
"""

CONFIG = """name = "secrets-test"
[upstream]
repo = "{repo}"
[build]
recipe = "command"
import_check = "lib"
cache_dir = "{tmp}/builds"
[[build.steps]]
run = "{python} lib/probe.py build"
[device]
kind = "{kind}"
visible = [0]
[control]
backend = "{control}"
[subject.gemm]
entry = "lib.gemm:matmul"
adapter = "torch"
[[suites.gemm.shapes]]
name = "m64"
M = 64
N = 64
K = 64
dtype = "fp32"
[protocol]
trials = 2
max_trials = 2
reps = 3
warmup = 1
timeout_s = 300
jit_cache_env = []
[thresholds]
min_step_pct = 50.0
alpha = 0.05
[publish]
repo = "ada/lib"
token_env = "BISECTOR_GITHUB_TOKEN"
base_url = "{url}"
commit_status = false
"""


@pytest.fixture()
def upstream(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "lib/probe.py", PROBE, "the probe (#1)", 1)
    commit_file(repo, "lib/gemm.py", KERNEL, "the kernel (#2)", 2)
    good = commit_file(repo, "lib/__init__.py", 'from lib import probe\nprobe.look("import")\n', "import (#3)", 3)
    bad = commit_file(repo, "README.md", "lib\n", "docs (#4)", 4)
    return repo, [good, bad]


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("device", DEVICES)
def test_no_token_reaches_the_build_the_import_check_or_the_kernel(tmp_path: Path, upstream, device: str) -> None:
    repo, (good, bad) = upstream
    probes = tmp_path / "probes"
    probes.mkdir()
    with FakeGitHub() as fake:
        fake.add_repo("ada/lib", {"README.md": "lib\n"})
        cfg = tmp_path / "cfg.toml"
        cfg.write_text(
            CONFIG.format(
                repo=repo, tmp=tmp_path, python=sys.executable, url=fake.url, kind=device, control=CONTROL[device]
            )
        )
        # the host's own PYTHONPATH kept behind the checkout (a GPU host's packages may live there)
        path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "PYTHONPATH": path,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "BISECTOR_LOCK_DIR": str(tmp_path / "locks"),
            "PROBE_DIR": str(probes),
            "CANARY_SETTING": CANARY,
            "BISECTOR_SANDBOX_WRITABLE": str(probes),
            **SECRETS,
        }
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
                bad,
                "--store",
                str(tmp_path / "s.sqlite"),
                "--work-dir",
                str(tmp_path / "work"),
                "--report-dir",
                str(tmp_path / "report"),
                "--no-fixes",
                "--no-hunks",
                "--publish",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        # publishing worked, with the token from the vault
        assert fake.saw_token(SECRETS["BISECTOR_GITHUB_TOKEN"])

    records = [json.loads(p.read_text()) for p in sorted(probes.glob("*.json"))]
    kinds = {
        "build": [r for r in records if r["tag"] == "build"],
        "import check": [r for r in records if r["tag"] == "import" and r["argv"][0] == "-c"],
        "kernel": [r for r in records if r["tag"] == "kernel"],
    }
    assert all(kinds.values()), {k: len(v) for k, v in kinds.items()}
    for kind, found in kinds.items():
        for r in found:
            # the probe really read: its own environment, and the bot's environ among its ancestors'
            assert r["environ"].get("CANARY_SETTING") == CANARY, kind
            bots = [a for a in r["ancestors"] if " -m bisector run " in a["cmdline"]]
            # its own PID namespace: no ancestor beyond the sandbox's init (a GPU's trials too, where
            # its driver initializes inside: sandbox.applies)
            if sandbox_probe().sandboxed and (device == "cpu" or kind != "kernel" or sandbox.applies(gpu=True)):
                assert not bots and all(a["pid"] > 1 for a in r["ancestors"]), kind
            else:
                assert len(bots) == 1 and f"CANARY_SETTING={CANARY}" in bots[0]["environ"], kind
                assert len(r["ancestors"]) >= 2 and any(a["open_files"] for a in r["ancestors"]), kind
            if device == "cuda" and kind == "kernel":  # it ran on the GPU, pinned to its device
                assert r["environ"].get("CUDA_VISIBLE_DEVICES") not in (None, ""), r["environ"]
    text = "\n".join(p.read_text() for p in probes.glob("*.json"))
    assert CANARY in text
    leaked = [needle for needle in NEEDLES if needle in text]
    assert not leaked, f"code under test found {leaked}"
    assert not [n for n in NEEDLES if n in out.stdout + out.stderr]


DUMP = 'import json, os, sys; json.dump(dict(os.environ), open(os.path.join(os.environ["PROBE_DIR"], {}), "w"))'


def test_builds_scrub_even_an_unscrubbed_bot_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defense in depth: a library caller that never went through the CLI entry (its os.environ
    still holds the token) gets build steps, patched builds and the import check without it."""
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "dump.py", DUMP.format("sys.argv[1]") + "\n", "dump (#1)", 1)
    sha = commit_file(repo, "pkg/__init__.py", DUMP.format("'import.json'") + "\n", "pkg (#2)", 2)
    probes = tmp_path / "probes"
    probes.mkdir()
    for name, value in {
        **SECRETS,
        "PROBE_DIR": str(probes),
        "CANARY_SETTING": CANARY,
        "BISECTOR_SANDBOX_WRITABLE": str(probes),
    }.items():
        monkeypatch.setenv(name, value)
    build = Build(recipe="command", steps=(BuildStep(run=f"{sys.executable} dump.py step.json"),), import_check="pkg")
    builder = Builder(gitpython.Repo(repo), Upstream(repo=str(repo)), build, tmp_path / "cache")
    patch = (
        "diff --git a/extra.txt b/extra.txt\nnew file mode 100644\n--- /dev/null\n+++ b/extra.txt\n@@ -0,0 +1 @@\n+x\n"
    )
    for p in (None, patch):
        result = builder.build(sha, patch=p)
        assert result.status is BuildStatus.OK, result.log_tail
        for name in ("step.json", "import.json"):
            seen = json.loads((probes / name).read_text())
            assert seen["CANARY_SETTING"] == CANARY and not set(SECRETS) & set(seen), (p is not None, name)
            assert not [n for n in NEEDLES if n in json.dumps(seen)]
            (probes / name).unlink()

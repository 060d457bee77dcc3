"""benches.worker's preload: what a zygote computes once so that no forked trial computes it again."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD_SEES = textwrap.dedent("""
    import os, sys
    from benches import worker
    assert worker.preload(["triton"]) == []
    from triton.runtime.cache import triton_key
    pid = os.fork()
    if pid == 0:  # a trial forked from the zygote: Triton's key is there before its first JIT call
        os._exit(0 if triton_key.cache_info().currsize == 1 and triton_key.cache_info().misses == 1 else 3)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def test_a_forked_trial_inherits_tritons_cache_key() -> None:
    """Every trial's first kernel call hashed Triton's compiler files and libtriton (~0.4 s of CPU
    a trial, studies/results/h200-first-calls.txt); the zygote hashes them once before it forks."""
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, "-c", CHILD_SEES], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_forked_trial_inherits_what_tritons_first_call_imports() -> None:
    """Triton 3.6 imported its Gluon dialect at each trial's first kernel call (0.15 s of the demo's
    attention precompile on the H200 host); the zygote imports it before it forks."""
    pytest.importorskip("triton")
    code = (
        "import sys, importlib.util; from benches import worker; worker.preload(['triton']); "
        "sys.exit(0 if all(n in sys.modules for n in worker.TRITON_LAZY if importlib.util.find_spec(n)) else 3)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fresh = subprocess.run(
        [sys.executable, "-c", "import sys, triton; sys.exit('triton.experimental.gluon' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fresh.returncode == 0, "importing triton alone loads Gluon already: the preload would change nothing"


def test_a_preload_without_triton_computes_nothing() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from benches import worker; import sys; worker.preload(['json']); sys.exit('triton' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def _worker(tmp_path: Path) -> tuple[socket.socket, object, subprocess.Popen]:
    """A spawned benches.worker on a socketpair, as bisector/runner/workers.py starts one."""
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benches.worker", "--fd", str(theirs.fileno()), "--preload", "json"],
        pass_fds=[theirs.fileno()],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )
    theirs.close()
    return ours, ours.makefile("r"), proc


def test_an_idle_worker_opens_its_device_and_refuses_a_trial_for_another(tmp_path: Path) -> None:
    """The executor sends an idle worker its device's environment (`Prelude`) before any trial; the
    worker applies it, opens the device (nothing to open on a CPU host: None seconds) and says so. A
    trial whose environment pins another device is refused, never timed on the wrong context."""
    sock, lines, proc = _worker(tmp_path)
    try:
        assert json.loads(lines.readline())["msg"] == "ready"
        sock.sendall(
            (
                json.dumps({"device": {"kind": "cuda", "env": {"CUDA_VISIBLE_DEVICES": "3"}, "unset": []}}) + "\n"
            ).encode()
        )
        opened = json.loads(lines.readline())
        assert opened["msg"] == "opened" and opened["s"] is None  # no CUDA device here
        job = {
            "spec": "s",
            "out": "o",
            "log": str(tmp_path / "log"),
            "cwd": str(tmp_path),
            "env": {"CUDA_VISIBLE_DEVICES": "1"},
            "unset": [],
            "cpu": None,
        }
        sock.sendall((json.dumps({"job": job}) + "\n").encode())
        assert proc.wait(timeout=60) != 0
        assert "differs from its trial's: ['CUDA_VISIBLE_DEVICES']" in proc.stderr.read()
    finally:
        sock.close()
        proc.kill()
        proc.wait()


def test_the_device_environment_is_the_trials_less_its_jit_dirs(tmp_path: Path) -> None:
    """`device_env` holds what every trial on the device sets (pinned device, the config's own
    variables) and nothing of a build's: an idle worker's prelude cannot name a commit's JIT dir."""
    from bisector.config import parse
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner.launch import device_env, trial_env

    cfg = parse(
        {
            "name": "x",
            "upstream": {"repo": str(tmp_path)},
            "device": {"kind": "cuda", "visible": [0, 1]},
            "control": {"backend": "torch_cuda"},
            "subject": {"gemm": {"entry": "k:mm", "adapter": "torch"}},
            "suites": {"gemm": {"shapes": [{"name": "a", "M": 64, "N": 64, "K": 64, "dtype": "fp32"}]}},
            "protocol": {"env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
        },
        tmp_path / "x.toml",
    )
    base = {"CUDA_VISIBLE_DEVICES": "4,5", "PATH": "/bin"}
    build = BuildResult("a" * 40, BuildStatus.OK, str(tmp_path), "")
    env, unset = device_env(cfg, 1, base)
    trial, _ = trial_env(cfg, build, tmp_path, 1, False, base)
    assert env == {"CUDA_VISIBLE_DEVICES": "5", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} and unset == ()
    assert {k: v for k, v in trial.items() if k in env} == env and "TRITON_CACHE_DIR" in trial

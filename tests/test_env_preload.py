"""The environment's modules a library's trials import, imported once by the zygote: what a trial
reports, what the zygote refuses (names from the checkout or a planted dir, names that are not
module names, imports that start a thread or kill their process), and, through the executor, that a
later trial starts with them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benches import env_preload
from bisector.errors import BadInput
from bisector.runner import make_executor
from bisector.runner.executor import TrialJob
from tests.devices import needs_cuda
from tests.test_bad_input import CONFIG
from tests.test_executor import build, config

# stdlib modules neither torch nor the worker's preload imports: the subject below imports them
UNUSED = ("tabnanny", "pyclbr")


def test_the_topmost_names_cover_the_rest() -> None:
    assert env_preload.topmost(["sympy", "sympy.core", "sympy.core.add", "torch._dynamo", "mpmath"]) == [
        "mpmath",
        "sympy",
        "torch._dynamo",
    ]
    assert env_preload.reported(["a.b", "bad name", "a.b.c", "../x"]) == ["a.b"]


@pytest.fixture
def planted(tmp_path: Path, monkeypatch) -> Path:
    """A dir on sys.path with modules a hostile commit could write there."""
    d = tmp_path / "planted"
    d.mkdir()
    (d / "plain_mod.py").write_text("X = 1\n")
    (d / "starts_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    )
    (d / "kills_it.py").write_text("import os\nos._exit(7)\n")
    monkeypatch.syspath_prepend(str(d))
    return d


def test_a_name_not_from_the_interpreters_install_dirs_is_refused(planted: Path) -> None:
    done, rejected = env_preload.probe(["plain_mod", UNUSED[0], "os;rm", "x" * 200])
    assert done == [UNUSED[0]]
    assert rejected["plain_mod"] == "not from this interpreter's install dirs"
    assert rejected["os;rm"] == "not a module name" and any(k.startswith("xxx") for k in rejected)


def test_an_import_that_starts_a_thread_or_kills_its_process_is_refused(planted: Path, monkeypatch) -> None:
    """Taken as the environment's (its dir made an install dir) to reach the import itself."""
    monkeypatch.setattr(env_preload, "env_roots", lambda: [str(planted.resolve())])
    done, rejected = env_preload.probe(["plain_mod", "starts_thread", "never_reached"])
    assert done == ["plain_mod"] and rejected == {"starts_thread": "its import started a thread"}
    assert env_preload.probe(["kills_it"]) == ([], {"*": "the probe did not finish (it died, hung or wrote nothing)"})
    assert "plain_mod" not in sys.modules  # all of it in the probe's child


KERNELS = textwrap.dedent(f"""
    import {", ".join(UNUSED)}

    def mm(a, b):
        return a @ b
""")


def test_a_later_trial_starts_with_what_the_first_imported_from_the_environment(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "kern.py").write_text(KERNELS)
    cfg = config(tmp_path)
    with make_executor(cfg, tmp_path / "work", source="fork", ahead=0, lock_devices=False) as executor:
        executor.learn_imports = True  # a GPU's executor does; on the CPU it is off
        (first,) = executor.run([TrialJob(build(src), cfg.shapes, seed=0, slot=0)])
        reported = first.records[0].protocol["env_imports"]
        assert set(UNUSED) <= set(reported) and "kern" not in reported
        deadline = time.monotonic() + 60
        while not executor.source.preloaded and time.monotonic() < deadline:
            time.sleep(0.05)
        (answer,) = executor.source.preloaded
        assert set(UNUSED) <= set(answer["loaded"])
        (second,) = executor.run([TrialJob(build(src), cfg.shapes, seed=1, slot=1)])
    assert second.records[0].status.value == "ok"
    assert not set(UNUSED) & set(second.records[0].protocol["env_imports"])  # there before it began


def test_the_zygote_reads_a_preload_word_whole_whatever_letters_it_holds() -> None:
    """The zygote's words are single letters (fork, retire); a preload's names hold those letters."""
    from benches.worker import control_words

    assert control_words(b'p["torch.distributed"]\nrw') == (
        [(b"p", b'["torch.distributed"]'), (b"r", b""), (b"w", b"")],
        b"",
    )
    words, rest = control_words(b'wp["sympy", "mpm')
    assert words == [(b"w", b"")] and rest == b'p["sympy", "mpm'
    assert control_words(rest + b'ath"]\n') == ([(b"p", b'["sympy", "mpmath"]')], b"")


@needs_cuda
@pytest.mark.gpu
def test_an_import_that_initializes_cuda_is_refused(planted: Path) -> None:
    """A fork of a process that has initialized CUDA cannot use the device: such a module would break
    every later trial, so the zygote never imports it. In a fresh process, as a zygote is (this one
    may have opened the device for another test), which imports torch first, as a zygote does."""
    (planted / "inits_cuda.py").write_text("import torch\ntorch.cuda.init()\n")
    code = textwrap.dedent(f"""
        import json, sys, torch
        from benches import env_preload
        env_preload.env_roots = lambda: [{str(planted.resolve())!r}]
        sys.path.insert(0, {str(planted)!r})
        print(json.dumps(env_preload.probe(["plain_mod", "inits_cuda", "never_reached"])))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done, rejected = json.loads(proc.stdout.strip().splitlines()[-1])
    assert done == ["plain_mod"] and rejected == {"inits_cuda": "its import loaded the GPU driver"}


def test_a_config_turns_the_learning_off(tmp_path: Path) -> None:
    from bisector.config import load

    path = tmp_path / "c.toml"
    path.write_text(CONFIG.format(repo="/tmp/x") + "[protocol]\nlearn_imports = false\n")
    assert load(path).protocol.learn_imports is False
    path.write_text(CONFIG.format(repo="/tmp/x"))
    assert load(path).protocol.learn_imports is True
    path.write_text(CONFIG.format(repo="/tmp/x") + '[protocol]\nlearn_imports = "no"\n')
    with pytest.raises(BadInput, match="learn_imports"):
        load(path)


def test_a_zygote_that_dies_after_learning_is_replaced_by_one_not_asked(tmp_path: Path) -> None:
    """Whatever killed it may be what it was asked to import: its successor starts with the plain
    preload and nothing more is asked, so one commit's names cannot end the run (ZYGOTE_RESTARTS)."""
    import os
    import selectors

    from bisector.runner.workers import ForkSource

    source = ForkSource(dict(os.environ), [], tmp_path)
    try:
        source.learn([UNUSED[0]])
        with selectors.DefaultSelector() as sel:
            for sock in source.sockets():
                sel.register(sock, selectors.EVENT_READ)
            deadline = time.monotonic() + 60
            while not source.preloaded and time.monotonic() < deadline:
                for key, _ in sel.select(0.2):
                    source.on_readable(key.fileobj, [])
        assert source.preloaded and source.preloaded[0]["loaded"] == [UNUSED[0]]
        source.proc.kill()
        source.proc.wait()
        source.start().kill()
        assert source.restarts == 1 and source.learned == [] and "*" in source.refused
        source.learn([UNUSED[1]])
        assert source.learned == []
    finally:
        source.close()

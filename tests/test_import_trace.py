"""The trial's import trace: a real trial process (`python -m benches.trial`) over a checkout whose
subject imports some of its files and not others records exactly the ones it loaded, relative to
the checkout; through `bisector bench` the trace lands in the store with the trial."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from benches import import_trace
from tests.test_trial import bench_setup, spec


def checkout(root: Path) -> None:
    """A library whose entry imports two of its modules; a test, a benchmark script and an unused
    module are never imported."""
    files = {
        "lib/__init__.py": "",
        "lib/ops.py": "from lib import helpers\n\ndef mm(a, b, tile=None):\n    return helpers.matmul(a, b)\n",
        "lib/helpers.py": "def matmul(a, b):\n    return a @ b\n",
        "lib/unused.py": "raise RuntimeError('never imported')\n",
        "tests/test_ops.py": "from lib.ops import mm\n",
        "benchmark/bench_ops.py": "import lib.ops\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_a_trial_process_records_the_checkout_files_it_imported(tmp_path: Path) -> None:
    up = tmp_path / "up"
    checkout(up)
    (tmp_path / "spec.json").write_text(json.dumps(spec("lib.ops:mm", source_dirs=[str(up)])))
    proc = subprocess.run(
        [sys.executable, "-m", "benches.trial", "spec.json", "out.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert [r["status"] for r in out["results"]] == ["ok", "ok"]
    assert out["protocol"]["imported"] == ["lib/__init__.py", "lib/helpers.py", "lib/ops.py"]


def test_triton_kernel_sources_are_read_from_the_jit_cache(tmp_path: Path) -> None:
    """A kernel's code can come from a file no module names (exec'd, generated): the TTIR's
    locations say which; files outside the checkout are left out."""
    up = tmp_path / "up"
    checkout(up)
    cache = tmp_path / "cache" / "HASH"
    cache.mkdir(parents=True)
    kern = (up / "lib" / "kern_src.py").resolve()
    (cache / "_k.ttir").write_text(
        f'#loc = loc("{kern}":3:0)\nmodule {{ tt.func @_k() loc(#loc) }}\n#loc1 = loc("/usr/lib/python3/site.py":1:0)\n'
    )
    (cache / "_j.ttgir.gz").write_bytes(gzip.compress(f'#loc = loc("{up.resolve()}/lib/helpers.py":1:0)\n'.encode()))
    assert import_trace.kernel_sources(str(cache.parent)) == sorted(
        [str(kern), f"{up.resolve()}/lib/helpers.py", "/usr/lib/python3/site.py"]
    )
    got = import_trace.loaded_files([str(up)], str(cache.parent))
    assert "lib/kern_src.py" in got and "lib/helpers.py" in got
    assert not any(p.startswith(("/", "tests/", "benchmark/")) for p in got)


def test_the_trace_is_stored_with_each_trial(tmp_path: Path) -> None:
    from bisector.commands.bench_cmd import command
    from bisector.store import Store

    cfg, _ = bench_setup(tmp_path)
    res = CliRunner().invoke(command, ["--config", str(cfg), "--trials", "1", "--work", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    (stored,) = Store(tmp_path / "store.sqlite").trials("bench")
    assert stored.protocol["imported"] == ["kern.py"]


def test_a_module_with_a_relative_file_is_not_taken_for_the_checkouts(tmp_path: Path, monkeypatch) -> None:
    """Some modules name a bare file (`_classes.py`): resolved against the working directory (the
    checkout, where trials run) it would look loaded from the checkout."""
    import types

    up = tmp_path / "up"
    checkout(up)
    monkeypatch.chdir(up)
    monkeypatch.setitem(sys.modules, "fake_relative", types.SimpleNamespace(__file__="lib/unused.py"))
    assert "lib/unused.py" not in import_trace.loaded_files([str(up)], "")


def test_the_look_after_the_device_section_reads_only_what_is_new(tmp_path: Path, monkeypatch) -> None:
    """The trial looks once in its setup and once after its device section: the second look adds
    the kernels compiled and the modules imported since, and never reads a kernel file again (on
    the real libraries re-reading the whole JIT cache dir kept the next trial waiting 0.2-0.5 s)."""
    import types

    up = tmp_path / "up"
    checkout(up)
    cache = tmp_path / "cache" / "HASH"
    cache.mkdir(parents=True)
    seen = cache / "_k.ttir"
    seen.write_text(f'#loc = loc("{up.resolve()}/lib/kern_a.py":3:0)\n')
    trace = import_trace.ImportTrace([str(up)], str(cache.parent))
    assert trace.look() == ["lib/kern_a.py"]

    seen.write_text(f'#loc = loc("{up.resolve()}/lib/not_read_again.py":3:0)\n')
    (cache / "_new.ttgir").write_text(f'#loc = loc("{up.resolve()}/lib/kern_b.py":1:0)\n')
    monkeypatch.setitem(sys.modules, "lib_late", types.SimpleNamespace(__file__=str(up / "lib" / "unused.py")))
    assert trace.look() == ["lib/kern_a.py", "lib/kern_b.py", "lib/unused.py"]

"""benches/first_call.py: a first call's time split into imports, Triton's compiles and the rest,
and a trial's results carrying the split of its subject's first call."""

from __future__ import annotations

import builtins
import sys

from benches import first_call, trial
from tests.test_trial import spec


def test_imports_inside_a_call_are_named_apart_from_the_rest(tmp_path, monkeypatch) -> None:
    (tmp_path / "slow_lib_fc.py").write_text("import time\ntime.sleep(0.2)\nVALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    real = builtins.__import__

    def first() -> int:
        from slow_lib_fc import VALUE  # a library that imports its kernels inside the call

        return VALUE

    with first_call.parts() as found:
        assert first() == 3
    assert builtins.__import__ is real  # restored
    assert found["import_s"] >= 0.2 and found["jit_kernels"] == 0 and found["jit_s"] == 0.0
    assert found["other_s"] < found["import_s"]
    with first_call.parts() as again:  # loaded now: nothing imported
        first()
    assert again["import_s"] < 0.2
    sys.modules.pop("slow_lib_fc", None)


def test_a_trial_result_names_its_first_call_parts_and_the_store_keeps_them(tmp_path) -> None:
    from bisector.runner.launch import _record
    from bisector.store import Store
    from tests.test_kernel_time import COMMON

    out = trial.run(spec(), tmp_path / "out.json")
    for r in out["results"]:
        parts = r["compile_parts"]
        assert set(parts) == {"import_s", "jit_s", "jit_kernels", "other_s"}
        assert parts["import_s"] + parts["jit_s"] + parts["other_s"] >= 0.0
    with Store(tmp_path / "s.sqlite") as store:
        store.add_trials("c", [_record("f" * 40, raw, out, COMMON) for raw in out["results"]])
        stored = store.trials("c")
    assert [rec.protocol["compile_parts"] for rec in stored] == [r["compile_parts"] for r in out["results"]]


def test_a_gpu_config_of_a_library_called_through_its_python_preloads_triton(tmp_path) -> None:
    """Liger-Kernel's config calls its ops through a `callable` adapter: its workers' zygote imports
    Triton and hashes its compiler once, not each trial's first call. Not on the CPU."""
    from pathlib import Path

    from bisector.config import load
    from bisector.runner.launch import default_preload

    liger = Path(__file__).resolve().parent.parent / "benches" / "real" / "liger" / "config.toml"
    assert "triton" in default_preload(load(liger))
    cpu = tmp_path / "cpu.toml"
    (tmp_path / "liger_calls.py").write_text((liger.parent / "liger_calls.py").read_text())
    cpu.write_text(liger.read_text().replace('kind = "cuda"', 'kind = "cpu"').replace("visible = [0]\n", ""))
    assert "triton" not in default_preload(load(cpu))

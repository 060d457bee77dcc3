"""The autotuner's choices across a step (bisector/why/kernel_diff/autotune.py): read from the JIT dirs
in the format Triton writes (`Autotuner.check_disk_cache`, its configs' own `__dict__`), kept beside the
report's kernels, compared, and said in the kernel section and the cause where they changed."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import triton

from bisector.report import markdown
from bisector.why.cause import cause_of
from bisector.why.kernel_diff import autotune
from bisector.why.kernel_diff.collect import KERNELS_DIR, step_kernels
from tests.test_kernels import FIXTURES, INDEX, _data, _jit_from_fixture, fixture_step

CONFIGS = [triton.Config({"BLOCK": 512}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=2)]


def write_choice(cache: Path, kernel: str, key: list[object], ms: list[float]) -> None:
    """What Triton writes once it has tuned `kernel` for `key` with TRITON_CACHE_AUTOTUNING on."""
    where = cache / f"{abs(hash((kernel, tuple(map(str, key))))):x}"[:12]
    where.mkdir(parents=True, exist_ok=True)
    timings = [(c.__dict__, [t, t * 0.9, t * 1.1]) for c, t in zip(CONFIGS, ms)]
    (where / f"{kernel}.autotune.json").write_text(json.dumps({"key": key, "configs_timings": timings}))


def test_a_choice_is_the_config_triton_timed_fastest() -> None:
    text = json.dumps(
        {
            "key": [4096, "torch.bfloat16"],
            "configs_timings": [(c.__dict__, [0.2 - 0.1 * i]) for i, c in enumerate(CONFIGS)],
        }
    )
    choice = autotune.parse("_l2norm_fwd", text)
    assert choice is not None and choice.chosen == "BLOCK=1024, num_warps=8, num_stages=2" and choice.configs == 2
    assert choice.key == '[4096, "torch.bfloat16"]' and abs(choice.ms - 0.1) < 1e-9
    for bad in ("", "[]", '{"configs_timings": [[1, 2]]}', '{"configs_timings": [[{}, "x"]]}'):
        assert autotune.parse("k", bad) is None


def test_a_changed_choice_is_kept_compared_and_said_in_the_report_and_the_cause(tmp_path: Path) -> None:
    st = INDEX["145"]
    work, out = tmp_path / "work", tmp_path / "report"
    for sha in (st["parent"], st["culprit"]):
        _jit_from_fixture(work, sha)
    parent_cache, culprit_cache = (work / "jit" / sha / "triton_cache_dir" for sha in (st["parent"], st["culprit"]))
    write_choice(parent_cache, "_l2norm_fwd", [4096, "torch.bfloat16"], [0.30, 0.20])
    write_choice(culprit_cache, "_l2norm_fwd", [4096, "torch.bfloat16"], [0.25, 0.40])
    write_choice(parent_cache, "_l2norm_bwd", [4096, "torch.bfloat16"], [0.5, 0.6])
    write_choice(culprit_cache, "_l2norm_bwd", [4096, "torch.bfloat16"], [0.5, 0.7])
    # a link planted in a trial-written JIT dir is not followed into the report
    write_choice(tmp_path / "outside", "_planted", [1], [0.1, 0.2])
    (planted,) = (tmp_path / "outside").rglob("*.autotune.json")
    os.symlink(planted, culprit_cache / "_planted.autotune.json")
    step = fixture_step()
    (sk,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"])
    assert [(c.kernel, c.changed) for c in sk.autotune] == [("_l2norm_fwd", True), ("_l2norm_bwd", False)]
    fwd = sk.choices_changed[0]
    assert (
        fwd.before.chosen == "BLOCK=1024, num_warps=8, num_stages=2"
        and fwd.after.chosen == "BLOCK=512, num_warps=4, num_stages=3"
    )
    shutil.rmtree(work)  # an offline re-make reads the kept copy
    (again,) = step_kernels(work, out, [step], ["TRITON_CACHE_DIR"])
    assert again.autotune == sk.autotune
    assert (out / KERNELS_DIR / st["parent"][:12] / autotune.KEPT).is_file()

    section = markdown.render(_data(sk, [step])).split("## What changed in the compiled kernel", 1)[1]
    assert "The autotuner chose differently (1 kernel and key pair chose the same):" in section
    assert (
        '- `_l2norm_fwd` key [4096, "torch.bfloat16"]: BLOCK=1024, num_warps=8, num_stages=2 (0.2 ms of 2 timed) '
        "-> BLOCK=512, num_warps=4, num_stages=3 (0.25 ms of 2 timed)" in section
    )
    # with the same variants compiled on both sides, the choice is the cause
    only_choice = replace(sk, kernels=tuple(k for k in sk.kernels if k.status == "unchanged"))
    cause = cause_of(only_choice)
    assert cause.kind == "autotune" and cause.kernel == "_l2norm_fwd"
    assert cause.sentence == (
        "the autotuner chose another config for `_l2norm_fwd`: BLOCK=1024, num_warps=8, num_stages=2 -> "
        "BLOCK=512, num_warps=4, num_stages=3."
    )


def test_no_choice_kept_says_nothing_of_the_autotuner(tmp_path: Path) -> None:
    st = INDEX["145"]
    shutil.copytree(FIXTURES, tmp_path / KERNELS_DIR)
    from bisector.why.kernel_diff.collect import compare_dirs

    sk = compare_dirs(tmp_path, st["parent"], st["culprit"])
    assert sk.autotune == () and "autotuner" not in "\n".join(markdown.render(_data(sk)).splitlines())

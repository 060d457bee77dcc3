"""Triton's autotune choices kept per commit (`protocol.keep_autotune`): the env the bot gives a
GPU trial, what a trial records of its commit's kept choices, the report's protocol line, and on a
GPU host Triton itself reading a choice back in a second process instead of tuning again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from benches import trial
from bisector.config import AUTOTUNE_CACHE, parse
from bisector.errors import BadInput
from bisector.model import BuildResult, BuildStatus
from bisector.report import markdown
from bisector.report.assemble import _protocol_shown
from bisector.runner.launch import trial_env
from tests.devices import needs_cuda
from tests.report_fixtures import full_report
from tests.test_trial import spec


def config(tmp_path: Path, kind: str = "cuda", **protocol: object):
    data = {
        "name": "t",
        "upstream": {"repo": str(tmp_path)},
        "device": {"kind": kind},
        "control": {"backend": "torch_cuda" if kind == "cuda" else "torch"},
        "subject": {"gemm": {"entry": "k:mm", "adapter": "torch"}},
        "suites": {"gemm": {"shapes": [{"name": "a", "M": 64, "N": 64, "K": 64, "dtype": "fp32"}]}},
        "protocol": {"reps": 3, "warmup": 1, **protocol},
    }
    return parse(data, tmp_path / "t.toml")


def env_of(tmp_path: Path, cfg) -> dict[str, str]:
    build = BuildResult(sha="b" * 40, status=BuildStatus.OK, source_dir=str(tmp_path))
    changed, _ = trial_env(cfg, build, tmp_path / "work", 0, True, {})
    return changed


def test_a_gpu_trial_keeps_its_commits_autotune_choices_beside_its_own_jit_cache(tmp_path) -> None:
    env = env_of(tmp_path, config(tmp_path))
    assert env[AUTOTUNE_CACHE] == "1" and env["TRITON_CACHE_DIR"].endswith(f"{'b' * 40}/triton_cache_dir")
    assert AUTOTUNE_CACHE not in env_of(tmp_path, config(tmp_path, keep_autotune=False))
    assert AUTOTUNE_CACHE not in env_of(tmp_path, config(tmp_path, kind="cpu")), "no Triton autotune on the CPU"
    # without a JIT dir of the commit's own the choices would land in a cache every commit shares
    assert AUTOTUNE_CACHE not in env_of(tmp_path, config(tmp_path, jit_cache_env=["BISECTOR_OTHER_JIT"]))
    # a config's explicit choice wins
    explicit = config(tmp_path, env={AUTOTUNE_CACHE: "0"})
    assert env_of(tmp_path, explicit)[AUTOTUNE_CACHE] == "0"


def test_keep_autotune_must_be_a_boolean(tmp_path) -> None:
    assert config(tmp_path).protocol.keep_autotune is True
    with pytest.raises(BadInput, match="keep_autotune"):
        config(tmp_path, keep_autotune="no")


def test_a_trial_records_the_choices_its_commits_cache_held(tmp_path, monkeypatch) -> None:
    """A later trial of a commit starts with the choices its first trial wrote (Triton names them
    `<kernel>.autotune.json` in a dir of the cache); the record says how many there were."""
    cache = tmp_path / "triton_cache_dir"
    (cache / "3f2a").mkdir(parents=True)
    (cache / "3f2a" / "_l2norm_fwd.autotune.json").write_text("{}")
    (cache / "9c1d").mkdir()
    (cache / "9c1d" / "_l2norm_fwd.ttir").write_text("")
    one = spec(shapes=spec()["shapes"][:1])
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv(AUTOTUNE_CACHE, "1")
    out = trial.run(one, tmp_path / "out.json")
    assert out["protocol"]["autotune_kept"] == 1 and out["protocol"]["jit_env"][AUTOTUNE_CACHE] == "1"
    monkeypatch.delenv(AUTOTUNE_CACHE)
    assert "autotune_kept" not in trial.run(one, tmp_path / "out2.json")["protocol"]


def test_the_report_says_the_choices_were_kept_only_where_its_trials_ran_so(tmp_path) -> None:
    def record(jit_env: dict[str, str]) -> SimpleNamespace:
        return SimpleNamespace(protocol={"jit_env": jit_env})

    kept, old = record({"TRITON_CACHE_DIR": "x", AUTOTUNE_CACHE: "1"}), record({"TRITON_CACHE_DIR": "x"})
    gpu = config(tmp_path)
    assert _protocol_shown(gpu, [kept, kept])["autotune_kept"] is True
    # a store's older trials, re-made offline with today's config, were not run so
    assert _protocol_shown(gpu, [kept, old])["autotune_kept"] is False
    assert _protocol_shown(gpu, [])["autotune_kept"] is False
    assert _protocol_shown(config(tmp_path, keep_autotune=False), [kept])["autotune_kept"] is False
    data = full_report()
    line = "\n".join(markdown.header(replace(data, protocol={**data.protocol, "autotune_kept": True})))
    assert "emptied before its first trial (Triton's autotune choices kept in it: a commit's first trial" in line
    assert "autotune" not in "\n".join(markdown.header(data))


AUTOTUNED = textwrap.dedent("""
    import json, sys
    import torch, triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def scale(x, y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 2, mask=offs < n)

    benched = []
    bench = scale._bench
    scale._bench = lambda *a, **k: benched.append(1) or bench(*a, **k)
    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    scale[lambda meta: (triton.cdiv(4096, meta["BLOCK"]),)](x, y, 4096)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)
    print(json.dumps({"benched": len(benched)}))
""")


@needs_cuda
@pytest.mark.gpu
def test_a_second_process_of_one_commit_reads_the_choice_instead_of_tuning(tmp_path) -> None:
    """What the env is for, on the Triton of the host: the first process tunes (two configs
    benchmarked), a second with the same cache dir launches the kept choice without a benchmark."""
    script = tmp_path / "autotuned.py"
    script.write_text(AUTOTUNED)
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"), AUTOTUNE_CACHE: "1"}

    def benched() -> int:
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(json.loads(done.stdout.strip().splitlines()[-1])["benched"])

    assert benched() == 2
    assert trial.autotune_choices(str(tmp_path / "cache")) == 1
    assert benched() == 0

"""Trials in real subprocesses on CPU: good, crashing, hanging, wrong and missing subjects;
a scrubbed environment; a per-commit JIT cache emptied before the first trial."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from bisector.config import parse
from bisector.model import BuildResult, BuildStatus, TrialStatus
from bisector.runner import build_spec, run_trial
from bisector.runner.env import is_secret, jit_dir, pin_allocator, pin_device, prepare_jit, scrub
from bisector.runner.launch import worker_env

SUBJECTS = textwrap.dedent("""
    import json, os, time
    import torch

    def mm(a, b):
        return a @ b

    def fa(q, k, v, causal, sm_scale):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)

    def fa_bshd(q, k, v, causal, sm_scale):
        o = fa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, sm_scale)
        return o.transpose(1, 2)

    def wrong(a, b):
        out = a @ b
        out[0, 0] += 100.0
        return out

    def crash(a, b):
        os.abort()

    def hang(a, b):
        time.sleep(60)

    def raises(a, b):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def env_dump(a, b):
        with open(os.environ["ENV_DUMP"], "w") as fh:
            json.dump({**os.environ, "__cwd__": os.getcwd()}, fh)
        return a @ b
""")


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    src = tmp_path / "upstream"
    src.mkdir()
    (src / "mykern.py").write_text(SUBJECTS)
    return src


def make_config(
    tmp_path: Path,
    gemm_entry: str = "mykern:mm",
    fa_entry: str = "mykern:fa",
    layout: str = "bhsd",
    timeout: float = 60.0,
    env: dict | None = None,
):
    data = {
        "name": "t",
        "upstream": {"repo": str(tmp_path)},
        "device": {"kind": "cpu"},
        "control": {"backend": "torch"},
        "subject": {
            "gemm": {"entry": gemm_entry, "adapter": "torch"},
            "fa": {"entry": fa_entry, "adapter": "callable", "layout": layout},
        },
        "suites": {
            "gemm": {
                "shapes": [
                    {"name": "a", "M": 64, "N": 48, "K": 32, "dtype": "fp32"},
                    {"name": "b", "M": 32, "N": 32, "K": 64, "dtype": "bf16", "layout": "tn"},
                ]
            },
            "fa": {"shapes": [{"name": "s", "B": 1, "H": 2, "S": 64, "D": 16, "dtype": "fp32", "causal": True}]},
        },
        "protocol": {
            "reps": 3,
            "warmup": 1,
            "flush_mb": 1,
            "timeout_s": timeout,
            "jit_cache_env": ["TRITON_CACHE_DIR", "FLYDSL_RUNTIME_CACHE_DIR"],
            "env": env or {},
        },
        "publish": {"token_env": "MY_BOT_PAT"},
    }
    return parse(data, tmp_path / "t.toml")


def build_of(src: Path, sha: str = "a" * 40) -> BuildResult:
    return BuildResult(sha=sha, status=BuildStatus.OK, source_dir=str(src))


def test_good_subject_gemm(tmp_path, upstream):
    cfg = make_config(tmp_path)
    recs = run_trial(cfg, build_of(upstream), "gemm", work=tmp_path / "work", first=True)
    assert [r.shape for r in recs] == ["gemm/a", "gemm/b"]
    for r in recs:
        assert r.status == TrialStatus.OK, r.error + r.log_tail
        assert len(r.subject_ms) == 3 and len(r.control_ms) == 3 and all(x > 0 for x in r.subject_ms)
        assert r.subject_tflops > 0 and r.control_tflops > 0 and r.ratio > 0
        assert r.compile_s is not None and r.max_abs_err is not None
        assert r.machine["device_kind"] == "cpu" and r.protocol["reps"] == 3
        assert r.protocol["log_path"].startswith("trials/")  # relative to the work dir: no path of this machine
        assert (tmp_path / "work" / r.protocol["log_path"]).exists()
        assert set(r.protocol["input_page_offsets"]) == {"a", "b"}  # kept in the store (benches/layout.py)


def test_good_subject_fa_bshd_layout(tmp_path, upstream):
    cfg = make_config(tmp_path, fa_entry="mykern:fa_bshd", layout="bshd")
    (rec,) = run_trial(cfg, build_of(upstream), "fa", work=tmp_path / "work")
    assert rec.status == TrialStatus.OK, rec.error + rec.log_tail
    assert rec.max_abs_err < 1e-4


def test_wrong_result_is_flagged_with_error_figures(tmp_path, upstream):
    cfg = make_config(tmp_path, gemm_entry="mykern:wrong")
    recs = run_trial(cfg, build_of(upstream), "gemm", work=tmp_path / "work")
    for r in recs:
        assert r.status == TrialStatus.WRONG
        assert r.max_abs_err >= 90 and r.max_rel_err > 1
        assert "mismatch" in r.error and "1/" in r.error
        assert r.subject_ms  # measured anyway: wrong at full speed is visible, never ranked


def test_crashing_subject(tmp_path, upstream):
    cfg = make_config(tmp_path, gemm_entry="mykern:crash")
    recs = run_trial(cfg, build_of(upstream), "gemm", work=tmp_path / "work")
    assert [r.status for r in recs] == [TrialStatus.CRASH, TrialStatus.CRASH]
    assert "SIGABRT" in recs[0].error
    assert "trial: " not in recs[0].log_tail or "gemm/a" not in recs[0].log_tail.split("trial: ")[-1]


def test_raising_subject_keeps_traceback(tmp_path, upstream):
    cfg = make_config(tmp_path, gemm_entry="mykern:raises")
    recs = run_trial(cfg, build_of(upstream), "gemm", work=tmp_path / "work")
    assert all(r.status == TrialStatus.CRASH for r in recs)
    assert "illegal memory access" in recs[0].error
    assert "Traceback" in recs[0].log_tail and "mykern.py" in recs[0].log_tail


def test_hanging_subject_times_out(tmp_path, upstream):
    cfg = make_config(tmp_path, gemm_entry="mykern:hang")
    recs = run_trial(cfg, build_of(upstream), "gemm", work=tmp_path / "work", timeout_s=3)
    assert [r.status for r in recs] == [TrialStatus.TIMEOUT, TrialStatus.TIMEOUT]
    assert "timed out after 3 s" in recs[0].error


def test_missing_module_is_unavailable(tmp_path, upstream):
    cfg = make_config(tmp_path, gemm_entry="nosuchpkg.kern:mm")
    recs = run_trial(cfg, build_of(upstream), "gemm", work=tmp_path / "work")
    assert all(r.status == TrialStatus.UNAVAILABLE for r in recs)
    assert recs[0].error.startswith("backend torch unavailable: cannot import 'nosuchpkg.kern'")


def test_env_scrubbed_device_pinned_and_jit_dir(tmp_path, upstream, monkeypatch):
    dump = tmp_path / "env.json"
    monkeypatch.setenv("BISECTOR_SANDBOX_WRITABLE", str(tmp_path))  # where the dump goes
    cfg = make_config(tmp_path, gemm_entry="mykern:env_dump", env={"ENV_DUMP": str(dump), "MY_KNOB": "1"})
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GITHUB_TOKEN": "ghp_secret",
        "GH_TOKEN": "x",
        "MY_BOT_PAT": "pat",
        "AWS_ACCESS_KEY_ID": "a",
        "OPENAI_API_KEY": "k",
        "DB_PASSWORD": "p",
        "TRITON_CACHE_DIR": "/shared/cache",
        "CUDA_HOME": "/usr/local/cuda",
        "TRITON_PRINT_AUTOTUNING": "1",
    }
    work = tmp_path / "work"
    jit = jit_dir(work, "b" * 40)
    (jit / "triton_cache_dir").mkdir(parents=True)
    (jit / "triton_cache_dir" / "stale.cubin").write_text("old")
    recs = run_trial(cfg, build_of(upstream, "b" * 40), "gemm", work=work, first=True, environ=environ)
    assert recs[0].status == TrialStatus.OK, recs[0].error + recs[0].log_tail
    child = json.loads(dump.read_text())
    for secret in ("GITHUB_TOKEN", "GH_TOKEN", "MY_BOT_PAT", "AWS_ACCESS_KEY_ID", "OPENAI_API_KEY", "DB_PASSWORD"):
        assert secret not in child
    assert "ghp_secret" not in json.dumps(child)
    assert child["CUDA_HOME"] == "/usr/local/cuda" and child["TRITON_PRINT_AUTOTUNING"] == "1"
    assert child["MY_KNOB"] == "1" and child["CUDA_VISIBLE_DEVICES"] == ""
    assert child["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)  # CPU trials: a fixed malloc policy
    assert child["TRITON_CACHE_DIR"] == str((jit / "triton_cache_dir").resolve())
    assert child["FLYDSL_RUNTIME_CACHE_DIR"].endswith("flydsl_runtime_cache_dir")
    assert not (jit / "triton_cache_dir" / "stale.cubin").exists()  # emptied before the first trial
    assert recs[0].protocol["jit_cache_cold"]["TRITON_CACHE_DIR"] is True
    assert Path(child["__cwd__"]).is_relative_to(work)  # outside the upstream's worktree


def test_jit_dirs_per_commit_and_patch(tmp_path):
    work = tmp_path / "work"
    first = prepare_jit(work, "b" * 40, None, ("TRITON_CACHE_DIR",), first=True)
    (Path(first["TRITON_CACHE_DIR"]) / "kept.cubin").write_text("x")
    again = prepare_jit(work, "b" * 40, None, ("TRITON_CACHE_DIR",), first=False)  # a later trial keeps it
    assert again == first and (Path(first["TRITON_CACHE_DIR"]) / "kept.cubin").exists()
    other = prepare_jit(work, "c" * 40, None, ("TRITON_CACHE_DIR",), first=True)
    patched = prepare_jit(work, "b" * 40, "p1", ("TRITON_CACHE_DIR",), first=True)
    assert len({first["TRITON_CACHE_DIR"], other["TRITON_CACHE_DIR"], patched["TRITON_CACHE_DIR"]}) == 3
    assert patched["TRITON_CACHE_DIR"].endswith(f"{'b' * 40}-p1/triton_cache_dir")
    prepare_jit(work, "b" * 40, None, ("TRITON_CACHE_DIR",), first=True)  # the commit starts over: cold
    assert not (Path(first["TRITON_CACHE_DIR"]) / "kept.cubin").exists()


def test_jit_dirs_prepared_by_several_trials_of_a_commit_at_once(tmp_path):
    """Trials of one commit are set up at once (held trials, dask workers), first trials too: one's
    emptying of the commit's JIT dir must not fail another's setup nor leave it a path that no longer
    exists (a fresh CI clone failed here: mkdir's parent removed under it by another first trial)."""
    import threading

    work, names = tmp_path / "work", ("TRITON_CACHE_DIR", "BISECTOR_TEST_JIT")
    errors: list[BaseException] = []

    def prepare(first: bool) -> None:
        try:
            for _ in range(150):
                got = prepare_jit(work, "d" * 40, None, names, first=first)
                try:  # a cache worth emptying, written as a running trial would (another may empty it)
                    (Path(got["TRITON_CACHE_DIR"]) / "k.cubin").write_text("x")
                except FileNotFoundError:
                    pass
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(k < 3,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, repr(errors[0])
    final = prepare_jit(work, "d" * 40, None, names, first=False)
    assert all(Path(v).is_dir() for v in final.values())


def test_scrub_rules():
    env = {
        "PATH": "p",
        "HOME": "h",
        "GITHUB_TOKEN": "t",
        "GITHUB_SHA": "s",
        "GH_HOST": "g",
        "AWS_REGION": "r",
        "SSH_AUTH_SOCK": "s",
        "HIP_VISIBLE_DEVICES": "0",
        "ROCM_PATH": "/opt/rocm",
        "BOT_PAT": "x",
        "HSA_OVERRIDE_GFX_VERSION": "9",
    }
    kept = scrub(env, "BOT_PAT")
    assert set(kept) == {"PATH", "HOME", "HIP_VISIBLE_DEVICES", "ROCM_PATH", "HSA_OVERRIDE_GFX_VERSION"}
    assert is_secret("HF_TOKEN") and is_secret("SOME_API_KEY") and not is_secret("TRITON_CACHE_DIR")


def test_pin_device():
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2", "ROCR_VISIBLE_DEVICES": "3"}
    pin_device(env, "rocm", 5)
    assert env == {"HIP_VISIBLE_DEVICES": "5"}
    env = {}
    pin_device(env, "cuda", 2)
    assert env == {"CUDA_VISIBLE_DEVICES": "2"}


def test_cpu_trials_get_a_fixed_malloc_policy_that_a_config_can_override(tmp_path):
    env = {}
    pin_allocator(env, "cpu")
    assert env == {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"}
    env = {}
    pin_allocator(env, "cuda")
    assert env == {}
    # What the bot's own environment holds is not a choice: dask's Nanny leaves a 64 KiB trim
    # threshold there. The config's `protocol.env` is.
    inherited = {"MALLOC_TRIM_THRESHOLD_": "65536", "HOME": "/root"}
    env = worker_env(make_config(tmp_path), inherited, tmp_path)
    assert env["MALLOC_TRIM_THRESHOLD_"] == "67108864" and env["MALLOC_MMAP_THRESHOLD_"] == "33554432"
    env = worker_env(make_config(tmp_path, env={"MALLOC_MMAP_THRESHOLD_": "131072"}), inherited, tmp_path)
    assert env["MALLOC_MMAP_THRESHOLD_"] == "131072" and env["MALLOC_TRIM_THRESHOLD_"] == "67108864"


def test_a_dask_nanny_leaves_a_malloc_trim_threshold_in_the_environment_of_its_process():
    # Why the runner overrides inherited malloc settings: starting a LocalCluster's nanny writes
    # distributed's pre-spawn environment into this process's os.environ. If a release stops doing
    # so this fails, and the override can say so.
    import subprocess
    import sys

    code = (
        "import os\nfrom distributed import LocalCluster\n"
        "with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None):\n"
        "    print(os.environ.get('MALLOC_TRIM_THRESHOLD_'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "65536"


def test_build_spec_follows_contract(tmp_path, upstream):
    cfg = make_config(tmp_path)
    spec = build_spec(
        cfg,
        BuildResult(sha="d" * 40, status=BuildStatus.OK, source_dir=str(upstream), prefix=str(tmp_path / "site")),
        "gemm",
        seed=7,
    )
    assert set(spec) == {
        "sha",
        "suite",
        "shapes",
        "subjects",
        "control",
        "device",
        "source_dirs",
        "reps",
        "warmup",
        "graph_reads",
        "graph_heat_ms",
        "settle_ms",
        "flush_mb",
        "cpu_clock",
        "seed",
        "tolerances",
        "timing",
    }
    assert spec["timing"] == {"gemm": "kernel"}
    assert spec["shapes"][1] == {
        "key": "gemm/b",
        "suite": "gemm",
        "name": "b",
        "params": {"K": 64, "M": 32, "N": 32, "dtype": "bf16", "layout": "tn"},
    }
    assert spec["subjects"] == {"gemm": {"entry": "mykern:mm", "adapter": "torch", "layout": "bhsd", "options": {}}}
    assert spec["source_dirs"] == [str(upstream.resolve()), str((tmp_path / "site").resolve())]
    assert spec["seed"] == 7 and spec["control"] == "torch" and spec["device"] == "cpu"

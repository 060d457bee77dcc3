"""benches.trial in process (fast): the output contract, control "none", per-suite tolerances,
a file rewritten after every shape, and the `bisector bench` command end to end on CPU."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from benches import trial
from benches.timing import Clock

RESULT_KEYS = {
    "shape",
    "status",
    "subject_ms",
    "control_ms",
    "ratios",
    "subject_tflops",
    "control_tflops",
    "ratio",
    "compile_s",
    "max_abs_err",
    "max_rel_err",
}


def spec(entry: str = "benches.kernels.torch_ref:matmul", control: str = "torch", **extra):
    base = {
        "sha": "f" * 40,
        "suite": "gemm",
        "shapes": [
            {
                "key": "gemm/a",
                "suite": "gemm",
                "name": "a",
                "params": {"M": 32, "N": 16, "K": 64, "dtype": "fp32", "layout": "nn"},
            },
            {
                "key": "gemm/b",
                "suite": "gemm",
                "name": "b",
                "params": {"M": 16, "N": 16, "K": 16, "dtype": "bf16", "layout": "nt", "tile": [16, 16, 16]},
            },
        ],
        "subject": {"entry": entry, "adapter": "torch", "layout": "bhsd", "options": {}},
        "control": control,
        "device": "cpu",
        "source_dirs": [],
        "reps": 3,
        "warmup": 1,
        "flush_mb": 1,
        "seed": 5,
        "tolerances": {},
    }
    return {**base, **extra}


def test_output_contract(tmp_path):
    out = trial.run(spec(), tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["results"] == json.loads(json.dumps(out["results"]))
    assert set(out) >= {"machine", "protocol", "telemetry", "results"}
    assert out["telemetry"]["before"] is None and "after" in out["telemetry"]  # no GPU tool on CPU
    assert out["protocol"]["reps"] == 3 and out["protocol"]["flush_bytes"] == 1 << 20
    assert out["protocol"]["timer"] == "process_time_ns"  # one thread: its CPU time (benches/timing.py)
    for r in out["results"]:
        assert set(r) >= RESULT_KEYS and r["status"] == "ok"
        assert len(r["ratios"]) == 3 and r["ratio"] == sorted(r["ratios"])[1]
        assert r["seed"] in (5, 6)


def test_wall_time_on_request_and_with_several_threads(tmp_path):
    out = trial.run(spec(cpu_clock="wall"), tmp_path / "out.json")
    assert out["protocol"]["timer"] == "perf_counter_ns"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # CPU time would sum the threads
        assert Clock("cpu", 1 << 10).kind == "perf_counter_ns"
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="cpu_clock"):
        Clock("cpu", 1 << 10, "tsc")


SHARED_CORE = """
import json, os, statistics, subprocess, sys, time
import torch
from benches.timing import Clock
torch.set_num_threads(1)
core = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {core})
spin = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {%d})\\nwhile True: pass" % core])
try:
    time.sleep(0.3)
    work = lambda: sum(range(600_000))  # ~8 ms of one core: longer than a slice
    cpu, wall = Clock("cpu", 1 << 16), Clock("cpu", 1 << 16, "wall")
    out = {}
    for _ in range(3):
        for name, clock in (("cpu", cpu), ("wall", wall)):
            out.setdefault(name, []).extend(clock.interleaved([work], 10)[0][0])
finally:
    spin.kill()
print(json.dumps({**out, "kind": cpu.kind}))
"""


def test_cpu_time_leaves_out_the_slices_of_a_process_sharing_the_core():
    """A busy process on the trial's core takes every other slice of it: wall time counts them
    (a call reads whole slices longer), the default CPU clock does not."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this OS")
    out = json.loads(
        subprocess.run(
            [sys.executable, "-c", SHARED_CORE], capture_output=True, text=True, check=True, timeout=300
        ).stdout
    )
    assert out["kind"] == "process_time_ns"
    cpu, wall = statistics.median(out["cpu"]), statistics.median(out["wall"])
    assert wall > 1.5 * cpu, (cpu, wall)  # the core was shared: wall time counted the other's slices
    assert statistics.quantiles(out["cpu"], n=10)[-1] < 1.5 * cpu, out["cpu"]


FAULTING = """
import mmap
import torch


def matmul(a, b, **_):
    scratch = mmap.mmap(-1, 1 << 22)  # 4 MiB mapped afresh on every call: a fault per page touched
    for page in range(0, 1 << 22, 4096):
        scratch[page] = 1
    scratch.close()
    return torch.matmul(a, b)
"""


def test_cpu_trials_count_the_page_faults_of_each_timed_call(tmp_path):
    (tmp_path / "faulting.py").write_text(FAULTING)
    out = trial.run(spec("faulting:matmul", source_dirs=[str(tmp_path)]), tmp_path / "out.json")
    for r in out["results"]:
        subject, control = r["timed_faults"]
        assert subject >= 1000 and control < 100, r["timed_faults"]


PLACEMENT = """
import json
import os

import torch


def matmul(a, b, **_):
    with open(os.environ["PLACEMENT_LOG"], "a") as log:  # where the inputs the subject is given lie
        log.write(json.dumps({"m": a.shape[0], "a": a.data_ptr() % 4096, "b": b.data_ptr() % 4096}) + "\\n")
    return torch.matmul(a, b)
"""


def test_trials_record_where_their_inputs_lie_in_a_page(tmp_path, monkeypatch):
    # The CPU demo's tall GEMM reads 28-42 ms by its input's address offset in a page alone
    # (studies/results/cpu-slow-builds.txt, part 1): each result says which offset its trial had.
    (tmp_path / "placed.py").write_text(PLACEMENT)
    monkeypatch.setenv("PLACEMENT_LOG", str(tmp_path / "placement.jsonl"))
    out = trial.run(spec("placed:matmul", source_dirs=[str(tmp_path)]), tmp_path / "out.json")
    seen = {}
    for line in (tmp_path / "placement.jsonl").read_text().splitlines():
        call = json.loads(line)
        seen.setdefault(call.pop("m"), set()).add(tuple(sorted(call.items())))
    for r, m in zip(out["results"], (32, 16)):
        assert seen[m] == {tuple(sorted(r["input_page_offsets"].items()))}, (r["input_page_offsets"], seen[m])


def test_control_none_checks_against_reference(tmp_path):
    (tmp_path / "sub.py").write_text("def mm(a, b, tile=None):\n    return (a.float() @ b.float()).to(a.dtype) + 1.0\n")
    out = trial.run(spec("sub:mm", control="none", source_dirs=[str(tmp_path)]), tmp_path / "out.json")
    assert [r["status"] for r in out["results"]] == ["wrong", "wrong"]
    assert "ratio" not in out["results"][0] and out["results"][0]["max_abs_err"] == pytest.approx(1.0, abs=0.02)


def test_suite_tolerance_from_spec(tmp_path):
    (tmp_path / "sub2.py").write_text("def mm(a, b, tile=None):\n    return (a @ b) * 1.001\n")
    strict = trial.run(spec("sub2:mm", source_dirs=[str(tmp_path)]), tmp_path / "o1.json")
    loose = trial.run(
        spec("sub2:mm", source_dirs=[str(tmp_path)], tolerances={"gemm": [0.01, 0.01]}), tmp_path / "o2.json"
    )
    assert strict["results"][0]["status"] == "wrong" and loose["results"][0]["status"] == "ok"


def test_bad_usage_exit_2(tmp_path):
    assert trial.main([]) == 2
    assert trial.main([str(tmp_path / "missing.json"), str(tmp_path / "o.json")]) == 2


def test_partial_output_survives_abort(tmp_path):
    (tmp_path / "sub3.py").write_text(
        "import os\ndef mm(a, b, tile=None):\n    if a.shape[0] == 16:\n        os.abort()\n    return a @ b\n"
    )
    (tmp_path / "spec.json").write_text(json.dumps(spec("sub3:mm", source_dirs=[str(tmp_path)])))
    proc = subprocess.run([sys.executable, "-m", "benches.trial", "spec.json", "out.json"], cwd=tmp_path)
    assert proc.returncode != 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert [r["shape"] for r in out["results"]] == ["gemm/a"] and out["results"][0]["status"] == "ok"


def bench_setup(tmp_path, control: str = "torch"):
    """An upstream checkout of one matmul and a CPU config of one GEMM shape: (config path, sha)."""
    import git

    up = tmp_path / "up"
    up.mkdir()
    (up / "kern.py").write_text("def mm(a, b):\n    return a @ b\n")
    repo = git.Repo.init(up)
    repo.index.add(["kern.py"])
    sha = repo.index.commit("kern").hexsha
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'''
name = "demo"
store = "{tmp_path / "store.sqlite"}"
[upstream]
repo = "{up}"
[device]
kind = "cpu"
[control]
backend = "{control}"
[subject.gemm]
entry = "kern:mm"
adapter = "torch"
[[suites.gemm.shapes]]
name = "g"
M = 32
N = 32
K = 32
dtype = "fp32"
[protocol]
reps = 3
warmup = 1
flush_mb = 1
''')
    return cfg, sha


def test_bench_command_on_cpu(tmp_path):
    from bisector.commands.bench_cmd import command
    from bisector.store import Store

    cfg, sha = bench_setup(tmp_path)
    res = CliRunner().invoke(command, ["--config", str(cfg), "--trials", "2", "--work", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    assert "gemm/g" in res.output and "ok" in res.output and sha[:12] in res.output
    assert "GB/s" in res.output  # bandwidth beside TFLOP/s
    stored_gbps = [t.protocol.get("subject_gbps") for t in Store(tmp_path / "store.sqlite").trials("bench")]
    assert all(isinstance(g, float) and g > 0 for g in stored_gbps)
    res = CliRunner().invoke(command, ["--config", str(cfg), "--source", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a directory" in res.output
    stored = Store(tmp_path / "store.sqlite").trials("bench")
    assert len(stored) == 2 and {t.sha for t in stored} == {sha}


def test_peak_clock_ratio_ignores_throttled_repetitions():
    from benches.timing import peak_clock_ratio

    # Full clock: subject 1.40 ms, control 1.375 ms (ratio 0.982); throttled: both 1.52 ms (ratio 1.0).
    subject = [1.40] * 10 + [1.52] * 20
    control = [1.375] * 10 + [1.52] * 20
    assert abs(peak_clock_ratio(subject, control) - 1.375 / 1.40) < 1e-9
    # One unusually fast control repetition does not shrink the kept set to itself.
    control_fast_outlier = [1.30] + [1.375] * 9 + [1.52] * 20
    assert abs(peak_clock_ratio(subject, control_fast_outlier) - 1.375 / 1.40) < 1e-9


def test_a_ratio_of_calls_disturbed_one_by_one_is_read_from_each_side_s_fastest_call():
    """Another process's work slows single calls, now the subject's, now the control's: the
    peak-clock anchor lands on a slow control and reads the pair 31% off; the fastest calls agree
    with the undisturbed trials. A clock drop, which slows both sides alike, keeps the peak-clock ratio."""
    from benches.timing import device_ratio, peak_clock_ratio

    # an H200 demo trial of gemm/m8192 (its build's median ratio 0.982)
    subject = [1.424, 1.806, 2.357, 1.408, 2.341, 2.626]
    control = [2.103, 1.379, 2.266, 2.274, 1.381, 1.777]
    assert peak_clock_ratio(subject, control) < 0.7
    ratio, disturbed = device_ratio(subject, control)
    assert disturbed and abs(ratio - 1.379 / 1.408) < 1e-9
    throttled = ([1.40] * 10 + [1.52] * 20, [1.375] * 10 + [1.52] * 20)
    assert device_ratio(*throttled) == (peak_clock_ratio(*throttled), False)


@pytest.mark.parametrize(
    "line, version",
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan  2 2025\n", "570.86.15"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.51.03  Release Build\n", "575.51.03"),
    ],
)
def test_the_driver_version_is_read_from_the_kernel_module_file_without_nvidia_smi(
    tmp_path, monkeypatch, line, version
) -> None:
    from benches import machine

    (tmp_path / "version").write_text(line + "GCC version:  gcc version 12.2.0\n")
    monkeypatch.setattr(machine, "NVIDIA_PROC", str(tmp_path / "version"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi to fall back on
    assert machine._driver() == version
    monkeypatch.setattr(machine, "NVIDIA_PROC", str(tmp_path / "absent"))
    assert machine._driver() is None


def test_a_disturbed_gpu_read_is_read_again_and_the_steadiest_kept_with_the_others_raw():
    """Calls of 20 ms that read 37-58 ms in a read (another process's kernels time-sliced in) are
    read again, up to REREADS times; the steadiest read is kept and the others ride along raw."""
    from benches.kernel_time import CallTimes, KernelTimes
    from benches.trial import REREADS, _read_undisturbed, call_fields, spread

    steady = [[20.6, 20.9, 21.2, 20.8], [12.9, 13.0, 13.1, 12.9]]
    sliced = [[20.6, 21.2, 57.5, 25.0], [12.9, 47.4, 17.5, 13.0]]
    assert spread(steady) < 1.05 and spread(sliced) > 2.0

    def reads(*times):
        left = [KernelTimes("graph", t) for t in times]
        return lambda: left.pop(0)

    once = _read_undisturbed(reads(steady, sliced), REREADS)
    assert once.times == steady and once.set_aside == ()
    again = _read_undisturbed(reads(sliced, steady, sliced), REREADS)
    assert again.times == steady and again.set_aside == (sliced,)
    worse = [[20.6, 90.0, 20.7, 20.8], [12.9, 13.0, 13.1, 12.9]]
    stubborn = _read_undisturbed(reads(worse, sliced, sliced, steady), REREADS)  # at most REREADS more
    assert stubborn.times == sliced and stubborn.set_aside == (worse, sliced)
    assert _read_undisturbed(reads(sliced, steady), 0).times == sliced  # the CPU: never read again
    fields = call_fields(again, CallTimes([[], []], [[], []], 0))
    assert fields["disturbed_reads"] == [sliced]


def test_a_shape_out_of_device_memory_is_measured_again_and_fails_only_when_it_keeps_failing(tmp_path, monkeypatch):
    """Trials set up ahead hold device memory until their turn: an out-of-memory error in the device
    section is tried again after a wait (staged afresh); one that recurs every time is the commit's."""
    import torch

    monkeypatch.setattr(trial, "OOM_WAIT_S", 0.01)
    real, raised = trial.measure_shape, []

    def short_once(shape, *args, **kwargs):
        if shape["key"] == "gemm/a" and not raised:
            raised.append(shape["key"])
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.67 GiB")
        return real(shape, *args, **kwargs)

    monkeypatch.setattr(trial, "measure_shape", short_once)
    out = trial.run(spec(), tmp_path / "once.json")
    assert [r["status"] for r in out["results"]] == ["ok", "ok"] and raised == ["gemm/a"]
    assert [s for n, s, *_ in out["phases"] if n == "oom_wait"] == ["gemm/a"]

    def always_short(shape, *args, **kwargs):
        if shape["key"] == "gemm/a":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 900 GiB")
        return real(shape, *args, **kwargs)

    monkeypatch.setattr(trial, "measure_shape", always_short)
    out = trial.run(spec(), tmp_path / "always.json")
    status = {r["shape"]: r["status"] for r in out["results"]}
    assert status == {"gemm/a": "crash", "gemm/b": "ok"}
    assert "out of memory" in next(r["error"] for r in out["results"] if r["shape"] == "gemm/a")
    assert sum(n == "oom_wait" for n, *_ in out["phases"]) == trial.OOM_RETRIES


def test_a_setup_short_of_memory_warms_the_process_with_one_shape_before_it_defers_the_rest() -> None:
    """Over the reserve a shape is staged; under it the first shape is still drawn to make the
    process's first calls off the device (then given back) while the floor is free; the rest, and
    everything under the floor, is left to the device section (GPU: tests/test_kernel_time.py)."""
    total = 80 << 30
    assert trial.staging_choice(int(0.5 * total), total, 0.3, 0.1, drawn_any=False) == "stage"
    assert trial.staging_choice(int(0.5 * total), total, 0.3, 0.1, drawn_any=True) == "stage"
    assert trial.staging_choice(int(0.2 * total), total, 0.3, 0.1, drawn_any=False) == "warm"
    assert trial.staging_choice(int(0.2 * total), total, 0.3, 0.1, drawn_any=True) == "defer"
    assert trial.staging_choice(int(0.05 * total), total, 0.3, 0.1, drawn_any=False) == "defer"
    assert trial.staging_choice(int(0.2 * total), total, 0.3, trial.WARMING_FLOOR, drawn_any=False) == "warm"


def test_a_warmed_shape_counts_its_setup_first_calls_in_its_compile() -> None:
    result = {"shape": "gemm/a", "status": "ok", "compile_s": 0.02}
    trial._add_warming(result, {"precompile": "warmed, given back: captured", "precompile_s": 8.5})
    assert result["compile_s"] == pytest.approx(8.52) and result["precompile"].startswith("warmed")
    untouched = {"shape": "gemm/b", "compile_s": 0.02}
    trial._add_warming(untouched, None)
    assert untouched == {"shape": "gemm/b", "compile_s": 0.02}
    # a trial whose only capture was warmed and given back compiled cold at its start
    assert trial._cold_at_compile(
        {"TRITON_CACHE_DIR": True}, {}, {"gemm/a": {"precompile": "warmed, given back: captured"}}
    ) == {"TRITON_CACHE_DIR": True}


def test_a_shape_staged_in_a_loan_names_its_draw_and_both_prepares_in_order() -> None:
    """In a setup's brief loan (device time) the inputs' parts are phases of their own: the draw,
    the subject's prepare and the control's, each ended when its work has (the sync given)."""
    from benches import backends
    from benches.staging import Phases, stage_shape

    synced: list[int] = []
    phase, shape = Phases(), spec()["shapes"][0]
    subject = backends.subject(spec()["subject"], "cpu")
    staged = stage_shape(
        shape,
        0,
        spec(),
        lambda: synced.append(len(phase.spans)),
        subject,
        backends.control("torch", "cpu"),
        None,
        phase,
    )
    assert staged.ctrl is not None and staged.inputs["a"].shape == (32, 64)
    assert [(name, key) for name, key, _, _ in phase.spans] == [
        ("draw", "gemm/a"),
        ("prepare", "gemm/a"),
        ("control_prepare", "gemm/a"),
    ]
    assert all(before[3] <= after[2] for before, after in zip(phase.spans, phase.spans[1:])), "one after another"
    assert synced == [0, 1, 2, 3], "each part synced before it ends, and the whole once more"
    unnamed = stage_shape(shape, 0, spec(), lambda: None, subject, None, None)
    assert unnamed.ctrl is None and not phase.spans[3:], "without a phase clock nothing is recorded"

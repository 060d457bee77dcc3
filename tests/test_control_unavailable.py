"""A control that cannot run is the control's outcome, never the subject's crash, whatever the
control (a brought suite's own, aiter, cuBLAS, SDPA): the subject is still timed and stored, the
trial has no ratio, and the store, the probe, the report and `bisector bench` say why. The
control's first call is timed apart from its repetitions (a library's JIT lands there)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from benches import shapes, trial
from bisector.measure.probe import StoreProbe
from bisector.model import Shape, TrialRecord, TrialStatus
from bisector.search import control_outcome
from tests.test_trial import bench_setup
from tests.test_trial_suites import KERNELS, SUITE, shape, spec

CONTROLS = {
    "refused": """
    def control(self, inputs):
        raise RuntimeError("no matching kernel found for this shape")
""",
    "raises": """
    def control(self, inputs):
        def run():
            raise RuntimeError("no matching kernel found (first call)")
        return run
""",
    "raises_later": """
    def control(self, inputs):
        calls = []
        def run():
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("HIP error: the control failed on its third call")
            return torch.nn.functional.rms_norm(inputs["x"], (inputs["x"].shape[-1],), inputs["weight"], inputs["eps"])
        return run
""",
    "jit": """
    def control(self, inputs):
        import time
        x, w, eps = inputs["x"], inputs["weight"], inputs["eps"]
        calls = []
        def run():
            calls.append(1)
            if len(calls) == 1:
                time.sleep(0.3)  # a library building its modules on first use
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)
        return run
""",
}


def run_norm(tmp_path, kind: str, reps: int = 4, warmup: int = 2) -> dict:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / f"suite_{kind}.py").write_text(SUITE.replace("CONTROL_HERE", CONTROLS[kind]))
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / f"lib_{kind}.py").write_text(KERNELS)
    rows = [shape("norm", "t64", {"T": 64, "D": 256})]
    subjects = {"norm": {"entry": f"lib_{kind}:rms_norm", "adapter": "callable"}}
    mods = {"norm": {"module": f"suite_{kind}:RMSNorm", "path": str(tmp_path / "cfg")}}
    return trial.run(
        spec(rows, subjects, suite_modules=mods, source_dirs=[str(tmp_path / "up")], reps=reps, warmup=warmup),
        tmp_path / "o.json",
    )


@pytest.mark.parametrize(
    "kind,words",
    [
        ("refused", "RuntimeError: no matching kernel found for this shape"),
        ("raises", "RuntimeError: no matching kernel found (first call)"),
        ("raises_later", "the control failed on its third call"),
    ],
)
def test_a_failing_control_is_the_controls_outcome(tmp_path, kind, words):
    out = run_norm(tmp_path, kind)
    (r,) = out["results"]
    assert r["status"] == "ok", r.get("error")  # the subject is fine: checked against the suite's reference
    assert r["control_status"] == "unavailable" and words in r["control_error"]
    assert len(r["subject_ms"]) == 4 and r["subject_tflops"] > 0
    assert "ratio" not in r and "control_ms" not in r and "control_impl" not in r


def test_the_controls_first_call_is_timed_apart(tmp_path):
    out = run_norm(tmp_path, "jit", reps=5, warmup=2)
    (r,) = out["results"]
    assert r["status"] == "ok" and "control_status" not in r and r["ratio"] > 0
    assert r["control_first_s"] >= 0.3  # the JIT stand-in's sleep: in the first call, not the repetitions
    assert len(r["control_ms"]) == 5
    names = [p[0] for p in out["phases"] if p[1] == "norm/t64"]
    assert names == ["inputs", "compile", "control_compile", "check", "warmup", "timed", "calls"]


def test_a_control_that_cannot_start_leaves_the_subject_measured(tmp_path):
    """aiter on a machine without an AMD GPU: the built-in suites' subjects are timed alone."""
    gemm = shapes.normalize_gemm({"M": 32, "N": 16, "K": 64, "dtype": "fp32"})
    out = trial.run(
        spec(
            [shape("gemm", "g", gemm)],
            {"gemm": {"entry": "benches.kernels.torch_ref:matmul", "adapter": "torch"}},
            control="aiter",
        ),
        tmp_path / "o.json",
    )
    (r,) = out["results"]
    assert r["status"] == "ok" and r["control_status"] == "unavailable" and "ratio" not in r
    assert r["control_error"].startswith("backend aiter unavailable: ") and len(r["subject_ms"]) == 3


def test_bench_stores_the_subject_and_says_the_control_was_unavailable(tmp_path):
    """End to end through real trial processes: `bisector bench` with the aiter control on a CPU."""
    from bisector.commands.bench_cmd import command
    from bisector.store import Store

    cfg, _ = bench_setup(tmp_path, control="aiter")
    res = CliRunner().invoke(command, ["--config", str(cfg), "--trials", "1", "--work", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    assert "gemm/g: the control (aiter) was unavailable in 1 of 1 trials: backend aiter unavailable: " in res.output
    (t,) = Store(tmp_path / "store.sqlite").trials("bench")
    assert t.status is TrialStatus.OK and t.ratio is None and len(t.subject_ms) == 3 and not t.control_ms
    assert control_outcome.control_error(t).startswith("backend aiter unavailable: ")


def _trial(sha: str, shape_key: str, ratio: float | None, why: str | None = None) -> TrialRecord:
    proto = {"control_status": "unavailable", "control_error": why} if why else {}
    return TrialRecord(
        sha=sha,
        shape=shape_key,
        status=TrialStatus.OK,
        subject_ms=(1.0, 1.1, 0.9),
        control_ms=() if why else (2.0, 2.0, 2.0),
        subject_tflops=1.0,
        ratio=ratio,
        protocol=proto,
    )


def test_probe_and_report_say_why_a_shape_has_no_ratio(tmp_path):
    from bisector.store import Store

    shapes_ = [Shape("fa", "a", ()), Shape("fa", "b", ())]
    why = "backend aiter unavailable: no matching kernel found"
    trials = [_trial("s", "fa/a", 2.0), _trial("s", "fa/b", None, why), _trial("s", "fa/b", None, why)]
    probe = StoreProbe("c", shapes_, Store(tmp_path / "s.sqlite"), builds=None, executor=None)  # type: ignore[arg-type]
    m = probe.measurement("s", trials, 3)
    assert m.samples == {"fa/a": (2.0,)} and f"fa/b: no ratio, the control was unavailable: {why}" in m.reason
    speed = StoreProbe(
        "c",
        shapes_,
        Store(tmp_path / "s.sqlite"),
        builds=None,
        executor=None,  # type: ignore[arg-type]
        metric="speed",
    )
    assert len(speed.measurement("s", trials, 3).samples["fa/b"]) == 2  # the subject's own speed still counts
    (note,) = control_outcome.notes(trials, "aiter")
    assert note.startswith("fa/b: the control (aiter) was unavailable in 2 of 2 trials: " + why)

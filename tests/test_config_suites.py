"""Config for the new suites: attention and GEMM shape keys, a subject's declared mapping, suites the
user brings, pytest-benchmark subjects; each problem one line `file: key: problem`, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bisector import config
from bisector.errors import ConfigError
from bisector.model import BuildResult, BuildStatus
from bisector.runner.spec import build_spec

ROOT = Path(__file__).resolve().parents[1]

HEAD = """
name = "t"
[upstream]
repo = "/tmp/x"
[device]
kind = "cpu"
[control]
backend = "torch"
"""
PAGED = (
    HEAD
    + """
[subject.fa]
entry = "lib:paged"
args = ["q_thd", "k_cache", "v_cache"]
kwargs = { block_table = "block_table", seqused_k = "seqused_k", softmax_scale = "sm_scale" }
[[suites.fa.shapes]]
B = 4
Sq = 1
varlen = { min = 10, max = 90, seed = 1 }
H = 8
Hkv = 2
D = 64
page_size = 16
dtype = "fp16"
causal = true
"""
)
GEMM = (
    HEAD
    + """
[subject.gemm]
entry = "lib:mm"
[[suites.gemm.shapes]]
M = 256
N = 256
K = 512
dtype = "fp8_e4m3"
scaling = "block"
"""
)


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert "\n" not in str(info.value)
    return str(info.value).removeprefix(f"{path}: ")


def test_new_shapes_load_with_their_params(tmp_path):
    cfg = config.load(write(tmp_path, PAGED))
    (shape,) = cfg.shapes
    assert shape.key == "fa/b4_h8_d64_hkv2_sq1_p16_varlen_fp16"
    lengths = shape.param("varlen")
    assert len(lengths) == 4 and all(10 <= n <= 90 for n in lengths) and shape.param("Hkv") == 2
    assert cfg.subjects["fa"].args == ("q_thd", "k_cache", "v_cache")
    (g,) = config.load(write(tmp_path, GEMM)).shapes
    assert g.key == "gemm/m256_n256_k512_fp8_e4m3_block" and g.param("scaling") == "block"


@pytest.mark.parametrize(
    "edit,key,problem",
    [
        (("Hkv = 2", "Hkv = 3"), "suites.fa.shapes[0].Hkv", "must divide H=8"),
        (("min = 10", "min = 100"), "suites.fa.shapes[0].varlen", "min 100 > max 90"),
        (("seed = 1", "seed = 1, mean = 4"), "suites.fa.shapes[0].varlen.mean", "unknown key"),
        (("page_size = 16\n", ""), "subject.fa.args[1]", "'k_cache' is not an input of shape suites.fa.shapes[0]"),
        (
            ('block_table = "block_table"', 'block_table = "block_tables"'),
            "subject.fa.kwargs.block_table",
            "'block_tables' is not an input",
        ),
        (
            ("args = [", "options = { block_table = 1 }\nargs = ["),
            "subject.fa.kwargs.block_table",
            "also given in options",
        ),
        (
            (
                'args = ["q_thd", "k_cache", "v_cache"]\nkwargs = { block_table = "block_table", '
                'seqused_k = "seqused_k", softmax_scale = "sm_scale" }\n',
                "",
            ),
            "suites.fa.shapes[0]",
            "give subject.fa args / kwargs",
        ),
        (("Sq = 1", "Sq = 20"), "suites.fa.shapes[0].Sq", "give Sq <= Sk"),
    ],
)
def test_attention_problems_name_file_and_key(tmp_path, edit, key, problem):
    assert edit[0] in PAGED
    msg = error(tmp_path, PAGED.replace(*edit))
    assert msg.startswith(f"{key}: ") and problem in msg, msg


@pytest.mark.parametrize(
    "edit,key,problem",
    [
        (
            ('scaling = "block"', 'scaling = "blocks"'),
            "suites.gemm.shapes[0].scaling",
            "must be one of tensor, row, block",
        ),
        (("N = 256", "N = 200"), "suites.gemm.shapes[0].scaling", "multiples of 128"),
        (('dtype = "fp8_e4m3"', 'dtype = "fp8"'), "suites.gemm.shapes[0].scaling", "unit scales"),
        (("M = 256", "groups = [64, 192]"), "suites.gemm.shapes[0]", "grouped GEMM shapes pass the group offsets"),
        (
            ('entry = "lib:mm"', 'entry = "lib:mm"\nadapter = "flydsl"\nargs = ["a"]'),
            "subject.gemm.args",
            "takes no mapping",
        ),
    ],
)
def test_gemm_problems_name_file_and_key(tmp_path, edit, key, problem):
    assert edit[0] in GEMM
    msg = error(tmp_path, GEMM.replace(*edit))
    assert msg.startswith(f"{key}: ") and problem in msg, msg


BROUGHT = (
    HEAD
    + """
[subject.norm]
entry = "lib.norm:rms_norm"
[suites.norm]
module = "mysuites.norm:RMSNorm"
[[suites.norm.shapes]]
name = "t4096"
T = 4096
D = 8192
"""
)
SUITE_SRC = """
class RMSNorm:
    PARAMS = ("T", "D", "dtype")
    def make_inputs(self, p, device, seed): ...
    def flops(self, p): ...
    def bytes(self, p): ...
    def reference(self, inputs): ...
    def describe(self, p): ...
"""


def brought(tmp_path: Path, src: str = SUITE_SRC) -> None:
    (tmp_path / "mysuites").mkdir(exist_ok=True)
    (tmp_path / "mysuites" / "__init__.py").write_text("")
    (tmp_path / "mysuites" / "norm.py").write_text(src)


def test_brought_suite_is_read_not_run(tmp_path):
    brought(tmp_path, SUITE_SRC + "raise SystemExit('a suite file is never executed by the check')\n")
    cfg = config.load(write(tmp_path, BROUGHT))
    mod = cfg.suite_modules["norm"]
    assert mod.module == "mysuites.norm:RMSNorm" and mod.path == str(tmp_path) and mod.has_control is False
    assert mod.params == ("T", "D", "dtype") and cfg.shapes[0].key == "norm/t4096"
    assert cfg.thresholds.metric_of("norm") == "speed" and cfg.thresholds.metric_of("fa") == "ratio"
    spec = build_spec(cfg, BuildResult("a" * 40, BuildStatus.OK, str(tmp_path)), None, seed=0)
    assert spec["suite_modules"] == {"norm": {"module": "mysuites.norm:RMSNorm", "path": str(tmp_path)}}
    assert spec["shapes"][0]["params"] == {"D": 8192, "T": 4096}
    # With a control, the suite may be compared by ratio.
    brought(tmp_path, SUITE_SRC + "    def control(self, inputs): ...\n")
    cfg = config.load(write(tmp_path, BROUGHT + '[thresholds]\nmetric = { norm = "ratio" }\n'))
    assert cfg.suite_modules["norm"].has_control and cfg.thresholds.metric_of("norm") == "ratio"


@pytest.mark.parametrize(
    "src,edit,key,problem",
    [
        (None, None, "suites.norm.module", "no mysuites/norm.py in the config's folder"),
        (SUITE_SRC.replace("RMSNorm", "Norm"), None, "suites.norm.module", "defines no 'RMSNorm'"),
        (
            SUITE_SRC.replace("    def bytes(self, p): ...\n", ""),
            None,
            "suites.norm.module",
            "class RMSNorm lacks bytes",
        ),
        (SUITE_SRC + "def broken(:\n", None, "suites.norm.module", "SyntaxError"),
        (SUITE_SRC, ("T = 4096", "T = 4096\nS = 1"), "suites.norm.shapes[0].S", "not a parameter of suite norm"),
        (SUITE_SRC, ("D = 8192", "D = { a = 1 }"), "suites.norm.shapes[0].D", "must be a number, string, bool"),
        (
            SUITE_SRC,
            ('module = "mysuites.norm:RMSNorm"', 'module = "mysuites/norm.py"'),
            "suites.norm.module",
            "must be 'pkg.mod:Suite'",
        ),
        (
            SUITE_SRC,
            ('[suites.norm]\nmodule = "mysuites.norm:RMSNorm"\n', "[suites.norm]\n"),
            "suites.norm.module",
            "not a built-in suite",
        ),
        (
            SUITE_SRC,
            ("[control]", '[thresholds]\nmetric = { norm = "ratio" }\n[control]'),
            "thresholds.metric.norm",
            "no control",
        ),
    ],
)
def test_brought_suite_problems(tmp_path, src, edit, key, problem):
    if src is not None:
        brought(tmp_path, src)
    msg = error(tmp_path, BROUGHT.replace(*edit) if edit else BROUGHT)
    assert msg.startswith(f"{key}: ") and problem in msg, msg


def test_brought_suite_from_the_upstream_is_checked_by_its_trials(tmp_path):
    cfg = config.load(
        write(
            tmp_path,
            BROUGHT.replace('module = "mysuites.norm:RMSNorm"', 'module = "lib.suites:Norm"\nsource = "upstream"'),
        )
    )
    mod = cfg.suite_modules["norm"]
    assert mod.source == "upstream" and mod.path is None and mod.has_control is None
    assert cfg.thresholds.metric_of("norm") == "speed"


PYTEST = (
    HEAD
    + """
[subject.bench]
pytest = "benchmarks/test_ops.py::test_work"
[[suites.bench.shapes]]
benchmark = "test_work[512]"
flops = 1e9
[[suites.bench.shapes]]
name = "w1024"
benchmark = "benchmarks/test_ops.py::test_work[1024]"
[thresholds]
metric = "ratio"
"""
)


def test_pytest_subject(tmp_path):
    cfg = config.load(write(tmp_path, PYTEST))
    assert cfg.subjects["bench"].adapter == "pytest" and cfg.subjects["bench"].pytest == (
        "benchmarks/test_ops.py::test_work",
    )
    assert [s.key for s in cfg.shapes] == ["bench/test_work[512]", "bench/w1024"]
    assert cfg.thresholds.metric_of("bench") == "speed"  # no control: its own speed, whatever the default
    spec = build_spec(cfg, BuildResult("a" * 40, BuildStatus.OK, str(tmp_path)), None, seed=0)
    assert spec["subjects"]["bench"]["pytest"] == ["benchmarks/test_ops.py::test_work"]
    assert "args" not in spec["subjects"]["bench"] and "suite_modules" not in spec


@pytest.mark.parametrize(
    "edit,key,problem",
    [
        (('pytest = "benchmarks', 'entry = "x:y"\npytest = "benchmarks'), "subject.bench.entry", "takes no entry"),
        (
            ('pytest = "benchmarks/test_ops.py::test_work"', 'pytest = "../up/test.py"'),
            "subject.bench.pytest[0]",
            "must be a path inside the checkout",
        ),
        (('pytest = "benchmarks/test_ops.py::test_work"', "pytest = []"), "subject.bench.pytest", "names no test"),
        (("flops = 1e9", "flops = -1"), "suites.bench.shapes[0].flops", "must be a number > 0"),
        (("flops = 1e9", "colour = 1"), "suites.bench.shapes[0].colour", "unknown key"),
        (('metric = "ratio"', 'metric = { bench = "ratio" }'), "thresholds.metric.bench", "no control"),
        (("[subject.bench]", "[subject.fa]"), "subject.fa.pytest", "give the upstream's benchmarks a suite name"),
    ],
)
def test_pytest_subject_problems(tmp_path, edit, key, problem):
    assert edit[0] in PYTEST
    msg = error(tmp_path, PYTEST.replace(*edit))
    assert msg.startswith(f"{key}: ") and problem in msg, msg


def test_cli_exit_2_one_line_for_a_new_key(tmp_path):
    path = write(tmp_path, PAGED.replace("page_size = 16", "page_size = 16.5"))
    out = subprocess.run([sys.executable, "-m", "bisector", "check-config", str(path)], capture_output=True, text=True)
    assert (
        out.returncode == 2 and out.stderr == f"error: {path}: suites.fa.shapes[0].page_size: must be int, got 16.5\n"
    )
    ok = subprocess.run(
        [sys.executable, "-m", "bisector", "check-config", str(ROOT / "configs" / "h200-decode.toml")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "varlen=[200 values" in ok.stdout and "gemm/fp8_block_m4096" in ok.stdout


def test_h200_decode_config_is_the_issue_s_case():
    cfg = config.load(ROOT / "configs" / "h200-decode.toml")
    decode = cfg.shape("fa/decode_b200_sk2300")
    assert {k: decode.param(k) for k in ("B", "Sq", "Sk", "H", "Hkv", "page_size", "dtype")} == {
        "B": 200,
        "Sq": 1,
        "Sk": 2300,
        "H": 16,
        "Hkv": 8,
        "page_size": 16,
        "dtype": "fp16",
    }
    lengths = cfg.shape("fa/decode_b200_varlen").param("varlen")
    assert len(lengths) == 200 and 2200 < sum(lengths) / 200 < 2400
    block = cfg.shape("gemm/fp8_block_m4096")
    assert block.param("scaling") == "block" and block.param("dtype") == "fp8_e4m3"
    assert cfg.control == "torch_cuda" and cfg.subjects["fa"].kwargs["block_table"] == "block_table"

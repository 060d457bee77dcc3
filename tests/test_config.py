import subprocess
import sys
from pathlib import Path

import pytest

from bisector import config
from bisector.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

GOOD = """
name = "t"
[upstream]
repo = "/tmp/x"
[device]
kind = "cpu"
[control]
backend = "torch"
[subject.fa]
entry = "lib.fa:flash_attn"
adapter = "torch"
[[suites.fa.shapes]]
name = "s128"
B = 1
H = 2
S = 128
D = 64
dtype = "fp32"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_graph_heater_is_set_per_suite_or_shape_and_reaches_the_trial_spec(tmp_path):
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner.spec import build_spec

    text = GOOD.replace(
        "[control]",
        "[protocol]\ngraph_reads = { default = 2, fa = 1 }\ngraph_heat_ms = { default = 0, fa = 150 }\n[control]",
    )
    cfg = config.load(write(tmp_path, text))
    assert (cfg.protocol.graph_heat_ms, dict(cfg.protocol.graph_heat_ms_by)) == (0.0, {"fa": 150.0})
    spec = build_spec(cfg, BuildResult(sha="d" * 40, status=BuildStatus.OK, source_dir=str(tmp_path)), "fa", seed=1)
    assert spec["graph_heat_ms"] == {"fa/s128": 150.0} and spec["graph_reads"] == {"fa/s128": 1}


def test_a_settle_is_set_per_suite_or_shape_and_reaches_the_trial_spec(tmp_path):
    from bisector.model import BuildResult, BuildStatus
    from bisector.runner.spec import build_spec

    cfg = config.load(
        write(
            tmp_path, GOOD.replace("[control]", '[protocol]\nsettle_ms = { default = 0, "fa/s128" = 200 }\n[control]')
        )
    )
    assert (cfg.protocol.settle_ms, dict(cfg.protocol.settle_ms_by)) == (0.0, {"fa/s128": 200.0})
    spec = build_spec(cfg, BuildResult(sha="d" * 40, status=BuildStatus.OK, source_dir=str(tmp_path)), "fa", seed=1)
    assert spec["settle_ms"] == {"fa/s128": 200.0}
    assert config.load(write(tmp_path, GOOD)).protocol.settle_ms == 0.0  # none unless asked for


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.toml")))
def test_shipped_configs_load(name):
    cfg = config.load(ROOT / "configs" / name)
    assert cfg.shapes and cfg.subjects
    assert all(s.suite in cfg.subjects for s in cfg.shapes)


def test_flydsl_config_matches_the_case():
    cfg = config.load(ROOT / "configs" / "mi355x-flydsl.toml")
    assert [s.param("S") for s in cfg.shapes if s.suite == "fa"] == [61380, 180180, 239580]
    tiles = [s.param("tile") for s in cfg.shapes if s.suite == "gemm" and s.param("M") == 54560]
    assert tiles == [(128, 256, 64), (128, 256, 128), (128, 256, 256), (128, 128, 256)]
    assert cfg.control == "aiter" and cfg.protocol.env["FLYDSL_RUNTIME_ENABLE_CACHE"] == "0"
    llvm, flydsl, link = cfg.build.steps
    # LLVM keyed on its pin whichever file holds it (llvm-hash.txt, then llvm-build-info.json + patch).
    assert llvm.key_files == ("scripts/build_llvm.sh", "thirdparty/llvm-*") and llvm.shared_dir == "FLYDSL_LLVM_DIR"
    assert llvm.env["LLVM_BUILD_PROFILE"] == "amd-minimal"
    # FlyDSL itself runs per commit, against step 1's install; its python_packages go on the path.
    assert not flydsl.key_files and "$FLYDSL_LLVM_DIR/mlir_install" in flydsl.run and "build.sh" in flydsl.run
    assert not link.key_files and "build-fly/python_packages" in link.run
    assert dict(cfg.subjects["gemm"].options) == {}
    assert cfg.protocol.env["AITER_LOG_TUNED_CONFIG"] == "1"


def test_minimal_config_defaults(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    assert cfg.shapes[0].key == "fa/s128"
    assert cfg.shapes[0].param("causal") is False
    assert cfg.protocol.trials == 3 and cfg.thresholds.min_step_pct == 1.0
    with pytest.raises(AttributeError):
        cfg.name = "other"  # frozen


@pytest.mark.parametrize(
    "edit,key,problem",
    [
        (('[upstream]\nrepo = "/tmp/x"', "[upstream]\nrepo = 3"), "upstream.repo", "must be str"),
        (('kind = "cpu"', 'kind = "tpu"'), "device.kind", "must be one of"),
        (("S = 128", "S = -4"), "suites.fa.shapes[0].S", "must be > 0"),
        (('adapter = "torch"', 'adapter = "torch"\ncolour = 1'), "subject.fa.colour", "unknown key"),
        (('entry = "lib.fa:flash_attn"', 'entry = "lib.fa.flash_attn"'), "subject.fa.entry", "module:function"),
        (('[control]\nbackend = "torch"', ""), "control", "missing table"),
        (('dtype = "fp32"', 'dtype = "fp64"'), "suites.fa.shapes[0].dtype", "must be one of"),
        (("[control]", "[build]\nmax_hunk_builds = 0\n[control]"), "build.max_hunk_builds", "must be > 0"),
        (("[control]", "[protocol]\ngraph_reads = 3\n[control]"), "protocol.graph_reads", "must be 1 or 2"),
        (
            ("[control]", "[protocol]\ngraph_reads = { default = 1, attn = 2 }\n[control]"),
            "protocol.graph_reads.attn",
            "unknown suite or shape",
        ),
        (
            ("[control]", "[protocol]\ngraph_heat_ms = { default = 0, fa = -5 }\n[control]"),
            "protocol.graph_heat_ms.fa",
            "must be a number >= 0",
        ),
        (
            ("[control]", "[protocol]\ngraph_reads = { default = 1, fa = 2 }\ngraph_heat_ms = 100\n[control]"),
            "protocol.graph_heat_ms",
            "a heater needs graph_reads = 1, and fa reads 2 replays",
        ),
        (
            ("[control]", "[protocol]\nsettle_ms = { default = 0, fa = -1 }\n[control]"),
            "protocol.settle_ms.fa",
            "must be a number >= 0",
        ),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, edit, key, problem):
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value).startswith(f"{path}: {key}: ")
    assert problem in str(info.value)


FLYDSL_GEMM = """
name = "f"
[upstream]
repo = "/tmp/x"
[device]
kind = "rocm"
[control]
backend = "aiter"
[subject.gemm]
entry = "kernels.gemm.preshuffle_gemm:compile_preshuffle_gemm"
adapter = "flydsl"
options = { waves_per_eu = 2, xcd_swizzle = 4 }
[[suites.gemm.shapes]]
M = 256
N = 256
K = 512
tile = [128, 128, 128]
"""


def test_flydsl_gemm_options_are_checked_by_name(tmp_path):
    assert dict(config.load(write(tmp_path, FLYDSL_GEMM)).subjects["gemm"].options) == {
        "waves_per_eu": 2,
        "xcd_swizzle": 4,
    }
    path = write(tmp_path, FLYDSL_GEMM.replace("waves_per_eu = 2", "preshuffle_b = true"))
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"{path}: subject.gemm.options.preshuffle_b: not an option of the flydsl gemm adapter "
        "(known: enable_scheduler, lds_stage, tile, use_async_copy, waves_per_eu, xcd_swizzle)"
    )
    out = subprocess.run([sys.executable, "-m", "bisector", "check-config", str(path)], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "options.preshuffle_b" in out.stderr
    # An adapter that takes free-form options (torch, callable, triton) is not checked.
    assert config.load(write(tmp_path, GOOD.replace('adapter = "torch"', 'adapter = "torch"\noptions = { any = 1 }')))


STEP = '[[build.steps]]\nrun = "true"\n'


@pytest.mark.parametrize(
    "steps,key,problem",
    [
        (STEP + 'key_files = ["pins/*/llvm.txt"]', "build.steps[0].key_files[0]", "only in the file name"),
        (STEP + 'key_files = ["ok.txt", "../up.txt"]', "build.steps[0].key_files[1]", "relative path"),
        (STEP + 'shared_dir = "LLVM_DIR"', "build.steps[0].shared_dir", "only a step with key_files"),
        (STEP + 'key_files = ["a"]\nshared_dir = "LLVM DIR"', "build.steps[0].shared_dir", "environment variable"),
        # Two keyed steps on one variable: the second would point it at its own, empty dir (the old
        # FlyDSL config's MLIR_PATH); the default name counts as well.
        (
            STEP + 'key_files = ["a"]\n' + STEP + 'key_files = ["b"]',
            "build.steps[1].shared_dir",
            "BISECTOR_SHARED_DIR is already the shared dir of build.steps[0]",
        ),
    ],
)
def test_build_step_keys_are_checked(tmp_path, steps, key, problem):
    path = write(tmp_path, GOOD.replace("[control]", f'[build]\nrecipe = "command"\n{steps}\n[control]', 1))
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value).startswith(f"{path}: {key}: ") and problem in str(info.value)


def test_missing_and_unparsable_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        config.load(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        config.load(write(tmp_path, "name = ["))


def test_cli_bad_config_exit_2_one_line(tmp_path):
    path = write(tmp_path, GOOD.replace("S = 128", 'S = "big"'))
    out = subprocess.run([sys.executable, "-m", "bisector", "check-config", str(path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: {path}: suites.fa.shapes[0].S: must be int, got 'big'"
    ok = subprocess.run(
        [sys.executable, "-m", "bisector", "check-config", str(ROOT / "configs" / "h200-triton.toml")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "gemm/m54560" in ok.stdout


def _leaves(data: object, path: tuple = ()):  # type: ignore[no-untyped-def]
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _leaves(v, (*path, i))
    if path:
        yield path


WRONG_VALUES = ["tight", {"a": 1}, [1, "x"], float("nan"), float("inf"), -1, True, ""]


def test_every_key_given_a_wrong_type_is_a_config_error_never_a_traceback():
    """Each value of a full config (every table the loader reads) replaced by a string, a table, a
    list, NaN, ... must give ConfigError naming the file: a tolerance given as a string was a
    ValueError traceback."""
    import copy
    import tomllib

    full = tomllib.loads((ROOT / "configs" / "mi355x-flydsl.toml").read_text())
    full["store"] = "results.sqlite"
    full.setdefault("thresholds", {})["tolerances"] = {"fa": [0.01, 0.01], "gemm": [0.02, 0.02]}
    seen = 0
    for where in list(_leaves(full)):
        for wrong in WRONG_VALUES:
            data = copy.deepcopy(full)
            parent = data
            for k in where[:-1]:
                parent = parent[k]
            parent[where[-1]] = wrong
            try:
                config.parse(data, Path("c.toml"))
            except ConfigError as exc:
                assert str(exc).startswith("c.toml: ") and "\n" not in str(exc)
                seen += 1
    assert seen > 300  # most replacements are refused; the rest (e.g. any string as a name) are fine


def test_paths_in_a_config_are_made_absolute_against_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = GOOD.replace('name = "t"', 'name = "t"\nstore = "state/r.sqlite"') + '[report]\ndir = "out"\n'
    cfg = config.load(write(tmp_path, text + '[build]\ncache_dir = "~/builds"\n'))
    assert cfg.store == str(tmp_path / "state" / "r.sqlite") and cfg.report_dir == str(tmp_path / "out")
    assert cfg.build.cache_dir == str(Path.home() / "builds")
    assert config.load(write(tmp_path, GOOD)).report_dir == str(tmp_path / "reports")


def test_min_step_per_suite_and_shape(tmp_path):
    cfg = config.load(
        write(tmp_path, GOOD + '[thresholds]\nmin_step_pct = { default = 3.0, "fa/s128" = 5, fa = 4.0 }\n')
    )
    th = cfg.thresholds
    assert th.min_step_pct == 3.0 and th.min_step("fa/s128") == 5.0  # the shape's own over its suite's
    assert th.min_step("fa/other") == 4.0 and th.min_step("gemm/x") == 3.0
    assert config.load(write(tmp_path, GOOD + "[thresholds]\nmin_step_pct = 2\n")).thresholds.min_step("fa/s128") == 2.0


@pytest.mark.parametrize(
    "value, where, says",
    [
        ('{ "fa/s999" = 5.0 }', "thresholds.min_step_pct.fa/s999", "unknown suite or shape"),
        ("{ default = 0 }", "thresholds.min_step_pct.default", "> 0"),
        ('{ fa = "big" }', "thresholds.min_step_pct.fa", "> 0"),
        ("-1.0", "thresholds.min_step_pct", "> 0"),
    ],
)
def test_bad_min_step_names_its_key(tmp_path, value, where, says):
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, GOOD + f"[thresholds]\nmin_step_pct = {value}\n"))
    assert where in str(err.value) and says in str(err.value)


@pytest.mark.parametrize("key", ["split_on_moved", "verify_on_open"])
def test_the_search_measures_every_shape_when_the_config_says_so(tmp_path, key):
    from bisector.pipeline import search_settings

    assert getattr(search_settings(config.load(write(tmp_path, GOOD))), key)
    cfg = config.load(write(tmp_path, GOOD.replace("[control]", f"[protocol]\n{key} = false\n[control]")))
    assert getattr(cfg.protocol, key) is False and getattr(search_settings(cfg), key) is False
    with pytest.raises(ConfigError, match=key):
        config.load(write(tmp_path, GOOD.replace("[control]", f'[protocol]\n{key} = "no"\n[control]')))

"""`bisector simulate` and `bisector plan` over a real git history made in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisector.commands.plan_cmd import command as plan_command
from bisector.commands.simulate_cmd import command as simulate_command
from bisector.errors import BadInput, ConfigError
from bisector.search.cost import estimate, noise_from_rows
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel, parse_model, resolve_prefix
from tests.gitfixtures import squash_history


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("sim") / "upstream"
    return repo, squash_history(repo, n=30)


def write_model(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_simulate_finds_the_model_steps_in_a_real_history(upstream, tmp_path: Path) -> None:
    repo, shas = upstream
    model = write_model(
        tmp_path / "m.toml",
        f"""
[shapes]
fa_s4096 = 480.0
gemm_8192 = 700.0
[[steps]]
commit = "{shas[9][:8]}"
factors = {{ fa_s4096 = 0.95 }}
[[steps]]
commit = "{shas[21][:10]}"
factors = {{ gemm_8192 = 1.06, fa_s4096 = 0.98 }}
[[fails]]
commit = "{shas[15][:7]}"
""",
    )
    res = CliRunner().invoke(
        simulate_command,
        [
            "--repo",
            str(repo),
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--model",
            str(model),
            "--noise",
            "0.01",
            "--seed",
            "4",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [s["commit"] for s in out["steps"]] == [shas[9], shas[21]]
    assert [s["pr"] for s in out["steps"]] == [909, 921]
    assert out["steps"][0]["shapes"] == ["fa_s4096"]
    assert out["steps"][1]["shapes"] == ["fa_s4096", "gemm_8192"]
    lo, hi = out["steps"][0]["ci95"]["fa_s4096"]
    assert lo < out["steps"][0]["change_pct"]["fa_s4096"] < hi
    assert -7.0 < out["steps"][0]["change_pct"]["fa_s4096"] < -3.0
    assert set(out["skipped"]) <= {shas[15]}
    assert out["probes"] >= 5 and out["trials"] >= out["probes"] * 3
    text = CliRunner().invoke(
        simulate_command, ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--model", str(model)]
    )
    assert text.exit_code == 0 and "#909" in text.output and "change 9" in text.output


@pytest.mark.parametrize(
    "body, key",
    [
        ('[shapes]\na = "fast"\n', "shapes.a"),
        ('[shapes]\na = 1.0\n[[steps]]\ncommit = "zzzz"\nfactors = { a = 0.9 }\n', "steps[0].commit"),
        ('[shapes]\na = 1.0\n[[steps]]\ncommit = "{sha5}"\nfactors = { b = 0.9 }\n', "steps[0].factors.b"),
        ('[shapes]\na = 1.0\n[[steps]]\ncommit = "{sha5}"\n', "steps[0].factors"),
        ("[shapes]\na = 1.0\n[[fails]]\ncommit = 12\n", "fails[0].commit"),
        ('[shapes]\na = 1.0\n[[steps]]\ncommit = "{good}"\nfactors = { a = 0.9 }\n', "steps[0].commit"),
        ("[shape]\na = 1.0\n", "shape"),
        ("[shapes\n", ""),
    ],
)
def test_bad_models_fail_with_one_line_naming_file_and_key(upstream, tmp_path: Path, body: str, key: str) -> None:
    repo, shas = upstream
    model = write_model(tmp_path / "bad.toml", body.replace("{sha5}", shas[5][:9]).replace("{good}", shas[0][:9]))
    res = CliRunner().invoke(
        simulate_command, ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--model", str(model), "--json"]
    )
    assert res.exit_code == 2
    line = res.output.strip()
    assert line.startswith("error: ") and "\n" not in line
    assert f"{model}: {key}" in line


def test_unknown_ref_and_missing_model_are_bad_input(upstream, tmp_path: Path) -> None:
    repo, shas = upstream
    res = CliRunner().invoke(
        simulate_command,
        ["--repo", str(repo), "--good", "nope", "--bad", shas[-1], "--model", str(tmp_path / "m.toml")],
    )
    assert res.exit_code == 2 and "nope" in res.output
    res = CliRunner().invoke(
        simulate_command,
        ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--model", str(tmp_path / "missing.toml")],
    )
    assert res.exit_code == 2 and "missing.toml: no such file" in res.output


def test_sha_prefixes() -> None:
    commits = ["abcd1234" + "0" * 32, "abcd9999" + "0" * 32, "ffff0000" + "1" * 32]
    assert resolve_prefix("ABCD12", commits) == commits[0]
    with pytest.raises(BadInput, match="'abcd' is ambiguous"):
        resolve_prefix("abcd", commits)
    with pytest.raises(BadInput, match="not a commit in the range"):
        resolve_prefix("1234", commits)
    with pytest.raises(BadInput, match="too short"):
        resolve_prefix("ff", commits)
    with pytest.raises(ConfigError, match=r"m.toml: steps\[0\].commit: .*ambiguous"):
        parse_model({"shapes": {"a": 1.0}, "steps": [{"commit": "abcd", "factors": {"a": 0.9}}]}, commits, "m.toml")


def test_simulated_probe_is_cumulative_deterministic_and_normalized() -> None:
    commits = [f"{i:040x}" for i in range(10)]
    model = StepModel({"a": 480.0, "b": 700.0}, (SimStep(commits[4], {"a": 0.9}),), frozenset({commits[7]}))
    probe = SimulatedProbe(commits, model, noise_cv=0.02, seed=5)
    first = probe(commits[5], 3)
    more = probe(commits[5], 8)
    assert more.samples["a"][:3] == first.samples["a"] and len(more.samples["a"]) == 8
    again = SimulatedProbe(commits, model, noise_cv=0.02, seed=5)
    again(commits[2], 4)  # another commit first: the same samples for commit 5
    assert again(commits[5], 8).samples == more.samples
    assert probe(commits[7], 3).status.value == "skip"
    flat = SimulatedProbe(commits, model, noise_cv=0.0)
    assert flat(commits[3], 2).samples["a"] == (1.0, 1.0)  # ratios to GOOD, not TFLOP/s
    assert flat(commits[9], 1).samples == {"a": (pytest.approx(0.9),), "b": (1.0,)}


def test_plan_estimate_scales_with_noise() -> None:
    quiet = estimate(200, 0.005, steps=1, step_pct=5.0, runs=8)
    noisy = estimate(200, 0.04, steps=1, step_pct=5.0, runs=8)
    assert quiet.found_rate == 1.0
    assert quiet.probes_mean <= 8 + 4
    assert noisy.trials_mean > quiet.trials_mean
    assert noisy.gpu_hours_mean == pytest.approx(noisy.trials_mean * 60 / 3600)


def test_noise_from_rows() -> None:
    rows = [{"sha": "a", "shape": "s", "value": v} for v in (1.0, 1.02, 0.98)]
    rows += [{"sha": "b", "shape": "s", "value": 2.0, "status": "crash"}]
    cv, groups = noise_from_rows(rows)
    assert groups == 1 and 0.015 < cv < 0.025


def test_plan_command(upstream, tmp_path: Path) -> None:
    repo, shas = upstream
    res = CliRunner().invoke(
        plan_command,
        [
            "--repo",
            str(repo),
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--noise-cv",
            "0.01",
            "--runs",
            "5",
            "--trial-seconds",
            "120",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["commits"] == 30 and out["probes_bound"] == 9
    assert out["gpu_hours_mean"] == pytest.approx(out["trials_mean"] * 120 / 3600)
    csv = tmp_path / "t.csv"
    csv.write_text("sha,shape,value\n" + "".join(f"{shas[1]},fa,{v}\n" for v in (1.0, 1.01, 0.99)))
    res = CliRunner().invoke(
        plan_command, ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--from-csv", str(csv), "--runs", "3"]
    )
    assert res.exit_code == 0, res.output
    assert "noise CV 1.00%" in res.output and "GPU time" in res.output
    res = CliRunner().invoke(plan_command, ["--repo", str(repo), "--good", shas[0], "--bad", shas[-1]])
    assert res.exit_code == 2 and "exactly one of" in res.output


def test_plan_and_simulate_search_the_way_the_pipeline_does() -> None:
    """Through schedule.Clocked (`plan`, `simulate`, the accuracy study) the search measures a split
    point's open shapes alone, as through the pipeline's StoreProbe, and the trial processes Clocked
    counts are the search's own; before, Clocked hid `shaped` and every commit was timed on every shape."""
    from bisector.search import SearchSettings, localize
    from bisector.search.schedule import Clocked

    commits = [f"{i:040x}" for i in range(1, 121)]
    model = StepModel(("fa/s4096", "gemm/8192"), (SimStep(commits[70], {"gemm/8192": 0.9}),), frozenset())
    settings = SearchSettings(min_step_pct=3.0)
    bare = localize(commits, SimulatedProbe(commits, model, 0.005, seed=3), settings)
    clocked = Clocked(SimulatedProbe(commits, model, 0.005, seed=3))
    through = localize(commits, clocked, settings)
    assert [s.commit for s in through.steps] == [s.commit for s in bare.steps] == [commits[70]]
    assert any(set(m.samples) == {"gemm/8192"} for m in through.measurements.values())  # split points on the GEMM
    assert through.trials == bare.trials == clocked.trials

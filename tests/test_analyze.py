"""`bisector analyze`: steps in an already-recorded series, from a CSV on disk."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisector.commands.analyze_cmd import command
from bisector.errors import BadInput
from bisector.search.analyze import find_steps, load_csv
from bisector.search.simulate import SimStep, SimulatedProbe, StepModel

SHAPES = ("fa/s4096", "gemm/8192")


def shas(n: int) -> list[str]:
    return [hashlib.sha1(f"c{i}".encode()).hexdigest() for i in range(n)]


def write_series(
    path: Path,
    commits: list[str],
    model: StepModel,
    cv: float,
    trials: int = 3,
    seed: int = 0,
    shuffle: bool = True,
    extra: list[dict[str, str]] = (),
) -> Path:
    probe = SimulatedProbe(commits, model, cv, seed)
    rows = []
    for order, sha in enumerate(commits):
        m = probe(sha, trials)
        for shape, values in m.samples.items():
            for v in values:
                rows.append(
                    {
                        "commit": sha,
                        "shape": shape,
                        "ratio": f"{v:.6f}",
                        "order": str(order),
                        "status": "ok",
                        "patch_hash": "",
                    }
                )
    rows += list(extra)
    if shuffle:  # history order comes from the `order` column, not the row order
        rows = rows[::-1]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["commit", "shape", "ratio", "order", "status", "patch_hash"])
        w.writeheader()
        w.writerows(rows)
    return path


def test_finds_every_step_in_a_fully_sampled_series(tmp_path: Path) -> None:
    c = shas(120)
    model = StepModel(
        {s: 1.0 for s in SHAPES},
        (
            SimStep(c[30], {"fa/s4096": 0.93}),
            SimStep(c[31], {"gemm/8192": 1.05}),
            SimStep(c[90], {"fa/s4096": 0.97, "gemm/8192": 0.97}),
        ),
        frozenset(),
    )
    glitch = [
        {
            "commit": c[60],
            "shape": "fa/s4096",
            "ratio": "0.5",
            "order": "60",
            "status": "ok",
            "patch_hash": "abc123",
        },  # a patched A/B trial: not part of the series
        {"commit": c[61], "shape": "gemm/8192", "ratio": "2.0", "order": "61", "status": "wrong", "patch_hash": ""},
    ]
    path = write_series(tmp_path / "s.csv", c, model, cv=0.01, extra=glitch)
    series = load_csv(path)
    assert series.commits == tuple(c)
    assert series.wrong == {c[61]: frozenset({"gemm/8192"})}
    r = find_steps(series)
    got = {c.index(s.commit): s.shapes for s in r.steps}
    assert got == {30: ("fa/s4096",), 31: ("gemm/8192",), 90: ("fa/s4096", "gemm/8192")}
    assert -8.0 < r.steps[0].change_pct["fa/s4096"] < -6.0
    assert r.steps[0].parent == c[29]


@pytest.mark.parametrize("seed", range(5))
def test_flat_noisy_series_has_no_steps(tmp_path: Path, seed: int) -> None:
    c = shas(200)
    path = write_series(
        tmp_path / "flat.csv", c, StepModel({s: 1.0 for s in SHAPES}, (), frozenset()), cv=0.03, seed=seed
    )
    assert find_steps(load_csv(path)).steps == ()


def test_cli_json_in_the_simulate_form(tmp_path: Path) -> None:
    c = shas(60)
    model = StepModel({s: 1.0 for s in SHAPES}, (SimStep(c[20], {"gemm/8192": 0.9}),), frozenset())
    path = write_series(tmp_path / "s.csv", c, model, cv=0.01)
    res = CliRunner().invoke(command, [str(path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [s["commit"] for s in out["steps"]] == [c[20]]
    assert out["steps"][0]["shapes"] == ["gemm/8192"] and out["probes"] == 0 and out["skipped"] == []
    text = CliRunner().invoke(command, [str(path)])
    assert text.exit_code == 0 and c[20][:10] in text.output and "gemm/8192" in text.output


def test_a_reports_gzipped_trials_read_as_the_plain_csv(tmp_path: Path) -> None:
    """Reports write `trials.csv.gz`; `bisector analyze` reads it as it is."""
    c = shas(60)
    model = StepModel({s: 1.0 for s in SHAPES}, (SimStep(c[20], {"gemm/8192": 0.9}),), frozenset())
    plain = write_series(tmp_path / "s.csv", c, model, cv=0.01)
    packed = tmp_path / "trials.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert find_steps(load_csv(packed)) == find_steps(load_csv(plain))
    assert [s.commit for s in find_steps(load_csv(packed)).steps] == [c[20]]


def test_store_export_columns_and_dates(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    lines = ["id,campaign,sha,shape,value,status,patch_hash,commit_date,commit_pr"]
    k = 0
    for i, (day, level) in enumerate([(1, 1.0), (2, 1.0), (3, 1.0), (4, 0.8), (5, 0.8), (6, 0.8)]):
        for v in (level, level * 1.003, level * 0.997):
            k += 1
            lines.append(f"{k},nightly,{'%040x' % (7 - i)},fa/s1,{v},ok,,2026-08-0{day}T00:00:00+00:00,{900 + i}")
    path.write_text("\n".join(lines) + "\n")
    r = find_steps(load_csv(path))
    assert [s.commit for s in r.steps] == [f"{4:040x}"] and r.steps[0].pr == 903


@pytest.mark.parametrize(
    "text, problem",
    [
        ("sha,value\nabc,1.0\n", "missing column 'shape'"),
        ("sha,shape\nabc,fa\n", "missing column 'value' or 'ratio'"),
        ("sha,shape,value\nabc,fa,fast\n", "must hold positive numbers (row 2)"),
        ("sha,shape,value,date\nabc,fa,1.0,someday\n", "'date' has empty or unreadable values"),
        ("sha,shape,value,campaign\na,fa,1.0,x\nb,fa,1.0,y\n", "rows of 2 campaigns"),
    ],
)
def test_bad_csv_is_one_line_bad_input(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(BadInput, match=r"bad.csv: "):
        load_csv(path)
    res = CliRunner().invoke(command, [str(path)])
    assert res.exit_code == 2 and problem in res.output and res.output.count("\n") == 1


def test_missing_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(command, [str(tmp_path / "nope.csv")])
    assert res.exit_code == 2 and "nope.csv: no such file" in res.output

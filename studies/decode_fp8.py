"""Measure a config's attention and GEMM shapes against their controls, correctness checked, and print
a table: median times with the IQR of every repetition, the ratio to the control, TFLOP/s, GB/s
and the share of the device's peak bandwidth (the JSON adds each trial's medians and outputs).

    python -m studies.decode_fp8 --config configs/h200-decode.toml [--trials 3] [--out results.json]
                                 [--work DIR: keep the trials' specs, outputs and logs]

Written for the H200 part of issue 15 (paged-KV decode B=200, Sq=1, Sk~2.3k, H=16, Hkv=8, page 16,
fp16; fp8 GEMM with 1x128 / 128x128 block scales), and usable with any config whose suites are `fa`
and `gemm`. Each trial is a fresh `python -m benches.trial` process, as the bot runs them: the
subject and the control timed alternately with the cache flushed, the subject's output checked
against the control's; the first trial starts with an empty Triton cache (cold compile). Exit code
0 when every shape was right in every trial, 1 otherwise, 2 for a bad config (one line naming file
and key). Reads the TOML itself (as the trial process does); the shapes are normalized
by benches/shapes.py, the same rules `bisector check-config` applies. The ratio is the control's
time over the subject's (above 1: the subject is faster), per repetition at full clock on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benches import shapes


class BadConfig(Exception):
    """`file: key: problem`."""


def _table(data: Mapping[str, Any], key: str, path: Path) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise BadConfig(f"{path}: {key}: missing table")
    return value


def shape_specs(data: Mapping[str, Any], path: Path) -> list[dict[str, Any]]:
    """The config's fa and gemm shapes, normalized as the bot normalizes them."""
    out = []
    for suite, rule in (("fa", shapes.normalize_attention), ("gemm", shapes.normalize_gemm)):
        rows = _table(data, "suites", path).get(suite, {}).get("shapes", [])
        for i, row in enumerate(rows):
            key = f"suites.{suite}.shapes[{i}]"
            try:
                params = rule(row)
            except shapes.ShapeError as exc:
                raise BadConfig(f"{path}: {key}.{exc.key}: {exc.problem}") from None
            name = row.get("name") or f"{suite}{i}"
            out.append(
                {
                    "key": f"{suite}/{name}",
                    "suite": suite,
                    "name": name,
                    "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
                }
            )
    if not out:
        raise BadConfig(f"{path}: suites: no fa or gemm shapes")
    return out


def build_spec(data: Mapping[str, Any], path: Path, seed: int, reps: int | None, source: str | None) -> dict[str, Any]:
    specs = shape_specs(data, path)
    subjects = {}
    for suite in {s["suite"] for s in specs}:
        sub = _table(data, "subject", path).get(suite)
        if not isinstance(sub, Mapping) or "entry" not in sub:
            raise BadConfig(f"{path}: subject.{suite}: missing (suite {suite} has shapes)")
        subjects[suite] = {
            "entry": sub["entry"],
            "adapter": sub.get("adapter", "callable"),
            "layout": sub.get("layout", "bhsd"),
            "options": dict(sub.get("options", {})),
        }
        if sub.get("args") or sub.get("kwargs"):
            subjects[suite].update(args=list(sub.get("args", [])), kwargs=dict(sub.get("kwargs", {})))
    proto = data.get("protocol", {})
    repo = Path(source or _table(data, "upstream", path).get("repo", "."))
    return {
        "sha": "worktree",
        "suite": ",".join(sorted(subjects)),
        "shapes": specs,
        "subjects": subjects,
        "control": _table(data, "control", path).get("backend", "none"),
        "device": _table(data, "device", path).get("kind", "cpu"),
        "source_dirs": [str(repo.resolve())] if repo.is_dir() else [],
        "reps": reps or proto.get("reps", 20),
        "warmup": proto.get("warmup", 3),
        "flush_mb": proto.get("flush_mb", 0),
        "seed": seed,
        "tolerances": data.get("thresholds", {}).get("tolerances", {}),
    }


def run_trials(spec: Mapping[str, Any], trials: int, work: Path, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """One fresh trial process per trial; the Triton cache starts empty and is kept after the first."""
    outs = []
    cache = work / "triton-cache"
    for i in range(trials):
        trial_spec = {**spec, "seed": spec["seed"] + i}
        (work / f"spec{i}.json").write_text(json.dumps(trial_spec))
        proc = subprocess.run(
            [sys.executable, "-m", "benches.trial", f"spec{i}.json", f"out{i}.json"],
            cwd=work,
            env={**env, "TRITON_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
        )
        (work / f"log{i}.txt").write_text(proc.stdout + proc.stderr)
        out_file = work / f"out{i}.json"
        if not out_file.exists():
            raise RuntimeError(f"trial {i} wrote nothing (exit {proc.returncode}): {proc.stderr[-800:]}")
        outs.append(json.loads(out_file.read_text()))
    return outs


def _median(values: Sequence[Any]) -> float | None:
    xs = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.median(xs) if xs else None


def iqr_pct(values: Sequence[float]) -> float | None:
    """The interquartile range as a percentage of the median: the spread of the repetitions."""
    xs = sorted(float(v) for v in values if isinstance(v, (int, float)))
    if len(xs) < 2:
        return None
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    mid = statistics.median(xs)
    return 100 * (q3 - q1) / mid if mid else None


def summarize(outs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per shape over all trials: medians of the trials' medians, and spreads (the IQR of every
    repetition as % of its median; each trial's median to show the spread from trial to trial)."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for out in outs:
        for r in out.get("results", []):
            rows.setdefault(r["shape"], []).append(r)
    table = []
    for shape, rs in rows.items():
        statuses = sorted({r["status"] for r in rs})
        peak = _median([r.get("peak_gbps") for r in rs])
        row = {
            "shape": shape,
            "status": "ok" if statuses == ["ok"] else ",".join(statuses),
            "trials": len(rs),
            "error": next((r.get("error", "") for r in rs if r["status"] != "ok"), ""),
            "control_impl": next((r.get("control_impl", "") for r in rs if r.get("control_impl")), ""),
            "peak_gbps": peak,
            "max_rel_err": max((r.get("max_rel_err") or 0.0) for r in rs),
            "ratio_spread_pct": iqr_pct([x for r in rs for x in r.get("ratios") or []]),
            "trial_ratios": [r.get("ratio") for r in rs],
        }
        for key in ("subject_tflops", "control_tflops", "subject_gbps", "control_gbps", "ratio"):
            row[key] = _median([r.get(key) for r in rs])
        for side in ("subject", "control"):
            row[f"{side}_trial_ms"] = [_median(r.get(f"{side}_ms") or []) for r in rs]
            row[f"{side}_ms"] = _median(row[f"{side}_trial_ms"])
            row[f"{side}_spread_pct"] = iqr_pct([x for r in rs for x in r.get(f"{side}_ms") or []])
            gbps = row[f"{side}_gbps"]
            row[f"{side}_peak_pct"] = 100 * gbps / peak if gbps and peak else None
        table.append(row)
    return table


def render(table: Sequence[Mapping[str, Any]]) -> str:
    cols = [
        ("shape", "shape", "s"),
        ("status", "status", "s"),
        ("subject_ms", "subj ms", ".4g"),
        ("subject_spread_pct", "IQR %", ".1f"),
        ("control_ms", "ctrl ms", ".4g"),
        ("control_spread_pct", "IQR %", ".1f"),
        ("ratio", "ratio", ".3f"),
        ("ratio_spread_pct", "IQR %", ".1f"),
        ("subject_tflops", "subj TFLOP/s", ".4g"),
        ("control_tflops", "ctrl TFLOP/s", ".4g"),
        ("subject_gbps", "subj GB/s", ".4g"),
        ("control_gbps", "ctrl GB/s", ".4g"),
        ("subject_peak_pct", "subj %peak", ".1f"),
        ("control_peak_pct", "ctrl %peak", ".1f"),
        ("max_rel_err", "max rel err", ".2e"),
        ("control_impl", "control", "s"),
    ]
    cells = [[h for _, h, _ in cols]]
    for row in table:
        cells.append(["-" if row.get(k) is None else format(row[k], f) for k, _, f in cols])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    errors = [f"{row['shape']}: {row['error']}" for row in table if row["error"]]
    return "\n".join(lines + errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.decode_fp8", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/h200-decode.toml", type=Path)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default: the config's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", default=None, help="the subjects' checkout (default: upstream.repo)")
    parser.add_argument("--out", type=Path, default=None, help="write every trial's output and the table (JSON)")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the trials' specs, outputs, logs and Triton cache here (default: a temporary dir)",
    )
    args = parser.parse_args(argv)
    try:
        data = tomllib.loads(args.config.read_text(encoding="utf-8"))
        spec = build_spec(data, args.config, args.seed, args.reps, args.source)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        print(f"error: {args.config}: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except BadConfig as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    visible = data.get("device", {}).get("visible", [0])
    if spec["device"] == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = str(visible[0])
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        outs = run_trials(spec, args.trials, args.work.resolve(), env)
    else:
        with tempfile.TemporaryDirectory(prefix="decode-fp8-") as tmp:
            outs = run_trials(spec, args.trials, Path(tmp), env)
    table = summarize(outs)
    print(render(table))
    if args.out:
        args.out.write_text(
            json.dumps({"config": str(args.config), "table": table, "trials": outs}, indent=1, default=str)
        )
    return 0 if all(row["status"] == "ok" for row in table) and len(table) == len(spec["shapes"]) else 1


if __name__ == "__main__":
    sys.exit(main())

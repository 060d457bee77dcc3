"""`bisector demo`: write the embedded demo upstream and bisect it end to end, for real."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from bisector import config as config_mod
from bisector import pipeline
from bisector.commands.common import fail_on_error
from bisector.commands.run import run_and_print
from bisector.errors import BadInput

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def demo_config(device: str, repo: Path) -> config_mod.Config:
    name = {"cpu": "cpu-demo.toml", "cuda": "h200-demo.toml"}[device]
    path = CONFIGS / name
    if not path.exists():
        raise BadInput(f"{path}: demo config not found (run from a clone of bisector)")
    cfg = config_mod.load(path)
    return dataclasses.replace(cfg, upstream=dataclasses.replace(cfg.upstream, repo=str(repo)))


@click.command("demo")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--dir", "directory", default="bisector-demo", show_default=True,
              help="Where the demo upstream, its store and its builds go; re-running resumes.")
@click.option("--report-dir", default=None, help="Default: reports/<date>-<demo config name>/.")
@click.option("--json", "as_json", is_flag=True)
@fail_on_error
def command(device: str, directory: str, report_dir: str | None, as_json: bool) -> None:
    """Bisect the embedded demo library (about 40 commits with planted steps) on this machine."""
    from bisector.demo import write_demo_repo

    device = pick_device(device)
    root = Path(directory).resolve()
    manifest = write_demo_repo(root / "upstream")
    cfg = demo_config(device, root / "upstream")
    options = pipeline.RunOptions(good=manifest.good, bad=manifest.bad, store=str(root / "results.sqlite"),
                                  work_dir=str(root / "work"), report_dir=report_dir,
                                  command=" ".join(["bisector", *sys.argv[1:]]))
    run_and_print(cfg, options, as_json, n_commits=len(manifest.commits) if hasattr(manifest, "commits") else 40,
                  extra={"repo": str(root / "upstream")})

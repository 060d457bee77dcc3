"""`bisector check-config FILE`: load and validate a config, print what it measures."""

from __future__ import annotations

import click

from bisector import config
from bisector.commands.common import check_upstream, fail_on_error


@click.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
@fail_on_error
def command(path: str) -> None:
    """Validate a config file; exit 2 with `file: key: problem` when it is wrong."""
    cfg = config.load(path)
    check_upstream(cfg)
    click.echo(
        f"{cfg.name}: {cfg.upstream.repo} ({cfg.upstream.branch}), build {cfg.build.recipe}, "
        f"device {cfg.device}, control {cfg.control}"
    )
    for shape in cfg.shapes:
        params = " ".join(f"{k}={_value(v)}" for k, v in shape.params)
        click.echo(f"  {shape.key:32s} {params}")
    if cfg.triggers.allow_unsandboxed_forks or cfg.sandbox.require is False:
        why = "allow_unsandboxed_forks" if cfg.triggers.allow_unsandboxed_forks else "sandbox.require = false"
        click.echo(f"triggers: /perf and /bisect may run a fork's code on a runner without a sandbox ({why})")
    if cfg.sandbox.require:
        click.echo("sandbox: required: a run stops (exit 3) where code under test would run unsandboxed")
    if cfg.build.network:
        click.echo("build: steps share the host's network (build.network)")


def _value(v: object) -> str:
    """A long list (varlen's lengths, a grouped GEMM's Ms) as its size and range."""
    if isinstance(v, tuple) and len(v) > 8 and all(isinstance(x, int) for x in v):
        return f"[{len(v)} values {min(v)}..{max(v)}, mean {sum(v) / len(v):.0f}]"
    return f"[{', '.join(map(str, v))}]" if isinstance(v, tuple) else str(v)

"""The executor seam: which executor runs a config's trials, from `[executor]` (or `--executor`).

- `local`: this host's devices (bisector/runner/launch.py); builds made by the bot.
- `dask`: the GPU workers of a dask.distributed scheduler (bisector/runner/dask_executor.py);
  builds made on the workers too, where the trials run. `address = "local"` (the default)
  starts a scheduler and one worker per visible device on this host.

Both hand the probe the same `submit`/`cancel`; `Trials.width` is how many commits the search may
probe at once (the devices the executor has, unless `[executor] width` says otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisector.config import Config
from bisector.runner.launch import default_ahead, make_executor


@dataclass(frozen=True)
class Trials:
    """An opened executor, what builds commits for it (None: the bot's own builder), and its width."""

    executor: Any
    builds: Any | None
    devices: int

    def width(self, config: Config) -> int:
        return config.executor.width or self.devices


def open_trials(config: Config, work: str | Path) -> Trials:
    """The executor `config.executor` names, started."""
    if config.executor.kind == "local":
        return Trials(make_executor(config, work), None, len(config.devices))
    return open_dask(config, work)


def open_dask(config: Config, work: str | Path) -> Trials:
    from bisector.runner.cluster import local_cluster, require_distributed, security_for
    from bisector.runner.dask_executor import DaskExecutor
    from bisector.runner.launch import held_room

    distributed = require_distributed()
    address = config.executor.address or "local"
    if address != "local" and not address.startswith("tls://"):
        unauthenticated(config, address)
    slots = 1 + default_ahead(config)
    cluster = local_cluster(config.devices, threads=slots, holds=held_room(config)) if address == "local" else None
    try:
        client = distributed.Client(
            cluster if cluster is not None else address,
            timeout="60s",
            set_as_default=False,
            **({"security": security_for(address)} if security_for(address) else {}),
        )
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        from bisector.errors import BisectorError

        raise BisectorError(f"dask: cannot reach the scheduler at {address}: {exc}") from None
    executor = DaskExecutor(client, config, str(Path(work).resolve()), slots=slots, cluster=cluster)
    if cluster is not None:
        executor.wait_for_devices(len(config.devices))
    else:
        executor.wait_for_devices(1)
    return Trials(executor, executor, executor.device_count)


def unauthenticated(config: Config, address: str) -> None:
    """A fleet's scheduler without TLS runs any client's tasks in its workers, outside any sandbox:
    refused for a run that must be sandboxed (`[sandbox] require`, a fork's code), said otherwise."""
    import sys

    from bisector.errors import SandboxUnavailable
    from bisector.isolation import sandbox

    said = (
        f"dask: the scheduler at {address} is not authenticated (not tls://): whatever reaches it "
        f"runs code in its workers"
    )
    if config.sandbox.require or sandbox.is_required():
        raise SandboxUnavailable(
            f"{said}; this run requires a sandbox ([sandbox] require): use a tls:// "
            f"scheduler with dask's distributed.comm.tls certificates"
        )
    print(f"bisector: {said}; use tls:// with certificates (distributed.comm.tls)", file=sys.stderr, flush=True)


def offline_width(config: Config) -> int:
    """The width of a replay, which starts no executor: the config's, else its local devices
    (a dask run's workers are not asked: 1 unless `[executor] width` says how it ran)."""
    if config.executor.width:
        return config.executor.width
    return len(config.devices) if config.executor.kind == "local" else 1


__all__ = ["Trials", "open_trials", "offline_width"]

"""A dask cluster on this host: a scheduler and one worker process per device.

What `[executor] address = "local"` starts, what the CPU tests and the two-GPU demo use, and the
same shape as a fleet's: each worker is a Nanny-supervised process that owns one device
(`BISECTOR_DEVICE`) and offers one `GPU` resource. A nanny restarts a worker that died; the
scheduler re-runs the task it had. Imports dask lazily: it is an optional extra.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from bisector.errors import BisectorError
from bisector.runner.remote import DEVICE_ENV

MISSING = "the dask executor needs dask.distributed: pip install 'bisector[dask]'"


def require_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise BisectorError(MISSING) from None
    return distributed


def worker_env(device: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: the device it owns, and this process's PYTHONPATH so the workers
    import the same bisector (a checkout, not only an install)."""
    environ = os.environ if environ is None else environ
    env = {DEVICE_ENV: str(device)}
    if environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = environ["PYTHONPATH"]
    return env


def local_cluster(devices: Sequence[int], threads: int = 1, holds: int = 0) -> Any:
    """A scheduler and one worker per device on this host (no dashboard), ready to connect to.
    `threads` trials at a time share the device; `holds` more may wait set up, off the device
    (the `HOLD` resource: standbys and spares, bisector/runner/dask_executor.py)."""
    distributed = require_distributed()
    from distributed import Nanny, Scheduler, SpecCluster

    resources = {"GPU": 1, **({"HOLD": holds} if holds else {})}
    workers = {f"device-{d}": {"cls": Nanny, "options": {"nthreads": max(1, threads) + holds, "resources": resources,
                                                           "env": worker_env(d), "memory_limit": 0}}
               for d in devices}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    del distributed
    return SpecCluster(workers=workers, scheduler=scheduler, name="bisector-local", silence_logs=40)


__all__ = ["local_cluster", "require_distributed", "worker_env", "MISSING"]

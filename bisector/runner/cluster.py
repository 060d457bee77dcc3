"""A dask cluster on this host: a scheduler and one worker process per device.

What `[executor] address = "local"` starts, what the CPU tests and the two-GPU demo use, and the
same shape as a fleet's: each worker is a Nanny-supervised process that owns one device
(`BISECTOR_DEVICE`) and offers one `GPU` resource. A nanny restarts a worker that died; the
scheduler re-runs the task it had. Imports dask lazily: it is an optional extra.

Its scheduler, nannies and workers speak TLS with a key and certificate made for this cluster
(`distributed.security.Security.temporary()`: in memory, never written) and require it of every
peer: code under test, which runs sandboxed in a network namespace of its own and cannot reach
them anyway, cannot connect where it runs without one either (a GPU's trials in the fence only,
`BISECTOR_SANDBOX=off`): a client without the run's certificate is refused, so no task is run
for it in a worker (outside any sandbox). A fleet's scheduler (`[executor] address`) is told
apart the same way: `tls://` with the certificates of dask's own config (`distributed.comm.tls`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

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


def run_security() -> Any:
    """A key and self-signed certificate for this run's cluster alone, required of every peer."""
    require_distributed()
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as exc:  # no `cryptography`: no cluster, rather than one anyone may use
        raise BisectorError(f"the dask executor's local cluster needs TLS: {exc}") from None


def local_cluster(devices: Sequence[int], threads: int = 1, holds: int = 0) -> Any:
    """A scheduler and one worker per device on this host (no dashboard), ready to connect to with
    the cluster's `security` (TLS, `run_security`). `threads` trials at a time share the device;
    `holds` more may wait set up, off the device (the `HOLD` resource: standbys and spares,
    bisector/runner/dask_executor.py)."""
    distributed = require_distributed()
    from distributed import Nanny, Scheduler, SpecCluster

    security = run_security()
    resources = {"GPU": 1, **({"HOLD": holds} if holds else {})}
    workers = {
        f"device-{d}": {
            "cls": Nanny,
            "options": {
                "nthreads": max(1, threads) + holds,
                "resources": resources,
                "env": worker_env(d),
                "memory_limit": 0,
                "security": security,
                "protocol": "tls",
                "host": "127.0.0.1",
            },
        }
        for d in devices
    }
    scheduler = {
        "cls": Scheduler,
        "options": {"dashboard_address": None, "host": "127.0.0.1", "protocol": "tls", "security": security},
    }
    del distributed
    cluster = SpecCluster(
        workers=workers, scheduler=scheduler, name="bisector-local", silence_logs=40, security=security
    )
    _STARTED[cluster.scheduler_address] = security
    return cluster


# The security of each cluster this process started, by scheduler address: a client of this
# process given only the address (`[executor] address` naming it) connects with it.
_STARTED: dict[str, Any] = {}


def security_for(address: str) -> Any | None:
    """The security of a cluster this process started at `address`, else None (dask's own config)."""
    return _STARTED.get(address)


__all__ = ["local_cluster", "require_distributed", "run_security", "security_for", "worker_env", "MISSING"]

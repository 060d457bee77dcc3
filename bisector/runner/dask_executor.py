"""The trial executor over dask.distributed: the bot is the client, GPU workers run the trials.

The same interface as the local Executor (`submit(TrialJob) -> Future[TrialOutcome]`, `cancel`,
`close`, `timelines`), so the probe and the search never learn where a trial ran. Each trial is a
dask task (bisector/runner/remote.py `trial`) that needs a share of one `GPU` resource: with
`slots` = 1 + the protocol's workers kept ready, a worker takes that many trials at a time and its
local executor lends its device to one at a time, preparing the others meanwhile.

- Placement: a side-by-side round's lanes map to the GPU workers in a fixed order (a Latin
  square over devices, as locally), loosely: a lane whose worker is gone runs elsewhere.
- A commit's cold first trial comes first: its other trials are sent at once (each with a share
  of the `GPU`, as any trial the search waits for), set up on their workers and held at a gate (a
  dask `Event`) that opens when the first has ended; on a cluster without `HOLD` room (no held
  trials) they are sent only then.
- Standbys and spares (bisector/measure/warmer.py `standby`): a trial submitted with `hold` is set up
  on a worker with `HOLD` room and waits at its gate until `unhold` opens it, or `cancel` drops it
  (its process killed, nothing stored). Held trials take `HOLD`, not a share of the `GPU`, so they
  never keep a trial the search waits for from a worker. Without `HOLD` room a held trial is not
  sent: `unhold` answers None and the caller submits it anew, as a standby that ended does.
- A worker that dies mid-trial (its trial process dies with it, through the fence) has its task
  re-run by the scheduler on another worker; the bot gets one result per task, and stores it once
  (the Batch stores what each future gives, and the store's slot claims stay the bot's).
- A trial that keeps killing its workers (dask's KilledWorker) is a CRASH record, not a bot error.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from bisector.config import Config
from bisector.errors import BisectorError
from bisector.model import BuildResult, Shape
from bisector.runner import remote
from bisector.runner.executor import Timeline, TrialJob, TrialOutcome

RESOURCE = "GPU"
HOLD = "HOLD"  # a worker's room for trials set up and waiting at their gate


class DaskExecutor:
    """Trials of one config on the GPU workers of `client`'s scheduler."""

    def __init__(
        self, client: Any, config: Config, work: str, *, slots: int = 1, cluster: Any = None, retries: int = 0
    ) -> None:
        self.client, self.config, self.work, self.cluster = client, config, str(work), cluster
        self.slots, self.retries = max(1, slots), retries
        self.timelines: list[Timeline] = []
        self.places: dict[int, str] = {}  # global device index -> "worker address / device"
        self._lock = threading.Lock()
        self._sent: dict[Future[TrialOutcome], Any] = {}  # our future -> its dask future
        # a trial waiting at its gate -> the gate, its job
        self._gates: dict[Future[TrialOutcome], tuple[str, TrialJob]] = {}
        # Gates are opened from here: `after`'s callbacks run where a blocking call to the scheduler must not.
        self._signals = ThreadPoolExecutor(1, thread_name_prefix="dask-gates")
        self._can_hold: bool | None = None
        self._closed = False

    # -- the cluster ---------------------------------------------------------------------------
    def gpu_workers(self) -> list[str]:
        """Addresses of the workers that have a GPU resource, in a fixed order."""
        info = self.client.scheduler_info()
        return sorted(a for a, w in info.get("workers", {}).items() if w.get("resources", {}).get(RESOURCE, 0) > 0)

    @property
    def device_count(self) -> int:
        """GPU resources on the cluster now: how many commits the search may probe at once."""
        info = self.client.scheduler_info()
        return int(sum(w.get("resources", {}).get(RESOURCE, 0) for w in info.get("workers", {}).values()))

    @property
    def can_hold(self) -> bool:
        """Whether a worker has `HOLD` room: asked once, when a trial first wants to be held."""
        if self._can_hold is None:
            info = self.client.scheduler_info()
            self._can_hold = any(w.get("resources", {}).get(HOLD, 0) > 0 for w in info.get("workers", {}).values())
        return self._can_hold

    def wait_for_devices(self, n: int, timeout_s: float = 120.0) -> None:
        """Until `n` GPU workers are up (a cluster just started), or a one-line error."""
        deadline = time.monotonic() + timeout_s
        while self.device_count < n:
            if time.monotonic() > deadline:
                raise BisectorError(
                    f"dask: {self.device_count} of {n} GPU workers up after {timeout_s:g} s "
                    f"(scheduler {self.client.scheduler.address})"
                )
            time.sleep(0.2)

    # -- builds --------------------------------------------------------------------------------
    def build(self, sha: str, patch: str | None = None) -> BuildResult:
        """Built on a worker (no GPU needed): whether the commit builds, for the search's SKIP."""
        task = remote.RemoteBuild(self.config, self.work, sha, patch)
        built: BuildResult = self.client.submit(
            remote.build, task, pure=False, key=f"build-{sha[:12]}-{uuid.uuid4().hex[:8]}", retries=self.retries
        ).result()
        return built

    # -- trials --------------------------------------------------------------------------------
    def submit(self, job: TrialJob) -> Future[TrialOutcome]:
        future: Future[TrialOutcome] = Future()
        after = job.after
        waits = after is not None and not after.done()
        if (job.hold or waits) and self.can_hold:
            self._send(job, future, gate=f"gate-{job.build.sha[:12]}-{job.slot}-{uuid.uuid4().hex[:8]}")
            if not job.hold:
                self._open_after(future, after)
        elif job.hold:  # nowhere to hold it: `unhold` says so, and the caller submits it anew
            if future.cancel():
                future.set_running_or_notify_cancel()
        elif waits:
            assert after is not None  # `waits` says so
            after.add_done_callback(lambda _: self._send(job, future))
        else:
            self._send(job, future)
        return future

    def unhold(
        self, future: Future[TrialOutcome], shapes: tuple[Shape, ...] | None = None
    ) -> Future[TrialOutcome] | None:
        """A held trial is wanted now: its gate opens (once its commit's first trial has ended, for a
        later one). None when it is gone (dropped, or it ended in its setup): the caller submits anew.
        A worker's gate (a dask Event) carries no shapes: one wanted for some of its shapes only is
        dropped, and submitted anew."""
        with self._lock:
            entry = self._gates.get(future)
        if entry is None or future.done():
            return None
        if shapes is not None:
            self.cancel(future)
            return None
        self._open_after(future, entry[1].after)
        return future

    def _open_after(self, future: Future[TrialOutcome], after: Future[TrialOutcome] | None) -> None:
        if after is not None and not after.done():
            after.add_done_callback(lambda _: self._signal(future))
        else:
            self._signal(future)

    def _signal(self, future: Future[TrialOutcome], drop: bool = False) -> None:
        try:
            self._signals.submit(self._open, future, drop)
        except RuntimeError:  # closed: its worker's task ends with the cluster or client
            pass

    def _open(self, future: Future[TrialOutcome], drop: bool = False) -> None:
        """Set the gate of a held trial (its drop Event first, when it is not wanted)."""
        from distributed import Event

        with self._lock:
            entry = self._gates.pop(future, None)
        if entry is None:
            return
        if drop:
            Event(remote.drop_name(entry[0]), client=self.client).set()
        Event(entry[0], client=self.client).set()

    def _send(self, job: TrialJob, future: Future[TrialOutcome], gate: str = "") -> None:
        with self._lock:
            if future.done() or self._closed:
                return
            task = remote.RemoteTrial(
                self.config, self.work, job.build.sha, job.patch, job.shapes, job.seed, job.slot, job.first, gate
            )
            # A lane pins its trial loosely to one worker, and only where there are two to choose
            # from: a trial pinned to the one worker of a cluster, when that worker died, stayed
            # "no-worker" for good after its nanny had started a new one (dask re-checks no loose
            # restriction then; studies/dask_demo.py --visible 0 hung so).
            workers = self.gpu_workers()
            where = [workers[job.lane % len(workers)]] if job.lane is not None and len(workers) > 1 else None
            key = f"trial-{job.build.sha[:12]}-{job.slot}-{uuid.uuid4().hex[:8]}"
            # Only what the warmer holds takes `HOLD`: a later trial waiting for its first is one the
            # search waits for, and with every `HOLD` taken by standbys and spares it would wait for
            # good (the one-H200 dask demo stalled so).
            need = {HOLD: 1} if job.hold else {RESOURCE: 1.0 / self.slots}
            dfut = self.client.submit(
                remote.trial,
                task,
                key=key,
                pure=False,
                resources=need,
                workers=where,
                allow_other_workers=where is not None,
                retries=self.retries,
            )
            self._sent[future] = dfut
            if gate:
                self._gates[future] = (gate, job)
        dfut.add_done_callback(lambda d: self._done(job, future, d))

    def _done(self, job: TrialJob, future: Future[TrialOutcome], dfut: Any) -> None:
        with self._lock:
            self._sent.pop(future, None)
            self._gates.pop(future, None)
        if future.done() or dfut.cancelled():
            return
        try:
            outcome: TrialOutcome = dfut.result()
        except Exception as exc:  # noqa: BLE001
            if type(exc).__name__ in ("FutureCancelledError", "CancelledError"):  # cancelled by us or a shutdown
                if future.cancel():
                    future.set_running_or_notify_cancel()
                return
            if type(exc).__name__ != "KilledWorker":
                if not future.done():
                    future.set_exception(exc)
                return
            task = remote.RemoteTrial(
                self.config, self.work, job.build.sha, job.patch, job.shapes, job.seed, job.slot, job.first
            )
            outcome = remote.failed(task, f"the trial killed every dask worker it ran on ({exc})")
        outcome = TrialOutcome(outcome.records, self._placed(outcome))
        with self._lock:
            self.timelines.append(outcome.timeline)
        if not future.done():
            future.set_result(outcome)

    def _placed(self, outcome: TrialOutcome) -> Timeline:
        """The timeline with its device numbered over the cluster (worker, device) in order of first use."""
        where = outcome.records[0].protocol.get("where", {}) if outcome.records else {}
        label = (
            f"{where.get('dask_worker', '?')} / {where.get('device', outcome.timeline.device)}"
            if isinstance(where, dict)
            else "?"
        )
        with self._lock:
            index = next((i for i, p in self.places.items() if p == label), len(self.places))
            self.places[index] = label
        return replace(outcome.timeline, device=index)

    def cancel(self, future: Future[TrialOutcome]) -> None:
        """Drop a trial not yet run (one running finishes on its worker; its result is not used)."""
        with self._lock:
            dfut = self._sent.pop(future, None)
            gated = future in self._gates
        if future.cancel():  # first: the dask future's callback then finds it done
            future.set_running_or_notify_cancel()
        if gated:  # set up and waiting on its worker: it drops its trial process and returns
            self._signal(future, drop=True)
        if dfut is not None:
            dfut.cancel()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pending = list(self._sent.items())
            self._sent.clear()
            gated = list(self._gates)
        for future, dfut in pending:
            if future.cancel():
                future.set_running_or_notify_cancel()
            dfut.cancel()
        for future in gated:  # held on their workers: each drops its trial process and ends
            self._open(future, drop=True)
        self._signals.shutdown(wait=True)
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DaskExecutor", "RESOURCE"]

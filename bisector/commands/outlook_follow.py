"""The search's outlook (bisector/search/outlook.py), kept up to date beside the run.

An outlook runs the search to its end a few times (0.1-1 s in all), too long to hold up the
probe events that feed the progress line, and the device must not wait on it. So it runs on a
thread of its own, on the measurements as they come: the latest one is taken up when the last
outlook is done, and the thread then rests long enough that it uses at most `duty` of one core
(at the lowest priority, where the OS lets a thread have its own): on the CPU the trials time
on the same cores."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from bisector.model import Measurement
from bisector.search.outlook import Outlook, SearchBasis, merged, outlook

log = logging.getLogger(__name__)

DUTY = 0.1  # the share of one core the outlook may take
DRAWS = 8  # runs of the search per outlook


@dataclass(frozen=True)
class Seen:
    """An outlook, and the trials the run had started when its measurements were taken."""

    outlook: Outlook
    trials: int


class OutlookFollow:
    """Fed the search's measurements (`measured`); `latest` is the newest outlook done. With
    `threaded` False each measurement's outlook is made at once, in the caller (tests, studies)."""

    def __init__(self, basis: SearchBasis, *, threaded: bool = True, duty: float = DUTY, draws: int = DRAWS) -> None:
        self.basis, self.duty, self.draws = basis, duty, draws
        self.threaded = threaded
        self.measured: dict[str, Measurement] = {}
        self.latest: Seen | None = None
        self.failed: BaseException | None = None
        self._trials = 0
        self._version = self._done = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def measure(self, m: Measurement, trials: int) -> None:
        """The search now holds `m` (merged into what it had); `trials`: trial processes started so far."""
        with self._lock:
            self.measured[m.sha] = merged(self.measured.get(m.sha), m)
            self._trials, self._version = trials, self._version + 1
        if not self.threaded:
            self._update()
            return
        if self._thread is None and not self._closed.is_set():
            self._thread = threading.Thread(target=self._run, name="outlook", daemon=True)
            self._thread.start()
        self._wake.set()

    def _update(self) -> None:
        with self._lock:
            measured, trials, version = dict(self.measured), self._trials, self._version
        if version == self._done:
            return
        got = outlook(self.basis, measured, draws=self.draws)
        self._done = version
        if got is not None:
            self.latest = Seen(got, trials)

    def _run(self) -> None:
        _lowest_priority()
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed.is_set():
                return
            started = time.perf_counter()
            try:
                self._update()
            except Exception as exc:  # a bug here must not stop the run: the event forecast stands in
                log.exception("the search's outlook failed; the progress line falls back to its event forecast")
                self.failed = exc
                return
            if self._closed.wait((time.perf_counter() - started) * (1.0 / self.duty - 1.0)):
                return

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)


def _lowest_priority() -> None:
    """This thread at nice 19 where threads have their own (Linux); elsewhere as it is."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


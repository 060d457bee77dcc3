"""The search's outlook (bisector/estimate/outlook.py), kept up to date beside the run.

An outlook runs the search to its end a few times (0.1-1 s in all), too long to hold up the
probe events that feed the progress line, and the device must not wait on it. So a thread takes
the measurements as they come (the latest one when the last outlook is done) to a child process
that makes the outlook at nice 19, and then rests long enough that the child uses at most `duty`
of one core: on the CPU the trials time on the same cores.

A child process, not a thread of the bot's: a thread at nice 19 holds the GIL while the OS runs
other work before it, and on a GPU host whose cores are busy with trial setups the bot's own threads
waited on it: the search's rounds came 10-14 s apart instead of 1-3 s."""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection

from bisector.estimate.outlook import Outlook, SearchBasis, merged, outlook
from bisector.model import Measurement

log = logging.getLogger(__name__)

DUTY = 0.1  # the share of one core the outlook may take
DRAWS = 8  # runs of the search per outlook


@dataclass(frozen=True)
class Seen:
    """An outlook, and the trials the run had started when its measurements were taken."""

    outlook: Outlook
    trials: int


class OutlookProcess:
    """A child process, at nice 19, that makes outlooks (spawned: the bot has threads running)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), name="bisector-outlook", daemon=True)
        self.process.start()
        child.close()

    def __call__(self, basis: SearchBasis, measured: dict[str, Measurement], draws: int) -> Outlook | None:
        self._conn.send((basis, measured, draws))
        ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"the outlook process failed:\n{value}")
        outlook: Outlook | None = value
        return outlook

    def close(self) -> None:
        self.process.terminate()
        self.process.join(timeout=5.0)
        self._conn.close()


def _serve(conn: Connection) -> None:
    """The child's loop: an outlook for each (basis, measurements, draws) it is sent."""
    try:
        os.nice(19)
    except OSError:
        pass
    while True:
        try:
            basis, measured, draws = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[bool, object] = (True, outlook(basis, measured, draws=draws))
        except Exception:  # noqa: BLE001 - sent back: the parent logs it and falls back to the event forecast
            reply = (False, traceback.format_exc())
        conn.send(reply)


class OutlookFollow:
    """Fed the search's measurements (`measured`); `latest` is the newest outlook done. With
    `threaded` False each measurement's outlook is made at once, in the caller (tests, studies);
    else in an `OutlookProcess`, started with the first measurement."""

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
        self._process: OutlookProcess | None = None

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
        if self._process is not None:
            got = self._process(self.basis, measured, self.draws)
        else:
            got = outlook(self.basis, measured, draws=self.draws)
        self._done = version
        if got is not None:
            self.latest = Seen(got, trials)

    def _run(self) -> None:
        try:
            process = OutlookProcess()
        except Exception as exc:
            log.exception("the search's outlook process did not start; the progress line follows its event forecast")
            self.failed = exc
            return
        with self._lock:
            self._process = process
        if self._closed.is_set():  # closed while the child started: `close` did not see it
            process.close()
            return
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed.is_set():
                return
            started = time.perf_counter()
            try:
                self._update()
            except Exception as exc:  # a bug here must not stop the run: the event forecast stands in
                if self._closed.is_set():  # the child ended by `close` mid-outlook
                    return
                log.exception("the search's outlook failed; the progress line falls back to its event forecast")
                self.failed = exc
                return
            if self._closed.wait((time.perf_counter() - started) * (1.0 / self.duty - 1.0)):
                return

    def close(self) -> None:
        """Stop following: the child is ended, an outlook it was making with it."""
        self._closed.set()
        self._wake.set()
        with self._lock:
            process = self._process
        if process is not None:
            process.close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

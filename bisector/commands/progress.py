"""Progress of a long run on stderr: the commit being measured, trials so far, time left (estimated).

On a terminal it is one live line (rich). Anywhere else (CI logs, nohup, `| tee`) a live display
prints nothing until the end, so it is plain lines instead: one per event, except that the same
action on the same commit is repeated at most every `interval_s` seconds.
"""

from __future__ import annotations

import math
import re
import time
from typing import Callable, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from bisector.runner.probe import ProbeEvent

PLAIN_INTERVAL_S = 5.0


def bisection_probes(n_commits: int) -> int:
    """Commits a bisection of n_commits probes, assuming ~2 steps: 2*ceil(log2 N)+4, and GOOD and
    BAD once more at the end, where the search accounts for the whole change (+2)."""
    return 2 * math.ceil(math.log2(max(n_commits, 2))) + 6


def _isatty(stream: object) -> bool:
    try:
        return bool(getattr(stream, "isatty", lambda: False)())
    except ValueError:  # closed
        return False


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


class ProgressLine:
    """Observer of probe events: a live line on a terminal, plain throttled lines elsewhere.

    One trial process measures every suite of a commit, so a commit probed with `trials_per_commit`
    costs that many trial processes; the search's estimate is `expected_probes` such commits, and
    each later stage announces its own (a "stage" event) once the search has found the steps."""

    def __init__(self, expected_probes: int, trials_per_commit: int, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic, interval_s: float = PLAIN_INTERVAL_S,
                 live: bool | None = None) -> None:
        """live: None = a live line only when stderr is a terminal a person watches (FORCE_COLOR
        in a CI log makes rich think it is one, so the stream itself must be a TTY too)."""
        self.console = console or Console(stderr=True)
        self.expected_trials = max(expected_probes, 1) * max(trials_per_commit, 1)
        self.trials_per_commit = max(trials_per_commit, 1)
        self.clock, self.interval_s = clock, interval_s
        self.started = clock()
        self.commits: set[str] = set()
        self.trials = 0
        self._running = 0
        if live is None:
            live = self.console.is_interactive and _isatty(self.console.file)
        self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=False) if live else None
        self._last_key: tuple[str, str, str | None] | None = None
        self._last_at = -math.inf
        self.stage = ""
        self.final = ""  # the run's own counts (RunTotals), for the last line, once it has them

    @classmethod
    def for_range(cls, n_commits: int, trials_per_commit: int, **kwargs: object) -> "ProgressLine":
        return cls(bisection_probes(n_commits), trials_per_commit, **kwargs)  # type: ignore[arg-type]

    def expect_range(self, n_commits: int) -> None:
        """A bisection of n_commits follows what was expected so far (the nightly A/B found a step)."""
        self.expected_trials = self.trials + bisection_probes(n_commits) * self.trials_per_commit

    def __enter__(self) -> "ProgressLine":
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            if self.final:
                self.live.update(Text(f"done: {self.final}"))
            self.live.__exit__(*exc)
            return
        if self.final:
            self._write(f"done: {self.final}")
        elif self.commits:
            self._write(f"done: {self._counts()}, elapsed {_duration(self.clock() - self.started)}")

    def __call__(self, event: ProbeEvent) -> None:
        if event.action == "stage":
            self._enter(event.detail, event.expect)
            return
        self.commits.add(event.sha)
        self._running = 0
        if event.action == "trial":  # sent as a batch of trials starts: "trial 2/4 (+1 in parallel)"
            more = re.search(r"\(\+(\d+) in parallel\)", event.detail)
            self._running = 1 + (int(more.group(1)) if more else 0)
            self.trials += self._running
        text = self._what(event)
        if self.live is not None:
            self.live.update(Text.assemble((text.split(" ", 1)[0] + " ", "bold"), text.split(" ", 1)[1] + "  ",
                                           (self._status(), "dim")))
            self.console.file.flush()
            return
        key = (event.sha, event.action, event.patch_hash)
        now = self.clock()
        if key == self._last_key and now - self._last_at < self.interval_s:
            return
        self._last_key, self._last_at = key, now
        self._write(f"{text} | {self._status()}")

    def _enter(self, stage: str, expect: int) -> None:
        """A new stage of the run (search, fixes, hunks): from here the estimate is what this stage
        is expected to take on top of the trials so far (each stage's own count, known once the
        search has found its steps); the search keeps the range's."""
        self.stage, self._running = stage, 0  # the stage before it has ended: its trials are done
        if expect:
            self.expected_trials = self.trials + expect
        if self.live is None and self.trials:
            self._write(f"stage {stage}" + (f": ~{expect} trials" if expect else "") + f" | {self._status(False)}")

    def _what(self, event: ProbeEvent) -> str:
        """`<sha7>[ +patch h] <action>[: detail]`, the detail's last line only ("trial 3/4", not
        "trial trial 3/4"; a skip's reason rather than the build log above it)."""
        lines = [line.strip() for line in event.detail.strip().splitlines() if line.strip()]
        detail = lines[-1][:120] if lines else ""
        if detail.startswith(event.action):
            doing = detail
        else:
            doing = f"{event.action}: {detail}" if detail else event.action
        patch = f" +patch {event.patch_hash[:8]}" if event.patch_hash else ""
        return f"{event.sha[:7]}{patch} {doing}"

    def _counts(self) -> str:
        """This call's: commits it touched and trial processes it started (the run's totals, every
        call, come at the end from the store)."""
        return f"commits {len(self.commits)}, trials {self.trials}"

    def _status(self, with_stage: bool = True) -> str:
        elapsed = self.clock() - self.started
        done = self.trials - self._running  # the batch just announced is still running
        stage = f"{self.stage} | " if self.stage and with_stage else ""
        if self.trials > self.expected_trials:  # unclear pairs or a busy machine bought more trials
            return (f"{stage}commits {len(self.commits)} | trials {self.trials}, past the ~{self.expected_trials} "
                    f"estimated | elapsed {_duration(elapsed)}")
        left = f"~{_duration(max(self.expected_trials - done, 0) * elapsed / done)}" if done else "?"
        return (f"{stage}commits {len(self.commits)} | trials {self.trials} of ~{self.expected_trials} | "
                f"elapsed {_duration(elapsed)} | eta {left}")

    def _write(self, line: str) -> None:
        stream: TextIO = self.console.file
        stream.write(f"progress: {line}\n")
        stream.flush()

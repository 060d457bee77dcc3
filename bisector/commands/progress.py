"""A live line for long runs: the commit being measured, probes and trials so far, time left (estimated)."""

from __future__ import annotations

import math
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from bisector.probe import ProbeEvent


class ProgressLine:
    """Observer of probe events. The time left assumes ~2 steps: 2*ceil(log2 N)+4 commits probed."""

    def __init__(self, n_commits: int, trials_per_commit: int, suites: int, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.expected_trials = (2 * math.ceil(math.log2(max(n_commits, 2))) + 4) * trials_per_commit * suites
        self.started = time.monotonic()
        self.commits: set[str] = set()
        self.trials = 0
        self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=False)

    def __enter__(self) -> "ProgressLine":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(*exc)

    def __call__(self, event: ProbeEvent) -> None:
        self.commits.add(event.sha)
        if event.action == "trial":
            self.trials += 1
        elapsed = time.monotonic() - self.started
        left = "?"
        if self.trials:
            remaining = max(self.expected_trials - self.trials, 0) * elapsed / self.trials
            left = f"~{remaining / 60:.0f} min" if remaining >= 60 else f"~{remaining:.0f} s"
        patch = f" +patch {event.patch_hash[:8]}" if event.patch_hash else ""
        self.live.update(Text.assemble(
            (f"{event.sha[:7]}{patch} ", "bold"), f"{event.action} {event.detail[:60]}  ",
            (f"commits {len(self.commits)}  trials {self.trials}  elapsed {elapsed:.0f} s  left {left}", "dim")))

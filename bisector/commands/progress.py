"""Progress of a long run on stderr: the commit being measured, trials so far, time left (estimated).

On a terminal it is one live line (rich). Anywhere else (CI logs, nohup, `| tee`) a live display
prints nothing until the end, so it is plain lines instead: one per event, except that the same
action on the same commit is repeated at most every `interval_s` seconds.

The trials expected in all are re-estimated at every event: during the search from its outlook
(the search run on to its end in worlds drawn from its measurements, on a thread beside the run:
bisector/estimate/outlook.py, commands/outlook_follow.py) once GOOD and BAD are measured, before that
from where it is (bisector/estimate/forecast.py), plus the later stages the run will
take per culprit; once a later stage starts, from its own announced count, grown by the rounds its
checks are expected to go on to and corrected by those its trials show (bisector/estimate/later_stages.py).
There is always a time left.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import IO, TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.text import Text

from bisector.commands.outlook_follow import OutlookFollow, Seen
from bisector.estimate.forecast import ForecastSettings, SearchForecast
from bisector.estimate.later_stages import LaterModel, StageTracker, model_for
from bisector.estimate.outlook import SearchBasis
from bisector.measure.probe import ProbeEvent

if TYPE_CHECKING:
    from bisector.config import Config

PLAIN_INTERVAL_S = 5.0
TRIAL = re.compile(r"trial (\d+)/(\d+)")
PARTNERS = re.compile(r"side by side with ([^)]*)\)")


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
    costs that many trial processes. Without a `forecast` the estimate is `expected_probes` such
    commits; with one, what the search forecast expects (fed every probe of the search), plus the
    later `stages` (names, in order) it expects per culprit (`later`: per device kind; None: none
    before a stage announces its count); each later stage announces its first rounds (a "stage"
    event) once the search has found the steps, and its trials are followed from there."""

    def __init__(
        self,
        expected_probes: int,
        trials_per_commit: int,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = PLAIN_INTERVAL_S,
        live: bool | None = None,
        forecast: SearchForecast | None = None,
        stages: tuple[str, ...] = (),
        later: LaterModel | None = None,
        max_trials: int = 0,
        follow: Callable[[SearchBasis], OutlookFollow] | None = OutlookFollow,
    ) -> None:
        """live: None = a live line only when stderr is a terminal a person watches (FORCE_COLOR
        in a CI log makes rich think it is one, so the stream itself must be a TTY too). `follow`
        makes the search's outlook once its stage says what the search runs on (None: the event
        forecast alone)."""
        self.console = console or Console(stderr=True)
        self.trials_per_commit = max(trials_per_commit, 1)
        self.forecast = forecast
        self.follow_with = follow
        self.follow: OutlookFollow | None = None
        self.stages = stages
        self.later = later or LaterModel()
        self.cap = max(max_trials, self.trials_per_commit)  # protocol.max_trials: the later checks' cap
        self.tracker: StageTracker | None = None  # the later stage under way
        self._base = 0  # trials before the estimate now in force began
        self._expect = max(expected_probes, 1) * self.trials_per_commit  # trials it expects from _base
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
    def for_range(
        cls,
        n_commits: int,
        trials_per_commit: int,
        *,
        order: Sequence[str] | None = None,
        max_trials: int | None = None,
        first_look: int = 1,
        stages: tuple[str, ...] = (),
        device: str | None = None,
        **kwargs: object,
    ) -> ProgressLine:
        """The progress of a bisection of `order` (GOOD..BAD, oldest first; else n_commits unnamed),
        the protocol's trials, followed by `stages` ("fixes", "hunks") on a `device` kind."""
        forecast = SearchForecast(
            ForecastSettings(
                len(order) if order else n_commits,
                trials_per_commit,
                max(trials_per_commit, max_trials or trials_per_commit),
                min(first_look, trials_per_commit),
            ),
            order,
        )
        return cls(
            bisection_probes(n_commits),
            trials_per_commit,
            forecast=forecast,
            stages=stages,
            later=model_for(device),
            max_trials=max_trials or trials_per_commit,
            **kwargs,  # type: ignore[arg-type]
        )

    @classmethod
    def for_config(
        cls,
        config: Config,
        order: Sequence[str] | None,
        stages: tuple[str, ...],
        n_commits: int | None = None,
        **kwargs: object,
    ) -> ProgressLine:
        """`for_range` on a config's protocol (trials, their cap, the first look) and device kind."""
        return cls.for_range(
            len(order or ()) if n_commits is None else n_commits,
            config.protocol.trials,
            order=order,
            max_trials=config.protocol.max_trials,
            first_look=config.protocol.first_look,
            stages=stages,
            device=config.device,
            **kwargs,
        )

    def expect_range(self, n_commits: int) -> None:
        """A bisection of n_commits follows what was expected so far (the nightly A/B found a step)."""
        self._base, self._expect = self.trials, bisection_probes(n_commits) * self.trials_per_commit
        cap = max(self.forecast.settings.cap if self.forecast else 0, self.trials_per_commit)
        self.forecast = SearchForecast(ForecastSettings(n_commits, self.trials_per_commit, cap))

    @property
    def expected_trials(self) -> int:
        """Trial processes this run is expected to take in all, now. A stage whose trials show
        nothing more to come while it goes on is re-estimated (a tenth of what it took more), so the
        time left never drops out."""
        seen = self._seen
        if seen is not None and self.stage == "search":
            # a search not done yet has a trial to come, whatever its last outlook said
            left = max(1.0, seen.trials + seen.outlook.remaining - self.trials) + self._later(self.stages)
        elif self.forecast is not None and self.stage in ("", "search"):
            left = self.forecast.remaining() + self._later(self.stages)
        else:
            taken = self.trials - self._base
            after = self.stages[self.stages.index(self.stage) + 1 :] if self.stage in self.stages else ()
            if self.tracker is not None:
                here = self.tracker.remaining()
                here = here if here >= 1 or not self._expect else max(here, taken / 10.0)
            else:
                here = self._expect - taken if taken < self._expect else taken / 10.0 if self._expect else 0.0
            left = here + self._later(after)
        return self.trials + math.ceil(left)

    @property
    def _seen(self) -> Seen | None:
        """The search's latest outlook, while it is followed."""
        return self.follow.latest if self.follow is not None else None

    def _later(self, stages: Sequence[str]) -> float:
        """The trials the later `stages` are expected to take, per culprit the search expects."""
        seen = self._seen
        steps = seen.outlook.steps if seen is not None else self.forecast.steps() if self.forecast is not None else 1.0
        return self.later.trials(steps, self.trials_per_commit, self.cap, stages)

    def __enter__(self) -> ProgressLine:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._unfollow()
        if self.live is not None:
            if self.final:
                self.live.update(Text(f"done: {self.final}"))
            self.live.__exit__(kind, exc, tb)
            return
        if self.final:
            self._write(f"done: {self.final}")
        elif self.commits:
            self._write(f"done: {self._counts()}, elapsed {_duration(self.clock() - self.started)}")

    def __call__(self, event: ProbeEvent) -> None:
        if event.action == "stage":
            self._enter(event.detail, event.expect, event.basis)
            return
        if event.action == "measured":
            if self.follow is not None and event.measurement is not None and not event.patch_hash:
                self.follow.measure(event.measurement, self.trials)
            return
        self.commits.add(event.sha)
        self._running = 0
        if event.action == "trial":  # sent as a batch of trials starts: "trial 2/4 (+1 in parallel)"
            more = re.search(r"\(\+(\d+) in parallel\)", event.detail)
            self._running = 1 + (int(more.group(1)) if more else 0)
            self.trials += self._running
        self._follow(event)
        text = self._what(event)
        if self.live is not None:
            self.live.update(
                Text.assemble(
                    (text.split(" ", 1)[0] + " ", "bold"), text.split(" ", 1)[1] + "  ", (self._status(), "dim")
                )
            )
            self.console.file.flush()
            return
        key = (event.sha, event.action, event.patch_hash)
        now = self.clock()
        if key == self._last_key and now - self._last_at < self.interval_s:
            return
        self._last_key, self._last_at = key, now
        self._write(f"{text} | {self._status()}")

    def _follow(self, event: ProbeEvent) -> None:
        """The search's own probes (plain commits, in the search stage) feed its forecast; a later
        stage's trials its tracker."""
        if self.tracker is not None and event.action == "trial":
            got = TRIAL.search(event.detail)
            if got:
                for j in range(self._running):
                    self.tracker.trial((event.sha, event.patch_hash), int(got.group(1)) + j, int(got.group(2)))
            return
        if self.forecast is None or event.patch_hash or self.stage not in ("", "search"):
            return
        if event.action == "build":
            self.forecast.probed(event.sha)
        elif event.action == "skip":
            self.forecast.skip(event.sha)
        elif event.action == "trial":
            got, side = TRIAL.search(event.detail), PARTNERS.search(event.detail)
            k, n = (int(got.group(1)), int(got.group(2))) if got else (self.forecast.count.get(event.sha, 0) + 1, None)
            partners = [p for p in side.group(1).split(", ") if "+patch" not in p] if side else []
            for j in range(self._running):
                self.forecast.trial(event.sha, k + j, n, partners)

    def _enter(self, stage: str, expect: int, basis: SearchBasis | None = None) -> None:
        """A new stage of the run (search, fixes, hunks): from here the estimate is what this stage
        is expected to take on top of the trials so far (each stage's own count, known once the
        search has found its steps) and the stages after it; the search keeps its forecast's, and
        follows its outlook where the stage says what the search runs on."""
        self.stage, self._running = stage, 0  # the stage before it has ended: its trials are done
        self._unfollow()
        if basis is not None and self.follow_with is not None:
            self.follow = self.follow_with(basis)
        if expect or stage not in ("", "search"):
            self._base, self._expect = self.trials, expect
        self.tracker = (
            StageTracker(stage, self.later, expect, self.trials_per_commit, self.cap)
            if stage not in ("", "search")
            else None
        )
        if self.live is None and self.trials:
            self._write(f"stage {stage}" + (f": ~{expect} trials" if expect else "") + f" | {self._status(False)}")

    def _unfollow(self) -> None:
        if self.follow is not None:
            self.follow.close()
            self.follow = None

    def _what(self, event: ProbeEvent) -> str:
        """`<sha7>[ +patch h] <action>[: detail]`, the detail's last line only ("trial 3/4", not
        "trial trial 3/4"; a skip's reason rather than the build log above it)."""
        lines = [line.strip() for line in event.detail.strip().splitlines() if line.strip()]
        detail = lines[-1][:120] if lines else ""
        doing = detail if detail.startswith(event.action) else f"{event.action}: {detail}" if detail else event.action
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
        expected = self.expected_trials
        left = f"~{_duration(max(expected - done, 0) * elapsed / done)}" if done else "?"
        return (
            f"{stage}commits {len(self.commits)} | trials {self.trials} of ~{expected} | "
            f"elapsed {_duration(elapsed)} | eta {left}"
        )

    def _write(self, line: str) -> None:
        stream: IO[str] = self.console.file
        stream.write(f"progress: {line}\n")
        stream.flush()

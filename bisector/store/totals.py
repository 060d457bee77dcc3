"""A run's figures, counted once from the store: commits in the range, commits measured, trial
processes and their time, over every call of a resumed run, with this call's beside them.

The header, the plot titles, the summary `run` prints, the progress display's last line and
`--json` all read one RunTotals, so they cannot disagree (the H200 demo's report once said "25
commits measured, 194 trials" in its header, "28 of the 40 commits" in its plots and had 27 rows
in its table, while stdout said "314 trials" and the progress line "494").
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bisector.model import TrialRecord, TrialStatus

RAN = (TrialStatus.OK, TrialStatus.WRONG)  # a trial that measured something (right or wrong)


@dataclass(frozen=True)
class CallTotals:
    """What this call of `run` did itself (a resumed call measures only what was missing)."""

    trials: int  # trial processes it started
    wall_s: float  # from its start to its report


@dataclass(frozen=True)
class RunTotals:
    range_commits: int  # GOOD..BAD, both included: every commit the search could measure
    measured: int  # commits with a trial that ran (right or wrong results): the per-commit table's rows
    skipped: int  # commits that did not build or run
    trials: int  # trial processes of the range over every call: commits as they are, and patched builds
    commit_trials: int  # of those, on the commits as they are (search, verification, the tip and parents)
    patched_trials: int  # on patched builds: reverts, hunk subsets, combined reverts
    trial_s: float  # seconds inside those trial processes
    measuring_s: float  # wall time during which at least one of them ran, every call
    this_call: CallTotals

    @property
    def resumed(self) -> bool:
        """Earlier calls measured part of it."""
        return self.this_call.trials < self.trials

    def counts(self) -> str:
        """`40 commits (GOOD and BAD included), 27 measured, 1 skipped; 494 trials (312 on the commits, 182 on
        patched builds)`: the one way every output names the counts."""
        skipped = f", {self.skipped} skipped (did not build or run)" if self.skipped else ""
        patched = (
            f" ({self.commit_trials} on the commits, {self.patched_trials} on patched builds)"
            if self.patched_trials
            else ""
        )
        return (
            f"{self.range_commits} commits (GOOD and BAD included), {self.measured} measured{skipped}; "
            f"{self.trials} trials{patched}"
        )

    def times(self) -> str:
        """One run time: `ran 5.0 min` for a run made in one call; a resumed one, `trials ran 19.3 min of
        wall time over every call; this call: 28 trials, 1.4 min` (the trial processes' own time and the
        devices' are the header's "where the time went")."""
        call = self.this_call
        if not self.resumed:
            return f"ran {call.wall_s / 60:.1f} min"
        this = (
            f"this call: {call.trials} trial{'s' if call.trials != 1 else ''}, {call.wall_s / 60:.1f} min"
            if call.trials
            else f"this call: no trial (everything came from the store), {call.wall_s / 60:.1f} min"
        )
        return f"trials ran {self.measuring_s / 60:.1f} min of wall time over every call; {this}"

    def line(self) -> str:
        return f"{self.counts()}; {self.times()}"

    def as_json(self) -> dict[str, object]:
        return {
            "range_commits": self.range_commits,
            "measured": self.measured,
            "skipped": self.skipped,
            "trials": self.trials,
            "commit_trials": self.commit_trials,
            "patched_trials": self.patched_trials,
            "trial_s": round(self.trial_s, 1),
            "measuring_s": round(self.measuring_s, 1),
            "this_call": {"trials": self.this_call.trials, "wall_s": round(self.this_call.wall_s, 1)},
        }


@dataclass(frozen=True)
class CampaignCounts:
    """`trials`: trial processes (totals.process_key); each stores a row per shape: `measurements`."""

    campaign: str
    commits: int
    builds: int
    trials: int
    measurements: int
    measurements_ok: int
    nights: int


@dataclass(frozen=True)
class StoreInfo:
    path: str
    schema_version: int
    campaigns: tuple[CampaignCounts, ...]


def process_key(
    sha: str, patch_hash: str | None, slot: int | None, started_at: str, log_path: object
) -> tuple[object, ...]:
    """One trial process stores one row per shape: its identity. The one rule for "a trial", read
    by the report's header, `--json` and `store info` alike (rows are "measurements")."""
    if slot is not None:
        return (sha, patch_hash or None, slot)
    return (sha, patch_hash or None, started_at, str(log_path or ""))


def campaign_processes(rows: Iterable[Sequence[Any]]) -> dict[str, int]:
    """Trial processes per campaign from rows of (campaign, sha, patch_hash, slot, started_at,
    protocol JSON where slot is NULL): `store info`'s count, by the rule the report's uses."""
    seen: dict[str, set[tuple[object, ...]]] = {}
    for campaign, sha, patch_hash, slot, started_at, protocol in rows:
        log = json.loads(protocol).get("log_path", "") if protocol else ""
        seen.setdefault(campaign, set()).add(process_key(sha, patch_hash, slot, started_at or "", log))
    return {campaign: len(keys) for campaign, keys in seen.items()}


def _process(t: TrialRecord) -> tuple[object, ...]:
    return process_key(t.sha, t.patch_hash, t.slot, t.started_at, (t.protocol or {}).get("log_path", ""))


def _span(t: TrialRecord) -> tuple[float, float] | None:
    if not (t.started_at and t.finished_at):
        return None
    try:
        return datetime.fromisoformat(t.started_at).timestamp(), datetime.fromisoformat(t.finished_at).timestamp()
    except ValueError:
        return None


def measured_commits(records: Iterable[TrialRecord], shapes: Collection[str]) -> set[str]:
    """Commits (as they are, unpatched) with a trial of one of `shapes` that ran."""
    return {t.sha for t in records if t.patch_hash is None and t.shape in shapes and t.status in RAN}


def run_totals(
    records: Iterable[TrialRecord],
    range_shas: Collection[str],
    shapes: Collection[str],
    skipped: int,
    this_call: CallTotals,
) -> RunTotals:
    """Totals over the stored trials of the range's commits (every call), for the config's shapes."""
    in_range = set(range_shas)
    mine = [t for t in records if t.sha in in_range and t.shape in shapes]
    processes: dict[tuple[object, ...], TrialRecord] = {}
    for t in mine:
        processes.setdefault(_process(t), t)
    spans = sorted(s for t in processes.values() if (s := _span(t)) is not None)
    busy, end = 0.0, float("-inf")
    for a, b in spans:  # the union of the processes' spans
        if b > end:
            busy += b - max(a, end)
            end = b
    patched = sum(1 for t in processes.values() if t.patch_hash is not None)
    return RunTotals(
        range_commits=len(in_range),
        measured=len(measured_commits(mine, shapes)),
        skipped=skipped,
        trials=len(processes),
        commit_trials=len(processes) - patched,
        patched_trials=patched,
        trial_s=sum(b - a for a, b in spans),
        measuring_s=busy,
        this_call=this_call,
    )

"""A run's stored trials, grouped by the trial process that made them, for the studies that read a store.

Its own module: studies/__init__.py stays free of bisector, which the trial side's studies
(studies/harness_noise.py) must not import (tests/test_backends.py).
"""

from __future__ import annotations

from pathlib import Path

from bisector.model import TrialRecord
from bisector.store import Store


def trial_processes(path: Path) -> dict[tuple[str, str | None, int | None], list[TrialRecord]]:
    """Every stored trial record of every campaign, grouped by the trial process that made it
    (commit, patch, slot): read through the store's own read-only opening, which leaves the file as it is."""
    out: dict[tuple[str, str | None, int | None], list[TrialRecord]] = {}
    with Store(path, readonly=True) as store:
        for campaign in store.info().campaigns:
            for r in store.trials(campaign.campaign):
                out.setdefault((r.sha, r.patch_hash, r.slot), []).append(r)
    return out

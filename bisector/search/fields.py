"""What the search's state holds, declared once for the type checker.

The search's parts (measuring.py, comparing.py, refining.py, verifying.py) each read and write the
state's fields; `State` (search/state.py) makes them a dataclass. This base says what they are, so
each part is checked against the same fields without importing `State` itself (which imports them).
"""

from __future__ import annotations

from collections.abc import Sequence

from bisector.model import Measurement, Uncertain
from bisector.search.candidate import Candidate, Counts
from bisector.search.drift import Views
from bisector.search.prober import Prober
from bisector.search.settings import SearchSettings
from bisector.search.zone import ZonePair


class StateFields:
    """The fields of the search's state (search/state.py `State` says what each is for)."""

    commits: Sequence[str]
    probe: Prober
    settings: SearchSettings
    meas: dict[str, Measurement]
    probes: list[tuple[str, int]]
    processes: int
    skipped: set[int]
    uncertain: list[Uncertain]
    candidates: list[Candidate]
    alpha_detect: float
    alpha_verify: float
    fresh_lineage: bool
    pending: list[tuple[int, int]]
    ahead: dict[tuple[int, int], tuple[Counts, int]]
    looked_on: dict[tuple[int, int], tuple[str, ...] | None]
    every_shape: frozenset[str]
    zone: list[ZonePair]
    anchor: int
    capped: dict[tuple[int, int], int]
    views: Views

"""The search's state: what it has measured, compared, found and verified so far.

One object the search's parts share, each a layer by concern, each built on the one before:
measuring.py, comparing.py, refining.py, verifying.py over the declared fields (fields.py);
`localize` (search/__init__.py) drives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bisector.model import Measurement, Uncertain
from bisector.search.candidate import Candidate as _Candidate
from bisector.search.candidate import Counts as _Counts
from bisector.search.drift import Views
from bisector.search.prober import Prober
from bisector.search.settings import SearchSettings
from bisector.search.verifying import Verifying
from bisector.search.zone import ZonePair


@dataclass
class State(Verifying):
    commits: Sequence[str]
    probe: Prober
    settings: SearchSettings
    meas: dict[str, Measurement] = field(default_factory=dict)  # set through `keep`, which counts processes
    probes: list[tuple[str, int]] = field(default_factory=list)
    processes: int = 0  # trial processes the measurements came from (`keep`)
    skipped: set[int] = field(default_factory=set)
    uncertain: list[Uncertain] = field(default_factory=list)
    candidates: list[_Candidate] = field(default_factory=list)
    alpha_detect: float = 0.01
    alpha_verify: float = 0.01
    fresh_lineage: bool = False  # inside `independent`
    # Parts the search will refine after the one it is in (depth first), next first: their split
    # points are named in every prefetch, so their standbys outlive the recursion into this part.
    pending: list[tuple[int, int]] = field(default_factory=list)
    # Fresh trials asked for a pair ahead of its look (`look_ahead`): (lo, hi) -> (where they start, n).
    ahead: dict[tuple[int, int], tuple[_Counts, int]] = field(default_factory=dict)
    # The shapes a pair's verification looks at (`look_shapes`), fixed at its first look.
    looked_on: dict[tuple[int, int], tuple[str, ...] | None] = field(default_factory=dict)
    every_shape: frozenset[str] = frozenset()  # the shapes GOOD and BAD were measured on
    zone: list[ZonePair] = field(default_factory=list)  # pairs stopped on in the indifference zone
    anchor: int = 0  # the commit re-measured for drift (GOOD)
    capped: dict[tuple[int, int], int] = field(
        default_factory=dict
    )  # pairs unsure at the cap -> the views' version then
    views: Views = field(init=False)  # the probe's measurements as given, and what each shape is decided on

    def __post_init__(self) -> None:
        self.views = Views(self.settings.anchor_s, self.settings.min_step)

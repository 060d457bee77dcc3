"""What the why-stages need of a run: its config, the upstream repository and probes over the store.

`pipeline.Session` is the one that exists; the stages name this Protocol instead, so they never
import the pipeline that calls them (the flow stays one way: pipeline -> why, never back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import git

from bisector.config import Config
from bisector.measure.probe import MAX_CRASHES, StoreProbe
from bisector.measure.warmer import Warmer
from bisector.model import Shape


class Session(Protocol):
    config: Config
    repo: git.Repo
    offline: bool
    warmer: Warmer | None  # sets up what a stage will measure next (GPU hosts); None: nothing ahead

    def probe(
        self,
        patch: str | None = None,
        patch_hash: str | None = None,
        offline: bool | None = None,
        shapes: Sequence[Shape] | None = None,
        max_crashes: int = MAX_CRASHES,
    ) -> StoreProbe: ...

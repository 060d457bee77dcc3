"""What the search asks of a probe, every method named: `Prober`, and `ProbeBase` for the defaults.

The search used to look a probe's optional methods up by name, and a wrapper that did not pass
one on (a clock, a prefetcher) changed the search's path without a word. Here every method is
part of the Protocol, and what a probe can do is said by two flags: `side_by_side` (`together`
measures its commits in one round) and `shapes_alone` (`shaped` measures some shapes of a commit
alone). A probe that only measures one commit at a time is a plain callable: `as_prober` wraps it;
one with some of the methods but not all is refused, so a wrapper cannot drop one by mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, runtime_checkable

from bisector.model import Measurement

Found = Sequence[tuple[str, Mapping[str, float]]]  # one-commit steps about to be verified, their changes


@runtime_checkable
class Prober(Protocol):
    side_by_side: bool  # `together` measures its commits in one round, side by side
    shapes_alone: bool  # `shaped` measures only the shapes asked for

    def __call__(self, sha: str, repeats: int) -> Measurement:
        """At least `repeats` samples per shape (cumulative), or SKIP."""
        ...

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        """Each commit to its count, in one round (asked only where `side_by_side`)."""
        ...

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        """Each commit's shapes named, each to its count, those only (asked only where `shapes_alone`)."""
        ...

    def prefetch(self, shas: Sequence[str]) -> None:
        """The commits the next rounds may ask for, to be built and compiled ahead."""
        ...

    def independent(self) -> AbstractContextManager[None]:
        """Trials asked for inside come from a new worker lineage."""
        ...

    def expect_steps(self, found: Found) -> None:
        """The one-commit steps about to be verified, so a later stage can be set up meanwhile."""
        ...


class ProbeBase:
    """Prober's defaults for a probe that has only some of it: one commit at a time, every shape,
    nothing built ahead, one lineage, nothing told. A subclass overrides what it has and says so in
    the flags."""

    side_by_side = False
    shapes_alone = False

    def __call__(self, sha: str, repeats: int) -> Measurement:
        raise NotImplementedError

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        return {sha: self(sha, n) for sha, n in wants.items()}

    def shaped(self, wants: Mapping[str, Mapping[str, int]]) -> dict[str, Measurement]:
        raise NotImplementedError(f"{type(self).__name__} measures every shape of a commit (shapes_alone is False)")

    def prefetch(self, shas: Sequence[str]) -> None:
        return None

    def independent(self) -> AbstractContextManager[None]:
        return nullcontext()

    def expect_steps(self, found: Found) -> None:
        return None


class Plain(ProbeBase):
    """A probe that is only `probe(sha, repeats)`."""

    def __init__(self, measure: Callable[[str, int], Measurement]) -> None:
        self.measure = measure

    def __call__(self, sha: str, repeats: int) -> Measurement:
        return self.measure(sha, repeats)


_PARTS = ("together", "shaped", "prefetch", "independent", "expect_steps")


def as_prober(probe: Prober | Callable[[str, int], Measurement]) -> Prober:
    """`probe` itself where it is a whole Prober, a plain callable wrapped; TypeError for a probe
    with some of Prober's methods and not all (it would lose them silently)."""
    if isinstance(probe, Prober):
        return probe
    partial = [name for name in _PARTS if hasattr(probe, name)]
    if partial:
        raise TypeError(
            f"{type(probe).__name__} has {', '.join(partial)} but is not a whole Prober: "
            "subclass bisector.search.prober.ProbeBase"
        )
    return Plain(probe)

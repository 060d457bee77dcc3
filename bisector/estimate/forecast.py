"""How many more trials a running search will take, from the trials it has asked for so far.

The progress line uses it until the search's outlook (outlook.py: the search re-run on its
measurements) has GOOD and BAD to draw from, and where no outlook is made (a probe that sends no
measurements, a stage that does not say what the search runs on).

The progress display sees each trial as it starts (its commit and "trial k/n": the commit's k-th
trial of n asked for now), never a measurement, so it cannot tell which pairs differ. What it can
follow is where the search is (bisector/search/__init__.py): GOOD, BAD and the interior grid first;
then the grid's pairs from left to right, each compared (a pair still unclear doubles both
commits' trials, up to max_repeats) and, when it moved, split at its middle commit until a step
sits between a commit and its parent; then each culprit verified with fresh trials side by side,
and GOOD and BAD measured again for the whole-change check (the culprits' first looks and the check
asked for in one round: `_looks_ahead`). The forecast is the sum of what is
left of each part, each corrected by what the run has shown so far:

- commits still to split: the current interval's depth (log2 of its half width) plus, for the
  grid segments not reached yet, the middle commits per segment that the finished segments took
  (a prior of `steps_prior` steps per range, worth `prior_weight` of a range, until they show);
- trials per new commit: what the recent middle commits got, or will get: one the search first
  gave `first_look` trials (the noise is small) keeps about those, one given as many as its
  neighbours doubles like the pairs did until the search passes it; before any, the level pairs
  have doubled to. A doubling is taken to head for the cap (a pair unclear at n trials a side is
  rarely clear at 2n: the first doubling after the grid is the first sign of a noisy run, a minute
  in), unless the search has sized a new commit's first trials below the protocol's (the noise
  is small next to the minimum step: a doubling there is a close call);
- the commits the search still compares (the current pair, the grid points right of it) raised to
  the level of the grid points already compared (a doubling one at the level it heads for);
- a verification per culprit (culprits ~ middle commits / depth), at the cost the verifications
  seen so far took, and the whole-change check (2 x initial trials).

Once the verifications start (an adjacent pair measured again away from the newest commit, or a
commit past the cap) no new middle commit is expected; once GOOD and BAD are measured again, only
the check. studies/estimate_accuracy.py replays it on simulated searches and recorded runs.
Pure: no clock, no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ForecastSettings", "SearchForecast"]


@dataclass(frozen=True)
class ForecastSettings:
    commits: int  # GOOD..BAD, both included
    initial: int = 3  # SearchSettings.initial_repeats (protocol.trials)
    cap: int = 24  # SearchSettings.max_repeats (protocol.max_trials)
    first_look: int = 1  # SearchSettings.first_look
    interior: int = 3  # SearchSettings.interior_points
    steps_prior: float = 2.0  # steps a range holds, before the search shows otherwise
    prior_weight: float = 0.5  # how much range the prior is worth (0.5: half a range of evidence)
    verify_share: float = 0.5  # a verification's fresh trials a side, as a share of a commit's trials
    recent: int = 4  # middle commits whose trials set the level of the next ones
    # How far toward the cap a pair still doubling is expected to go (0: where it is now, 1: the
    # cap): a pair that was unclear at n a side is rarely clear at 2n (studies/estimate_accuracy.py)
    onward: float = 1.0

    @property
    def grid(self) -> int:
        return min(self.commits, 2 + self.interior)

    @property
    def depth(self) -> float:
        """Middle commits one step costs in a grid segment: log2 of the segment's length."""
        return max(1.0, math.log2(max(2.0, (self.commits - 1) / (self.interior + 1))))


class SearchForecast:
    """Fed the search's probes as they start; `remaining()` is the trials it expects still to come.

    Without the range's order (`order` None) it cannot place commits: the forecast is then the
    prior's commits at the trials a commit gets so far, never below what is already asked for."""

    def __init__(self, settings: ForecastSettings, order: Sequence[str] | None = None) -> None:
        self.settings = settings
        self.index = {sha: i for i, sha in enumerate(order)} if order else None
        self.count: dict[str, int] = {}  # trials seen (k) per commit
        self.target: dict[str, int] = {}  # trials asked for in the commit's latest batch
        self.seen: list[str] = []  # commits in the order the search first asked for them
        self.skipped: set[str] = set()
        self.last: list[str] = []  # the last two distinct commits that got trials
        self.newest: str | None = None  # the latest new commit
        self.fresh: str | None = None  # a new commit whose first batch is running (n not known)
        self.first: dict[str, int] = {}  # trials a commit's first batch asked for (n known)
        self.entry: dict[str, int] = {}  # trials a commit's first batch got (n not known)
        self.escalated: dict[str, int] = {}  # commit -> trials its pair doubled it to
        self.doublings: dict[str, int] = {}  # commit -> times its pairs doubled it
        self.grid: list[int] | None = None
        self.segment = 0  # the grid segment the search is in
        self.frontier = 0  # left end of the furthest interval it has reached
        self.current = (0, 0)  # the interval (indices) it works on now
        self.split: tuple[int, int] | None = None  # the latest middle commit and its half width
        self.tail: str | None = None  # None, "verify" or "check"
        self.tail_start = 0
        self.verified: set[tuple[int, int]] = set()
        self.ahead: set[str] = set()  # the round of every first look and the check (`_looks_ahead`)
        self.since_pair = 0
        self.trials = 0
        self.walk: set[str] = set()  # commits of a walk through wrong results (`_walked_to`)

    # -- what the search asks for --------------------------------------------------------------
    def probed(self, sha: str) -> None:
        """The search asked for `sha` (its build, or its first trial)."""
        if sha in self.count or sha in self.skipped:
            return
        self.seen.append(sha)
        self.count[sha] = self.target[sha] = 0
        self._settle_fresh()
        self.newest = self.fresh = sha
        if self.index is None or sha not in self.index:
            return
        good = self._good()
        if self.grid is None:
            if len(good) >= self.settings.grid:
                self.grid = sorted(self.index[s] for s in good[: self.settings.grid])
            return
        i = self.index[sha]
        if i in self.grid:
            return
        lo, hi = self._neighbours(i)
        self.current = (lo, hi)
        if self.tail == "verify" and not self.ahead:
            # A new commit to split at: the search is still refining. A pair past the cap was a
            # bridge's across wrong results (its shapes doubled again), not a verification: taken
            # for one, the H200 demo's estimate counted the refining after it as verifying, 1.7x over.
            self.tail = None
        if self.tail is None:
            self.split = (i, max(i - lo, hi - i))
            self._advance()

    def trial(self, sha: str, k: int, n: int | None = None, partners: Sequence[str] | None = None) -> None:
        """A trial of `sha` starts: its k-th, of n asked for now (None: not known), side by side
        with `partners` (SHAs or their prefixes; None: not known, then the commit measured just
        before is taken for its partner, as on one device)."""
        self.probed(sha)
        if sha in self.skipped:
            return
        self.trials += 1
        self.since_pair += 1
        if self.count[sha] == 0 and n:
            self.first[sha] = n
            if n == 1 and self._walked_to(sha):
                self.walk.add(sha)
        if self.last[-1:] != [sha]:
            self.last = ([*self.last, sha])[-2:]
            if sha != self.fresh:
                self._settle_fresh()
        if self._first_batch(sha, k):  # the level a new commit gets
            self.count[sha] = max(self.count[sha], k)
            self.target[sha] = max(self.target[sha], k, n or 0)
            return
        cap = self.settings.cap
        if k > cap and self.tail is None and self.grid is not None and partners is None:
            # past the cap: fresh trials of a verification, where the partners are not known (an older
            # log); with them `_pair` tells a culprit's pair, and a search pair past the cap (a shape
            # doubled again) is not one (counted as one, an estimate fell to 0.23x)
            self._enter("verify")
        if k > self.target[sha]:  # a new batch: a doubling (fresh trials, in the tail: n more)
            doubled = max(k, min(cap, 2 * self.count[sha])) if k <= cap and self.tail is None else k
            self.target[sha] = n or doubled
            if self.tail is None:
                self.escalated[sha] = min(cap, self.target[sha])
                self.doublings[sha] = self.doublings.get(sha, 0) + 1
        self.target[sha] = max(self.target[sha], k, n or 0)
        self.count[sha] = max(self.count[sha], k)
        if self.index is None or self.grid is None:
            return
        if partners is not None and len(partners) > 1 and self._looks_ahead(sha, partners):
            return
        if partners is None:
            if len(self.last) == 2:
                self._pair(*(self.index[s] for s in self.last if s in self.index))
        elif len(partners) == 1:  # a pair compared, verified or checked (k-ary rounds hold more)
            other = self._full(partners[0])
            if other is not None and other in self.index and sha in self.index:
                self._pair(self.index[sha], self.index[other])

    def _looks_ahead(self, sha: str, partners: Sequence[str]) -> bool:
        """A round of commits measured before, GOOD and BAD among them: the verifications' first looks
        and the whole-change check, asked for at once (`_State.look_ahead`). Its adjacent pairs are
        the culprits verified; what is left is the round's trials (and a look that doubles)."""
        assert self.index is not None
        ring = {sha, *(f for p in partners if (f := self._full(p)) is not None)}
        good = self._good()
        if len(good) < 2 or not {good[0], good[1]} <= ring or any(self.entry.get(s, self.count[s]) == 0 for s in ring):
            return False
        self._enter("verify")
        batch = max(1, self.target[sha] - self.count[sha] + 1)  # what the round asks of each, as of this one
        for s in ring - self.ahead - {sha}:
            self.target[s] = max(self.target[s], self.count[s] + batch)
        self.ahead |= ring
        at = sorted(self.index[s] for s in ring if s in self.index)
        self.verified |= {(a, b) for a, b in zip(at, at[1:]) if self._adjacent(a, b)}
        self.since_pair = 0
        return True

    def skip(self, sha: str) -> None:
        """`sha` does not build or run: the search walks past it (a grid point to its neighbour)."""
        self.probed(sha)
        self.skipped.add(sha)
        self.count.pop(sha, None)
        if self.grid is not None and self.index is not None and self.index.get(sha) in self.grid:
            good = self._good()
            self.grid = (
                sorted(self.index[s] for s in good[: self.settings.grid]) if len(good) >= self.settings.grid else None
            )

    def _settle_fresh(self) -> None:
        """The new commit's first batch is over: what it got is the level it entered at."""
        if self.fresh is not None and self.count.get(self.fresh):
            self.entry[self.fresh] = self.count[self.fresh]
        self.fresh = None

    def _full(self, prefix: str) -> str | None:
        """The commit of the range a SHA prefix names (the progress line shows 7 digits)."""
        if prefix in self.count:
            return prefix
        hits = [s for s in self.count if s.startswith(prefix)]
        return hits[0] if len(hits) == 1 else None

    def _walked_to(self, sha: str) -> bool:
        """`sha` is a step of a walk through a window of wrong results (search `split`): one trial,
        next to a commit that got one trial too and far from the other side, where a split point
        sits in the middle of its interval. Counted as middle commits, the H200 demo's walk of ten
        raised the middles expected ahead and the estimate to 2.3x the final count."""
        if self.index is None or self.grid is None or sha not in self.index:
            return False
        i = self.index[sha]
        lo, hi = self._neighbours(i)
        near, far = sorted((i - lo, hi - i))
        beside = lo if i - lo <= hi - i else hi
        return (
            near <= 2
            and far >= 2 * near + 2
            and any(self.index.get(s) == beside and self.first.get(s) == 1 for s in self.count)
        )

    def _first_batch(self, sha: str, k: int) -> bool:
        """Trial k of `sha` belongs to its first batch (several new commits may share a round)."""
        return k <= self.first[sha] if sha in self.first else sha == self.fresh

    # -- where the search is -------------------------------------------------------------------
    def _pair(self, *pair: int) -> None:
        """The last two commits measured form the pair being compared (or verified, or checked)."""
        if len(pair) != 2:
            return
        assert self.index is not None
        a, b = sorted(pair)
        good = self._good()
        ends = {self.index[good[0]], self.index[good[1]]} if len(good) > 1 else set()
        if {a, b} == ends and self._neighbours(a)[1] != b:
            self._enter("check")
            self.current = (a, b)
            return
        if self._neighbours(a)[1] != b:
            return
        if (a, b) != self.current:
            self.since_pair = 0
        self.current = (a, b)
        adjacent = self._adjacent(a, b)
        if self.tail is None and adjacent and self.newest is not None and self.index.get(self.newest) not in (a, b):
            self._enter("verify")
        if self.tail == "verify" and adjacent:
            self.verified.add((a, b))
        self._advance()

    def _enter(self, phase: str) -> None:
        if self.tail != phase:
            self.tail, self.tail_start = phase, self.trials - 1

    def _advance(self) -> None:
        if self.tail is None and self.grid is not None:
            self.segment = max(self.segment, self._segment_of(self.current[0]))
            self.frontier = max(self.frontier, self.current[0])

    def _good(self) -> list[str]:
        return [s for s in self.seen if s not in self.skipped]

    def _neighbours(self, i: int) -> tuple[int, int]:
        """The measured commits either side of index i (GOOD and BAD's places when none)."""
        assert self.index is not None
        pos = sorted(self.index[s] for s in self.count if s in self.index and self.index[s] != i)
        j = bisect.bisect_left(pos, i)
        return (pos[j - 1] if j else 0), (pos[j] if j < len(pos) else self.settings.commits - 1)

    def _segment_of(self, i: int) -> int:
        assert self.grid is not None
        return max(0, min(len(self.grid) - 2, bisect.bisect_right(self.grid, i) - 1))

    def _adjacent(self, a: int, b: int) -> bool:
        """Nothing but SKIPs between a and b: a culprit's pair."""
        assert self.index is not None
        between = {self.index[s] for s in self.skipped if s in self.index}
        return all(x in between for x in range(a + 1, b))

    # -- the forecast --------------------------------------------------------------------------
    def middles(self) -> list[str]:
        """Commits the search split intervals at (not GOOD, BAD or the grid)."""
        if self.grid is None or self.index is None:
            return self._good()[self.settings.grid :]
        return [s for s in self._good() if s in self.index and self.index[s] not in self.grid and s not in self.walk]

    def level(self) -> float:
        """Trials a new middle commit ends with: what the recent ones got or will get, else the
        level pairs doubled to. A middle commit the search has not passed yet, first given as many
        trials as its neighbours (not `first_look`: the noise is not small), will double like them."""
        st = self.settings
        doubled = max((self._projected(s) for s in self.escalated), default=0.0)
        ends: list[float] = []
        for s in self.middles():
            c = self.count[s]
            if not c or (c < self.first[s] if s in self.first else s == self.fresh):
                continue  # stored by an earlier call, or its first batch still running
            entry = self.first.get(s, self.entry.get(s, c))
            passed = self.index is not None and self.index[s] < self.current[0]
            ends.append(c if passed or entry < st.initial else max(c, doubled))
        if ends:
            return sum(ends[-st.recent :]) / len(ends[-st.recent :])
        if doubled:
            return float(doubled)
        return (st.first_look + st.initial) / 2.0

    def middles_left(self) -> float:
        """Middle commits the search is still expected to probe."""
        return sum(self._middles())

    def _middles(self) -> tuple[float, float]:
        """(middle commits left in the interval the search splits now, those in the range right of
        it), no more in all than the commits not probed yet."""
        st, n = self.settings, self.settings.commits
        if self.tail is not None:
            return 0.0, 0.0
        unprobed = float(max(0, n - max(len(self.seen), st.grid)))
        per_range = st.steps_prior * st.depth
        if self.grid is None or self.index is None:
            return 0.0, min(unprobed, max(0.0, per_range - len(self.middles())))
        seg = (self.grid[self.segment], self.grid[self.segment + 1])
        span = max(1, n - 1)
        behind = sum(1 for s in self.middles() if self.index[s] < seg[0])
        rate = (behind + per_range * st.prior_weight) / (seg[0] / span + st.prior_weight)
        depth = 0.0
        if self.split is not None and seg[0] < self.split[0] < seg[1] and self.split[1] > 1:
            depth = min(unprobed, math.ceil(math.log2(self.split[1])))
        # the current interval is the search's now: what lies right of it is still to come
        rest = rate * (n - 1 - max(self.current[1], self.frontier)) / span
        return depth, min(unprobed - depth, rest)

    def steps(self) -> float:
        """Culprits the search is expected to verify (one per `depth` middle commits, one at least)."""
        return max(1.0, (len(self.middles()) + self.middles_left()) / self.settings.depth)

    def _projected(self, sha: str) -> float:
        """Trials `sha` is expected to end with, and a commit of the pairs still to come whose
        trials double like it: once doubled in the search, `onward` of the way from its target to
        the cap (all of it once doubled twice; none in a quiet run, `_quiet`)."""
        st, target = self.settings, float(self.target.get(sha, 0))
        if sha in self.escalated and self.tail is None:
            share = 0.0 if self._quiet() else 1.0 if self.doublings.get(sha, 0) > 1 else st.onward
            return min(float(st.cap), target + share * max(0.0, st.cap - target))
        return min(float(st.cap), target)

    def _quiet(self) -> bool:
        """A middle commit got fewer first trials than the protocol's: the search sized them to a
        noise well under the minimum step, so a pair that doubles is a close call, not the rule."""
        return any(
            self.first.get(s, self.entry.get(s, self.settings.initial)) < self.settings.initial for s in self.middles()
        )

    def _grid_level(self) -> float:
        """Trials of the grid points compared so far (the initial trials before any is)."""
        if self.index is None or self.grid is None:
            return float(self.settings.initial)
        compared = [
            self._projected(s)
            for s, i in self.index.items()
            if i in self.grid and i <= self.current[1] and self.count.get(s)
        ]
        return sum(compared) / len(compared) if compared else float(self.settings.initial)

    def _raise(self) -> float:
        """Trials the commits still to be compared get: every batch under way, and the grid points
        from the current pair on, to the level the compared ones reached."""
        busy = {
            *self.last,
            *([self.fresh] if self.fresh else []),
            *(s for s, n in self.first.items() if self.count.get(s, n) < n),
        }
        pending = sum(max(0.0, self._projected(s) - self.count[s]) for s in busy if s in self.count)
        if self.tail is not None or self.index is None or self.grid is None:
            return float(pending)
        level = self._grid_level()
        return pending + sum(
            max(0.0, level - self._projected(s))
            for s, i in self.index.items()
            if i in self.grid and i >= self.current[0] and self.count.get(s)
        )

    def remaining(self) -> float:
        """Trials the search is expected to start from now on (> 0 until it is done)."""
        st = self.settings
        t = self.level()
        grid_left = max(0, st.grid - len(self._good())) * st.initial
        vn = max(2.0, min(st.cap, t * st.verify_share))
        verify = self.steps() * 2 * vn
        check = 2.0 * st.initial
        if self.tail == "verify":
            done, pairs = self.trials - self.tail_start, max(1, len(self.verified))
            per = (done + 2 * vn) / (pairs + 1)  # the verifications so far, and one at the prior's cost
            verify = max(0.0, (self.steps() - pairs) * per) + max(0.0, per - self.since_pair)
        elif self.tail == "check":
            verify, check = 0.0, max(1.0, check - (self.trials - self.tail_start))
        if self.ahead:  # the looks and the check asked for at once: what is left of that round
            verify = max(1.0, sum(max(0, self.target[s] - self.count[s]) for s in self.ahead if s in self.count))
            check = 0.0
        return grid_left + self._raise() + self.middles_left() * t + verify + check

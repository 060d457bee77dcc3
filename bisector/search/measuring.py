"""The search's measurements: what it asks the probe for, and what it keeps of the answers.

A part of the search's state (search/state.py `State`): the commits measured, one at a time, side by
side (`probe.together`) or on some shapes alone (`probe.shaped`), each answer kept through the
drift views (search/drift.py) and its trial processes counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from bisector.model import Measurement, ProbeStatus, base_shape, processes_beyond
from bisector.search.drift import merged_measurement as _merged_measurement
from bisector.search.drift import probe_wants
from bisector.search.fields import StateFields


class Measuring(StateFields):
    """What the search asks the probe for and keeps of the answers (a layer of `State`, on its declared fields)."""

    def keep(self, sha: str, m: Measurement) -> None:
        """`m` is now sha's measurement. The trial processes it adds are counted: a process measures
        every shape it was asked for, so a call adds its largest gain over the shapes. Each commit's
        smallest count, summed, missed the processes that measured some shapes only: an H100
        demo's `--json` said 124 trials for a search of 326."""
        old = self.meas.get(sha)
        self.views.put(m)
        m = self.views.decided(sha)
        self.processes += processes_beyond({k: len(v) for k, v in old.samples.items()} if old else {}, m)
        self.meas[sha] = m
        if self.views.refresh():  # a shape now decided on another view: every commit read again
            self.meas = {k: self.views.decided(k) for k in self.meas}
            self.views.version += 1

    def remeasure_anchor(self) -> None:
        """One trial more of the anchor on every shape, so that drift with time shows on it."""
        self.views.asked()
        have = self.meas[self.commits[self.anchor]].samples
        more = {s: len(v) + 1 for s, v in have.items() if s == base_shape(s)}
        if more and self.probe.shapes_alone:
            self.measure_shaped({self.anchor: more})
        elif more:
            self.measure(self.anchor, max(more.values()))

    def measure(self, i: int, repeats: int) -> bool:
        """Make sure commit i has `repeats` trials; False when it is SKIP."""
        if i in self.skipped:
            return False
        sha = self.commits[i]
        have = self.meas.get(sha)
        if have is not None and have.count() >= repeats:
            return True
        if (
            have is not None
            and have.status is ProbeStatus.OK
            and self.probe.shapes_alone
            and (len({len(v) for v in have.samples.values()}) > 1 or self.every_shape - have.known())
        ):
            # shapes measured unequally (`measure_shaped`), or some only (a split point, `split_on_moved`):
            # only those short of `repeats`, so that none is cut back to it and none is added
            self.measure_shaped({i: dict.fromkeys(have.samples, repeats)})
            return True
        m = self.probe(sha, repeats)
        self.probes.append((sha, repeats))
        if m.status is ProbeStatus.SKIP:
            if have is None:  # a commit that built before keeps its trials if a later one fails
                self.keep(sha, m)
                self.skipped.add(i)
            return False
        self.keep(sha, m)
        return True

    def measure_together(self, wants: Mapping[int, int]) -> None:
        """Make sure each commit i has wants[i] trials, measured side by side when the probe can
        (`probe.together`): a pair's fresh trials then share the machine's state of the moment."""
        if self.views.due():
            self.remeasure_anchor()
        wants = {
            i: n
            for i, n in wants.items()
            if i not in self.skipped and (self.commits[i] not in self.meas or self.meas[self.commits[i]].count() < n)
        }
        if not self.probe.side_by_side or len(wants) < 2 or any(self.commits[i] not in self.meas for i in wants):
            for i, n in wants.items():
                self.measure(i, n)
            return
        got = self.probe.together({self.commits[i]: n for i, n in wants.items()})
        for i, n in wants.items():
            sha = self.commits[i]
            self.probes.append((sha, n))
            if got[sha].status is ProbeStatus.OK:
                self.keep(sha, got[sha])  # a commit that measured before keeps its trials if it fails now

    def measure_shaped(self, wants: Mapping[int, Mapping[str, int]]) -> None:
        """Make sure each measured commit i has wants[i][shape] trials of each shape asked for, side
        by side, the trial processes measuring only the shapes still short (`probe.shaped`): a pair
        unclear on one cheap shape doubles that shape, not the whole trial (on the H200 demo 50 of
        54 doubling trials were for some shapes only, attention 0.89 s of a trial's 1.14 s on the
        device). A probe without `shaped` measures every shape, to the largest count asked."""
        if self.views.due():
            self.remeasure_anchor()
        short = {
            i: {s: n for s, n in per.items() if len(self.meas[self.commits[i]].samples.get(s, ())) < n}
            for i, per in wants.items()
            if i not in self.skipped and self.commits[i] in self.meas
        }
        short = {i: per for i, per in short.items() if per}
        if not short:
            return
        if not self.probe.shapes_alone:
            self.measure_together({i: max(per.values()) for i, per in short.items()})
            return
        got = self.probe.shaped(
            {
                self.commits[i]: probe_wants(per, {s: len(v) for s, v in self.meas[self.commits[i]].samples.items()})
                for i, per in short.items()
            }
        )
        for i, per in short.items():
            sha = self.commits[i]
            self.probes.append((sha, max(per.values())))
            m = got.get(sha)
            if m is not None and m.status is ProbeStatus.OK:
                self.keep(sha, _merged_measurement(self.views.raw[sha], m))

    def measure_many(self, idxs: Sequence[int], repeats: int) -> None:
        """`measure(i, repeats)` for commits the search measures whatever their values (GOOD, BAD,
        the grid) in one round (`probe.together`): their trial processes set up at once and take the
        device in turn. One by one, each commit's setup (seconds on a GPU: context, module load)
        stood between the device and the previous commit's last trial; the decisions are the same."""
        if self.views.due():
            self.remeasure_anchor()
        todo = [
            i
            for i in dict.fromkeys(idxs)
            if i not in self.skipped
            and (self.commits[i] not in self.meas or self.meas[self.commits[i]].count() < repeats)
        ]
        if not self.probe.side_by_side or len(todo) < 2:
            for i in todo:
                self.measure(i, repeats)
            return
        got = self.probe.together({self.commits[i]: repeats for i in todo})
        for i in todo:
            sha, m = self.commits[i], got[self.commits[i]]
            self.probes.append((sha, repeats))
            if m.status is ProbeStatus.OK:
                self.keep(sha, m)
            elif sha not in self.meas:  # as in `measure`: a commit that measured before keeps its trials
                self.keep(sha, m)
                self.skipped.add(i)

    def measure_points(self, idxs: Sequence[int], repeats: int, on: Sequence[str]) -> None:
        """`measure_many` for split points, on the shapes `on` only (`open_shapes`; () for every shape).
        A new commit that does not build or run becomes a SKIP, as in `measure_many`."""
        if not on:
            self.measure_many(idxs, repeats)
            return
        idxs = [i for i in dict.fromkeys(idxs) if i not in self.skipped]
        self.measure_shaped({i: dict.fromkeys(on, repeats) for i in idxs if self.commits[i] in self.meas})
        new = [i for i in idxs if self.commits[i] not in self.meas]
        if not new:
            return
        got = self.probe.shaped(  # `on` is () where the probe measures every shape
            {self.commits[i]: probe_wants(dict.fromkeys(on, repeats)) for i in new}
        )
        for i in new:
            sha = self.commits[i]
            m = got.get(sha) or Measurement(sha, ProbeStatus.SKIP, reason="not measured")
            self.probes.append((sha, repeats))
            self.keep(sha, m)
            if m.status is not ProbeStatus.OK:
                self.skipped.add(i)

    def count(self, i: int, shapes: Iterable[str] | None = None) -> int:
        """Trials of commit i: the fewest of any shape (of `shapes`, where given)."""
        m = self.meas[self.commits[i]]
        if shapes is None:
            return m.count()
        return min((len(m.samples.get(s, ())) for s in shapes), default=0)

    def samples(self, i: int, shape: str, start: int = 0) -> tuple[float, ...]:
        m = self.meas[self.commits[i]]
        if shape in m.wrong:
            return ()  # a wrong result never makes a commit look fast (or slow)
        return tuple(m.samples.get(shape, ()))[start:]

    def shapes(self, i: int, j: int) -> list[str]:
        a, b = self.meas[self.commits[i]], self.meas[self.commits[j]]
        return sorted(s for s in a.samples if s in b.samples and s not in a.wrong and s not in b.wrong)

"""Drift with time, found on an anchor and taken out: which metric a shape is decided on.

A trial's ratio to its control cancels what moves both (clock, heat, a neighbour); it does not
cancel a control that drifts on its own. A cuBLAS control read 98 TFLOP/s in a run's first two
minutes and 101-103 after while the subject stayed flat: the ratio fell 0.97 -> 0.92 with time,
not with commits, and looked like a -5% step that moved as the search moved. So the search
re-measures an anchor (GOOD) at intervals, and whenever it compares trials taken far apart in time,
and fits each view of the anchor's trials (the subject alone, the control alone, their ratio)
against the time each trial ran: a view whose trend over the run is significant and at least half
the minimum step drifts. A shape is decided on the configured metric while it does not drift; on
the other one (subject <-> ratio) where that one does not; on the configured one with the anchor's
trend divided out where both do. Latency views become shapes of their own (`LATENCY_KEY`): a step
in an eager caller's latency is a step. Pure: the probe's measurements in, the search's out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from bisector.model import LATENCY_KEY, WARM_KEY, Measurement, ProbeStatus, base_shape
from bisector.search.stats import log_sd

__all__ = [
    "Trend",
    "DriftFinding",
    "Choice",
    "trend",
    "choose",
    "decided",
    "Views",
    "DRIFT_ALPHA",
    "merged_measurement",
    "probe_wants",
]

# A trend this unlikely by chance drifts. It is looked at after every round, and a false alarm costs
# little (the shape decided on the subject alone); the size floor (half the minimum step) keeps a
# significant but harmless trend from moving the decision.
DRIFT_ALPHA = 0.005
DECIDABLE = ("ratio", "subject")  # the views a shape can be decided on
LABELS = {
    "ratio": "the subject/control ratio",
    "subject": "the subject's own kernel time",
    "control": "the control's kernel time",
}


@dataclass(frozen=True)
class Trend:
    """One view of the anchor's trials against time: its change over the span, in percent."""

    view: str
    pct: float
    ci95: tuple[float, float]
    p_value: float
    span_s: float
    n: int
    slope: float = 0.0  # log units per second
    t0: float = 0.0  # the anchor's first trial

    def drifts(self, min_step: float) -> bool:
        return self.p_value < DRIFT_ALPHA and abs(self.pct) >= min_step / 2.0

    def words(self, min_step: float, drifting: bool | None = None) -> str:
        """ "control +4.1% over the run", or "subject flat (+0.2%)" (`drifting`: as judged elsewhere)."""
        if self.drifts(min_step) if drifting is None else drifting:
            return f"{self.view} {self.pct:+.1f}% over the run ({self.span_s / 60.0:.1f} min)"
        return f"{self.view} flat ({self.pct:+.1f}%)"


def trend(
    view: str, times: Sequence[float], values: Sequence[float], noise: tuple[float, float] | None = None
) -> Trend | None:
    """Least squares of log(values) on times. `noise`: a per-trial log sd known from elsewhere (the
    commits' own spread, pooled) and its df; else the fit's residuals. None below 3 trials or with
    no time between them."""
    t, y = np.asarray(times, dtype=float), np.log(np.asarray(values, dtype=float))
    n = len(t)
    if n < 3 or len(y) != n or float(t.max() - t.min()) <= 0.0:
        return None
    tc = t - t.mean()
    sxx = float((tc**2).sum())
    b = float((tc * (y - y.mean())).sum()) / sxx
    if noise is not None and math.isfinite(noise[0]) and noise[1] >= 2:
        sd, df = noise
    else:
        resid = y - y.mean() - b * tc
        sd, df = math.sqrt(float((resid**2).sum()) / (n - 2)) if n > 2 else math.inf, float(n - 2)
    span = float(t.max() - t.min())
    se = sd / math.sqrt(sxx)
    if se == 0.0:
        p = 0.0 if b else 1.0
        half = 0.0
    else:
        p = float(2.0 * special.stdtr(df, -abs(b) / se))
        half = float(special.stdtrit(df, 0.975)) * se

    def pct(x: float) -> float:
        return math.expm1(x * span) * 100.0

    return Trend(view, pct(b), (pct(b - half), pct(b + half)), p, span, n, b, float(t.min()))


@dataclass(frozen=True)
class Choice:
    """What a shape is decided on: a view, with the anchor's trend divided out where `slope`."""

    view: str
    slope: float = 0.0
    t0: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.view}, corrected for drift" if self.slope else self.view


@dataclass(frozen=True)
class DriftFinding:
    """Per shape: how the anchor's views moved with time, what the shape was decided on, and why."""

    shape: str
    anchor: str
    trends: Mapping[str, Trend]
    decided_on: str  # Choice.name
    why: str

    @property
    def drifted(self) -> bool:
        return "over the run" in self.why


def drifting_views(trends: Mapping[str, Trend], min_step: float) -> set[str]:
    """The views that drift: those whose own trend does, and the ratio where one side drifts alone
    and the ratio moved half a minimum step (it moves as much; its own trend is noisier)."""
    drifting = {v for v, t in trends.items() if t.drifts(min_step)}
    if (
        "ratio" in trends
        and ("control" in drifting) != ("subject" in drifting)
        and abs(trends["ratio"].pct) >= min_step / 2.0
    ):
        drifting.add("ratio")
    return drifting


def choose(shape: str, trends: Mapping[str, Trend], configured: str, min_step: float) -> tuple[Choice, str]:
    """The view to decide `shape` on, and the reason in words (see the module docstring)."""
    drifting = drifting_views(trends, min_step)
    seen = ", ".join(trends[v].words(min_step, v in drifting) for v in ("control", "subject", "ratio") if v in trends)
    if configured not in drifting:
        return Choice(configured), f"{seen}: decided on {LABELS.get(configured, configured)}"
    other = next((v for v in DECIDABLE if v != configured and v in trends and v not in drifting), None)
    if other is not None:
        return Choice(other), f"{seen}: decided on {LABELS[other]}"
    t = trends[configured]
    return (
        Choice(configured, t.slope, t.t0),
        f"{seen}: decided on {LABELS.get(configured, configured)}, the anchor's trend divided out",
    )


def decided(raw: Measurement, choices: Mapping[str, Choice]) -> Measurement:
    """The measurement the search compares: each shape on its chosen view, and a shape of its own
    (`LATENCY_KEY`) for each latency view the probe gave. Equal to `raw` where neither applies."""
    if raw.status is not ProbeStatus.OK or not raw.views:
        return raw
    samples = dict(raw.samples)
    for s, c in choices.items():
        values = raw.views.get(c.view, {}).get(s)
        if s not in samples or values is None or len(values) != len(samples[s]):
            continue
        if c.slope:
            times = raw.times.get(s, ())
            if len(times) != len(values):
                continue
            values = tuple(v / math.exp(c.slope * (t - c.t0)) for v, t in zip(values, times))
        samples[s] = tuple(values)
    for view, key in (("latency", LATENCY_KEY), ("warm", WARM_KEY)):
        for s, values in raw.views.get(view, {}).items():
            if values and s not in raw.wrong:
                samples[s + key] = tuple(values)
    return replace(raw, samples=samples)


class Views:
    """The search's side of drift: the probe's measurements as given (`raw`), the anchor, each
    shape's choice, and when the anchor is due again. `anchor_s` 0: no anchor, no drift check."""

    def __init__(self, anchor_s: float, min_step: Callable[[str], float]) -> None:
        self.anchor_s, self.min_step = anchor_s, min_step
        self.raw: dict[str, Measurement] = {}
        self.anchor: str | None = None
        self.choices: dict[str, Choice] = {}
        self.findings: dict[str, DriftFinding] = {}
        self.asked_at: float | None = None  # `now` when the anchor was last asked for
        self.version = 0  # counts the times a shape's choice changed (the search's judgements before are stale)

    def put(self, m: Measurement) -> None:
        self.raw[m.sha] = m

    def decided(self, sha: str) -> Measurement:
        return decided(self.raw[sha], self.choices)

    # -- time --------------------------------------------------------------------------------
    def now(self) -> float | None:
        """The latest trial time of any measurement (None: the probe gives no times)."""
        ends = [max(t) for m in self.raw.values() for t in m.times.values() if t]
        return max(ends) if ends else None

    def last(self, sha: str) -> float | None:
        m = self.raw.get(sha)
        ends = [max(t) for t in m.times.values() if t] if m is not None else []
        return max(ends) if ends else None

    def middle(self, sha: str) -> float | None:
        m = self.raw.get(sha)
        got = [x for t in m.times.values() for x in t] if m is not None else []
        return statistics.median(got) if got else None

    def on(self) -> bool:
        return self.anchor_s > 0 and self.anchor is not None and self.now() is not None

    def due(self) -> bool:
        """The anchor's last trial is `anchor_s` old or more (and it was not asked for at this time)."""
        if not self.on():
            return False
        now, last = self.now(), self.last(self.anchor)  # type: ignore[arg-type]
        return last is not None and now - last >= self.anchor_s and self.asked_at != now  # type: ignore[operator]

    def far_apart(self, a: str, b: str) -> bool:
        """Trials of a and b taken `anchor_s` or more apart, with no anchor trial since the older
        pair's last ones: their comparison needs the anchor's word on drift first."""
        if not self.on() or self.asked_at == self.now():
            return False
        ma, mb, last = self.middle(a), self.middle(b), self.last(self.anchor)  # type: ignore[arg-type]
        if ma is None or mb is None or last is None:
            return False
        return abs(ma - mb) >= self.anchor_s and last < max(ma, mb)

    def asked(self) -> None:
        self.asked_at = self.now()

    # -- deciding ----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Fit the anchor's views again; True when a shape's choice changed (the search's
        measurements must then be made again). A choice once moved off the configured view stays."""
        if not self.on():
            return False
        a = self.raw.get(self.anchor)  # type: ignore[arg-type]
        if a is None or a.status is not ProbeStatus.OK:
            return False
        changed = False
        for s, samples in a.samples.items():
            times = a.times.get(s, ())
            views = {
                v: a.views[v][s]
                for v in ("subject", "control", "ratio")
                if s in a.views.get(v, {}) and len(a.views[v][s]) == len(times) == len(samples)
            }
            configured = next((v for v in DECIDABLE if views.get(v) == tuple(samples)), None)
            trends = {
                v: t for v, values in views.items() if (t := trend(v, times, values, self.noise(v, s))) is not None
            }
            if configured is None or configured not in trends:
                continue
            before = self.choices.get(s)
            choice, why = choose(s, trends, configured, self.min_step(s))
            if (
                before is not None
                and before.view != configured
                and not before.slope
                and choice != before
                and before.view not in drifting_views(trends, self.min_step(s))
            ):
                # the other view, once chosen, stays: a drift that flattens late was still there
                choice, why = before, why.split(": decided on")[0] + f": decided on {LABELS[before.view]}"
            self.findings[s] = DriftFinding(s, self.anchor, trends, choice.name, why)  # type: ignore[arg-type]
            if choice != before and not (before is None and choice == Choice(configured)):
                changed = True
            self.choices[s] = choice
        return changed

    def noise(self, view: str, shape: str) -> tuple[float, float] | None:
        """The per-trial log sd of a view, pooled over the commits other than the anchor whose trials
        ran within `anchor_s` of each other: a commit measured again later holds the drift too."""
        groups = [
            m.views[view][shape]
            for sha, m in self.raw.items()
            if sha != self.anchor
            and m.status is ProbeStatus.OK
            and len(m.views.get(view, {}).get(shape, ())) > 1
            and len(t := m.times.get(shape, ())) == len(m.views[view][shape])
            and max(t) - min(t) <= self.anchor_s
        ]
        sd, df = log_sd(groups, screen=True)
        return (sd, df) if df >= 4 and math.isfinite(sd) else None


def merged_measurement(have: Measurement, new: Measurement) -> Measurement:
    """`have` with the shapes `new` measured replaced by its samples (a shape wrong in either is wrong)."""
    wrong = have.wrong | new.wrong
    samples = {k: v for k, v in {**have.samples, **new.samples}.items() if k not in wrong}
    views = {v: {**have.views.get(v, {}), **new.views.get(v, {})} for v in {*have.views, *new.views}}
    return replace(
        have,
        samples=samples,
        wrong=wrong,
        reason=have.reason or new.reason,
        views=views,
        times={**have.times, **new.times},
    )


def probe_wants(per: Mapping[str, int], have: Mapping[str, int] | None = None) -> dict[str, int]:
    """A search's wants per shape as the probe knows shapes: a latency shape is its shape's trials.
    Where it holds fewer samples than its shape (`have`: the commit's samples per shape now; a trial
    that did not time latency gives none), its shortfall is asked of its shape beyond the shape's
    own count: asked as an absolute count it would ask for trials the shape already has."""
    have = have or {}
    out: dict[str, int] = {}
    for s, n in per.items():
        b = base_shape(s)
        if s != b and s in have:
            n = max(n, have.get(b, 0) + n - have[s])
        out[b] = max(out.get(b, 0), n)
    return out

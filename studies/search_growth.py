"""A replay study run once per variant of the search's settings (same seeds), with where its trials went.

    python -m studies.search_growth --variant max_repeats=8 --variant max_repeats=12 -- STUDY [STUDY's arguments]

STUDY is a module of studies/ that calls `localize` by that name (long_range_replay, search_accuracy,
demo_replay). Each `--variant` (SearchSettings fields, comma-separated key=value) replaces the
settings of every search the study runs; its output is printed as it is, then one line per variant:
the searches' trials by what asked for them (the grid with GOOD and BAD, first looks at new commits,
more trials for an unclear pair, verification, step 5's fresh trials), their rounds (probe calls
one after the other, a pair's commits asked for together as the pipeline's probe does) and the
candidates verification dropped. Written to choose how an unclear pair's trials grow: the `growth`
variants of studies/results/search-growth.txt ran at commit e0907ea, whose SearchSettings has them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import SimpleNamespace

import numpy as np

from bisector.model import Measurement, Probe
from bisector.search import SearchSettings, localize
from bisector.search.prober import ProbeBase, as_prober

# The search's methods that ask for trials, innermost first wins (bisector/search/__init__.py).
ASKERS = {
    "compare_pair": "grow",
    "compare_parts": "grow",
    "split": "first",
    "verify": "verify",
    "unexplained": "step 5",
    "recheck": "step 5",
    "refine_fresh": "step 5",
}
PHASES = ("grid", "first", "grow", "verify", "step 5")


def asker() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in ASKERS:
            return ASKERS[frame.f_code.co_name]
        if frame.f_code.co_name == "localize":
            return "grid"
        frame = frame.f_back
    return "grid"


class Attributed(ProbeBase):
    """A probe that counts each new trial under what asked for it, and the rounds; `together` always
    (the inner probe's, else its commits one after another in the order given)."""

    def __init__(self, probe: Probe) -> None:
        self.probe = as_prober(probe)
        self.have: dict[str, int] = {}
        self.trials: Counter[str] = Counter()
        self.rounds: Counter[str] = Counter()
        self.dropped = 0  # candidates the verification dropped: false detections it caught

    def _count(self, got: Mapping[str, Measurement], phase: str) -> None:
        for sha, m in got.items():
            n = m.count()
            self.trials[phase] += max(0, n - self.have.get(sha, 0))
            self.have[sha] = max(n, self.have.get(sha, 0))

    def __call__(self, sha: str, repeats: int) -> Measurement:
        phase = asker()
        self.rounds[phase] += 1
        m = self.probe(sha, repeats)
        self._count({sha: m}, phase)
        return m

    side_by_side = True

    def prefetch(self, shas: Sequence[str]) -> None:
        self.probe.prefetch(shas)

    def together(self, wants: Mapping[str, int]) -> dict[str, Measurement]:
        phase = asker()
        self.rounds[phase] += 1
        got = self.probe.together(wants)  # one after another where the inner probe is not side by side
        self._count(got, phase)
        return got


def run(study: str, argv: Sequence[str], changes: Mapping[str, object]) -> list[Attributed]:
    """STUDY's main with `changes` on the settings of every search it runs; the searches' probes."""
    module = importlib.import_module(f"studies.{study}")
    seen: list[Attributed] = []

    def patched(commits: Sequence[str], probe: Probe, settings: SearchSettings = SearchSettings()):
        wrapped = Attributed(probe)
        seen.append(wrapped)
        result = localize(commits, wrapped, dataclasses.replace(settings, **changes))
        wrapped.dropped = len(result.dropped)
        return result

    kept, module.localize = module.localize, patched
    kept_argv, sys.argv = sys.argv, [study, *argv]
    kept_mp = getattr(module, "mp", None)
    if kept_mp is not None:  # a study's worker processes would keep the counts: its work runs here
        module.mp = SimpleNamespace(Pool=InProcess)
    try:
        code = module.main()
        if code:
            raise SystemExit(code)
    finally:
        module.localize, sys.argv = kept, kept_argv
        if kept_mp is not None:
            module.mp = kept_mp
    return seen


class InProcess:
    """`multiprocessing.Pool` as a study uses it (`with mp.Pool(jobs) as pool: pool.map(f, work)`), in this process."""

    def __init__(self, *_: object) -> None:
        pass

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def map(self, f: Callable, work: Iterable, chunksize: int = 1) -> list:
        return [f(w) for w in work]


def summary(label: str, probes: Sequence[Attributed]) -> str:
    if not probes:
        return f"{label}: no searches"
    per = {p: statistics.mean(a.trials[p] for a in probes) for p in PHASES}
    total = [sum(a.trials.values()) for a in probes]
    rounds = [sum(a.rounds.values()) for a in probes]
    asked = {p: statistics.mean(a.rounds[p] for a in probes) for p in PHASES}
    return (
        f"{label}: {len(probes)} searches; trials mean {statistics.mean(total):.1f} "
        f"(median {statistics.median(total):.0f}, p90 {np.percentile(total, 90):.0f}) = "
        + ", ".join(f"{p} {per[p]:.1f}" for p in PHASES)
        + f"; rounds mean {statistics.mean(rounds):.1f} (median {statistics.median(rounds):.0f}, "
        f"p90 {np.percentile(rounds, 90):.0f}) = "
        + ", ".join(f"{p} {asked[p]:.1f}" for p in PHASES)
        + f"; candidates dropped by verification {sum(a.dropped for a in probes)}"
    )


def parse(text: str) -> dict[str, object]:
    """`key=value,...` as SearchSettings fields; ValueError naming what does not fit."""
    fields = {f.name: f.type for f in dataclasses.fields(SearchSettings)}
    out: dict[str, object] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        kind = fields.get(key)
        if kind not in ("str", "bool", "int", "float"):
            raise ValueError(f"--variant {text!r}: {key!r} is not a SearchSettings field of a plain type")
        out[key] = (
            value
            if kind == "str"
            else (value == "true")
            if kind == "bool"
            else (int(value) if kind == "int" else float(value))
        )
    dataclasses.replace(SearchSettings(), **out)  # values the settings refuse fail here
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", default=[], help="SearchSettings changes: max_repeats=12,...")
    ap.add_argument("study")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
        variants = {text: parse(text) for text in args.variant or [""]}
    except ValueError as bad:
        ap.error(str(bad))
    lines, code = [], 0
    for text, changes in variants.items():
        print(f"## variant {text or 'as configured'}", flush=True)
        try:
            probes = run(args.study, [a for a in args.args if a != "--"], changes)
        except SystemExit as stop:  # a replay that met a commit its store has no trials like, say
            lines.append(f"{text or 'as configured'}: stopped: {stop}")
            code = max(code, stop.code if isinstance(stop.code, int) else 1)
        else:
            lines.append(summary(text or "as configured", probes))
        print(lines[-1], flush=True)
    print("\n".join(["", "## summary", *lines]))
    return code


if __name__ == "__main__":
    sys.exit(main())

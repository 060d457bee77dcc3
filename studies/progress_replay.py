"""The progress line's estimate replayed on recorded progress logs: what this code would have shown.

    python -m studies.progress_replay --device cuda --order STORE.sqlite LOG [LOG ...] [--final N]
    python -m studies.progress_replay --device cpu --order STORE.sqlite LOG ...

studies/progress_accuracy.py reads the estimate a log printed (the code of its day);
studies/estimate_accuracy.py replays the forecast on a store's trials, without the trials' "k/n",
their partners or the stage events. This reads the events back out of a log (each line is one
ProbeEvent: a build, a trial "k/n (side by side with ...)", a SKIP, a stage with its count) and
feeds them to the ProgressLine of the code it runs with, so the same log gives the estimate before
and after a change of bisector/estimate/forecast.py or bisector/commands/progress.py (run this file
from a checkout of each).

A plain log prints the same action on the same commit at most every 5 s: the trials it left out
are those of the line before (the line's "trials N" counts them), put back with their k counted on
(past the line's n: a batch the log did not show, taken for a doubling).
The clock: a line shows seconds below a minute, whole minutes (rounded) from there; a time past a
minute is placed between the first lines that show the minutes around it, by trials.

Per log (its last call, where it holds several): the final trial count (its "done:" line, this
call's count; or --final, the whole run's when the log is the first call of a run that a later call
finished), and estimate / final at 1, 2, 3 and 5 minutes and where each later stage starts, the
worst over and under from the first minute on, the share of lines within 1.5x.
The range's commits (the forecast places each commit in GOOD..BAD) come from a store of the same
range (its commits table): the demos' upstream is the same repository on every machine.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import io
import math
import re
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from bisector.commands.progress import ProgressLine
from bisector.config import load as load_config
from bisector.demo.demo_config import CONFIG_FILES
from bisector.measure.probe import ProbeEvent
from studies.stored_trials import plain_store

LINE = re.compile(
    r"^(?:\[ *[\d.]+\] )?progress: (?P<what>.*?) \| (?:(?P<stage>[a-z]+) \| )?commits \d+ "
    r"\| trials (?P<n>\d+) of ~(?P<m>\d+)"
    r" \| elapsed (?:(?P<min>\d+) min|(?P<s>\d+) s|(?P<h>[\d.]+) h)"
)
STAGE = re.compile(r"^stage (?P<name>[a-z]+)(?:: ~(?P<expect>\d+) trials)?$")
EVENT = re.compile(
    r"^(?P<sha>[0-9a-f]{7})(?: \+patch (?P<patch>[0-9a-f]{8}))? (?P<action>build|trial|skip)"
    r"(?::? ?(?P<detail>.*))?$"
)
KN = re.compile(r"^trial (\d+)/(\d+)(.*)$")
THIS_CALL = re.compile(r"this call: (\d+) trials")
DONE = re.compile(r"done: .*?(\d+) trials \(")
MINUTES = (1, 2, 3, 5)
WITHIN = 1.5
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Logged:
    """One line of a log: the event it stands for, and what the line showed."""

    event: ProbeEvent | None  # None: a line of no event (done)
    trials: int  # "trials N"
    shown: int  # "of ~M"
    minutes: int | None  # "elapsed K min" (None: seconds)
    seconds: float | None  # "elapsed S s"


def parse(text: str) -> tuple[list[Logged], int | None]:
    """The log's lines with an event or an estimate, and its final trial count (this call's)."""
    lines: list[Logged] = []
    stage = ""
    for raw in text.splitlines():
        m = LINE.match(raw)
        if m is None:
            continue
        what = m.group("what")
        minutes = int(m.group("min")) if m.group("min") else round(60 * float(m.group("h"))) if m.group("h") else None
        seconds = float(m.group("s")) if m.group("s") else None
        st, ev = STAGE.match(what), EVENT.match(what)
        if lines and int(m.group("n")) < lines[-1].trials:  # a new call (the counter starts again)
            stage = ""
        if not st and (m.group("stage") or "") != stage:  # a stage announced before the call's first trial
            stage = m.group("stage") or ""  # prints no line of its own: the lines name it
            lines.append(Logged(ProbeEvent("", "stage", stage), int(m.group("n")), int(m.group("m")), minutes, seconds))
        if st:
            stage = st.group("name")
            event: ProbeEvent | None = ProbeEvent("", "stage", stage, expect=int(st.group("expect") or 0))
        elif ev:
            action, detail = ev.group("action"), (ev.group("detail") or "").strip()
            # a trial's detail is its line's ("trial 2/4 ..."); a build's or SKIP's follows "action: "
            event = ProbeEvent(
                ev.group("sha"), action, f"trial {detail}" if action == "trial" else detail, ev.group("patch")
            )
        else:
            event = None
        lines.append(Logged(event, int(m.group("n")), int(m.group("m")), minutes, seconds))
    final = THIS_CALL.findall(text) or DONE.findall(text)
    return lines, (int(final[-1]) if final else None)


def calls(lines: Sequence[Logged]) -> list[list[Logged]]:
    """The lines of each call a log holds (one log may be several calls' output, one after another)."""
    out: list[list[Logged]] = []
    for line in lines:
        if not out or line.trials < out[-1][-1].trials:
            out.append([])
        out[-1].append(line)
    return out


def unthrottled(lines: Sequence[Logged]) -> list[tuple[ProbeEvent, int]]:
    """(event, index of the line it follows): each line's event, then the trials the log left out
    before the next line (this line's commit, its k counted on)."""
    out: list[tuple[ProbeEvent, int]] = []
    last: ProbeEvent | None = None
    count = 0
    for j, line in enumerate(lines):
        e = line.event
        if line.trials < count:  # the next call's lines
            last, count = None, 0
        mine = 1 if e is not None and e.action == "trial" else 0
        missing = line.trials - mine - count
        if missing > 0 and last is not None and last.action == "trial":
            k, n, rest = KN.match(last.detail).groups()  # type: ignore[union-attr]
            size = int(n)
            for i in range(1, missing + 1):
                kk = int(k) + i
                while kk > size:  # a batch the log left out: taken for a doubling, as most are
                    size *= 2
                out.append((ProbeEvent(last.sha, "trial", f"trial {kk}/{size}{rest}", last.patch_hash), j - 1))
        count = line.trials
        if e is not None:
            out.append((e, j))
            if e.action == "trial":
                last = e
    return _partners_put_back(out)


def _cut(e: ProbeEvent) -> bool:
    """A trial line whose partners the log cut short (the plain log cuts a line at 120 characters)."""
    return e.action == "trial" and "side by side with" in e.detail and not e.detail.rstrip().endswith(")")


def _partners_put_back(events: list[tuple[ProbeEvent, int]]) -> list[tuple[ProbeEvent, int]]:
    """A round of many commits (a verification's first looks) lost its partners' closing parenthesis
    and some partners: the round's commits are the run of such lines. Read as cut, the round was
    missed and the replayed estimate climbed to 1.6x where the run's own lines stayed within 1.2x."""
    out, i = list(events), 0
    while i < len(out):
        if not _cut(out[i][0]):
            i += 1
            continue
        j = i
        while j < len(out) and _cut(out[j][0]):
            j += 1
        shas = sorted({e.sha for e, _ in out[i:j]})
        for m in range(i, j):
            e, at = out[m]
            head = e.detail.split(" (side by side with")[0]
            others = ", ".join(x for x in shas if x != e.sha)
            out[m] = (replace(e, detail=f"{head} (side by side with {others})"), at)
        i = j
    return out


def times(lines: Sequence[Logged]) -> list[float]:
    """Each line's elapsed seconds: as shown below a minute; from there placed by its trials between
    the first lines showing each minute ("k min" first shows at (k - 0.5) min, "1 min" at 60 s)."""
    anchors: list[tuple[int, float]] = []  # (line, seconds)
    seen: set[int] = set()
    for j, line in enumerate(lines):
        if line.seconds is not None:
            anchors.append((j, line.seconds))
        elif line.minutes is not None and line.minutes not in seen:
            seen.add(line.minutes)
            anchors.append((j, 60.0 if line.minutes == 1 else 60.0 * (line.minutes - 0.5)))
    out = []
    for j, line in enumerate(lines):
        before = max((a for a in anchors if a[0] <= j), default=(0, 0.0))
        after = next((a for a in anchors if a[0] > j and a[1] > before[1]), None)
        if line.seconds is not None or after is None:
            out.append(line.seconds if line.seconds is not None else before[1])
            continue
        span = lines[after[0]].trials - lines[before[0]].trials
        share = (line.trials - lines[before[0]].trials) / span if span > 0 else 0.0
        out.append(before[1] + share * (after[1] - before[1]))
    return out


def replay(lines: Sequence[Logged], order: Sequence[str], device: str, stages: tuple[str, ...]) -> list[int]:
    """The estimate ("of ~M") this code's progress line shows at each of the log's lines."""
    cfg = load_config(ROOT / "configs" / CONFIG_FILES[device])
    full = {sha[:7]: sha for sha in order}
    clock = [0.0]
    # the device kind, where this code's progress line takes it (bisector/estimate/later_stages.py)
    kind = {"device": cfg.device} if "device" in inspect.signature(ProgressLine.for_range).parameters else {}
    line = ProgressLine.for_range(
        len(order),
        cfg.protocol.trials,
        order=order,
        max_trials=cfg.protocol.max_trials,
        first_look=cfg.protocol.first_look,
        stages=stages,
        console=Console(file=io.StringIO()),
        clock=lambda: clock[0],
        live=False,
        **kind,
    )
    shown = [0] * len(lines)
    events = unthrottled(lines)
    for i, (e, j) in enumerate(events):
        line(ProbeEvent(full.get(e.sha, e.sha), e.action, e.detail, e.patch_hash, e.expect))
        if i == 0 or events[i - 1][1] != j:  # the line's own event (the ones it left out come after it)
            shown[j] = line.expected_trials
    for j in range(1, len(lines)):  # a line of no event shows what the line before it did
        if lines[j].event is None:
            shown[j] = shown[j - 1]
    return shown


def judge(ts: Sequence[float], estimates: Sequence[int], final: int, lines: Sequence[Logged] = ()) -> dict[str, object]:
    """Estimate / final at the minutes of MINUTES and where each later stage starts, from when on
    every line is within 1.5x, the worst over and under and the share within from the first minute."""
    ratios = [m / final for m in estimates]
    # where each later stage starts: the line that announces it (the estimate once its count is known)
    stages = {
        ln.event.detail: ratios[j]
        for j, ln in reversed(list(enumerate(lines)))
        if ln.event is not None and ln.event.action == "stage" and ln.event.detail != "search"
    }
    at = {}
    for minute in MINUTES:
        j = next((j for j, t in enumerate(ts) if t >= 60 * minute), None)
        at[minute] = ratios[j] if j is not None else math.nan
    late = [r for t, r in zip(ts, ratios) if t >= 60]
    # from when on every line is within 1.5x (seconds; None: the last line is not)
    holds = next((t for j, t in enumerate(ts) if all(1 / WITHIN <= r <= WITHIN for r in ratios[j:])), None)
    return {
        "at": at,
        "stages": stages,
        "holds": holds,
        "worst": (max(late), min(late)) if late else (math.nan, math.nan),
        "within": sum(1 / WITHIN <= r <= WITHIN for r in late) / len(late) if late else math.nan,
    }


def read(path: Path) -> str:
    """A log's text (gzipped or not)."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode(errors="replace")


def commits_of(store: Path) -> list[str]:
    with plain_store(store) as plain:
        db = sqlite3.connect(f"file:{plain}?mode=ro", uri=True)
        try:
            return [r[0] for r in db.execute("SELECT sha FROM commits ORDER BY rowid")]
        finally:
            db.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.progress_replay", description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--device", choices=sorted(CONFIG_FILES), required=True, help="the demo config the runs used")
    ap.add_argument("--order", type=Path, required=True, help="a store of the range (its commits, oldest first)")
    ap.add_argument("--stages", default="fixes,hunks", help="the stages after the search the runs took")
    ap.add_argument(
        "--final",
        type=int,
        nargs="*",
        default=[],
        help="per log, the run's final trial count (0: the log's own), for a first call a later one finished",
    )
    args = ap.parse_args(argv)
    missing = [p for p in [*args.logs, args.order] if not p.is_file()]
    if missing:
        print(f"error: progress_replay: no such file: {missing[0]}", file=sys.stderr)
        return 2
    order = commits_of(args.order)
    stages = tuple(s for s in args.stages.split(",") if s)
    heads = " | ".join(f"{m} min" for m in MINUTES)
    print(
        f"| log | final | logged: {heads} | replayed: {heads} | at the fixes / hunks stage's start: logged, "
        f"replayed | within {WITHIN}x from: logged, replayed | replayed: worst over / under from 1 min "
        f"| replayed: lines within {WITHIN}x from 1 min |"
    )
    print("|---|---:|" + "---:|" * (2 * len(MINUTES)) + "---:|---:|---:|---:|")
    for i, path in enumerate(args.logs):
        lines, own = parse(read(path))
        lines = calls(lines)[-1] if lines else lines  # a log of several calls: its last, the one "done:" counts
        final = (args.final[i] if i < len(args.final) and args.final[i] else None) or own
        if not final or not lines:
            print(f"| {path.name} | no final trial count (give --final) |")
            continue
        ts = times(lines)
        logged = judge(ts, [ln.shown for ln in lines], final, lines)
        replayed = judge(ts, replay(lines, order, args.device, stages), final, lines)
        cells = lambda r: " | ".join("-" if math.isnan(r["at"][m]) else f"{r['at'][m]:.2f}" for m in MINUTES)  # noqa: E731
        starts = " / ".join(
            f"{logged['stages'][st]:.2f}, {replayed['stages'][st]:.2f}" if st in logged["stages"] else "-"
            for st in ("fixes", "hunks")
        )
        holds = ", ".join("never" if r["holds"] is None else f"{r['holds'] / 60:.1f} min" for r in (logged, replayed))
        hi, lo = replayed["worst"]
        print(
            f"| {path.parent.name}/{path.name} | {final} | {cells(logged)} | {cells(replayed)} | {starts} "
            f"| {holds} | {hi:.2f} / {lo:.2f} | {replayed['within']:.0%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

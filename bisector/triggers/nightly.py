"""The nightly job: the newest upstream commit against the last good night, bisect any regression.

    fetch -> tip of the branch -> (already done tonight? report only)
          -> first night: measure the tip, record it good
          -> else: A/B tip vs last good night -> regression? bisect + publish -> record the night
          -> reports/nightly/<date>.md with the trend of every shape and the control

A night with a regression, or one that cannot decide, is recorded as not good, so the baseline
stays at the last good commit and a slow drift cannot walk the baseline down.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bisector import gitrepo, pipeline, publish
from bisector.config import Config
from bisector.model import Measurement, ProbeStatus, Step
from bisector.search import uncertain_json
from bisector.store import Night
from bisector.triggers import outcome_plan as plan_mod
from bisector.triggers import perf, plan_file
from bisector.triggers.ab import ab_until_sure


@dataclass(frozen=True)
class NightOutcome:
    date: str
    sha: str
    baseline: str | None  # the last good night's sha (None on the first night)
    good: bool
    measured: bool  # False: this night was already done, only the report was rewritten
    verdict: Mapping[str, object]
    report: Path
    trend: Path
    bisect_report: Path | None = None
    published: tuple[str, ...] = ()
    plan_file: Path | None = None  # the publish plan written for `bisector publish --plan`


def nightly_dir(config: Config) -> Path:
    return Path(config.report_dir) / "nightly"


def run_night(
    config: Config,
    date: str,
    store: str | None = None,
    work_dir: str | None = None,
    dry_run_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    verify_fixes: bool = True,
    say: Callable[[str], None] = lambda s: None,
    plan_out: Path | None = None,
    observer: pipeline.Observer = lambda e: None,
    on_range: Callable[[int], None] = lambda n: None,
) -> NightOutcome:
    """`plan_out`: measure only; a bisection's plan is written there and nothing is posted. `observer`
    sees every probe event (progress); on_range(n) is told the size of a bisection's range before it
    starts, for the time-left estimate."""
    env = os.environ if env is None else env
    plan = None
    session = pipeline.Session(config, store, work_dir, observer)  # opens the upstream: a URL is fetched here
    try:
        tip = gitrepo.resolve(session.repo, config.upstream.branch)
        done = next((n for n in session.store.nights(session.campaign) if n.date == date and n.sha == tip), None)
        if done is not None:
            say(f"night {date} already measured {tip[:12]}: rewriting the report only")
            return _finish(session, done, measured=False)
        last = session.store.last_good_night(session.campaign)
        session.store.add_commits(session.campaign, [gitrepo.to_commit(session.repo.commit(tip))])
        probe = session.probe()
        if last is None or last[1] == tip:
            night = _tip_alone(probe(tip, config.protocol.trials), date, tip, last)
        else:
            night, bisect_out = _compare(
                session, config, date, last[1], tip, store, work_dir, verify_fixes, say, on_range
            )
            if bisect_out is not None:
                plan = plan_mod.from_outcome(config, bisect_out, f"nightly-{config.name}-{date}")
                verdict: dict[str, object] = dict(night.verdict)
                verdict["bisect_report"] = str(bisect_out.report_dir / "report.md")
                night = replace(night, verdict=verdict)
        session.store.record_night(session.campaign, night.date, night.sha, night.verdict, good=night.good)
        outcome = _finish(session, night, measured=True)
    finally:
        session.close()
    bisect_report = night.verdict.get("bisect_report")
    published: tuple[str, ...] = ()
    if plan is not None and plan_out is not None:  # the workflow's publish job posts it
        plan_file.write(plan, plan_out, config.publish)
    elif plan is not None:  # after the night is recorded: nothing measured is lost if publishing fails
        result = publish.publish(plan_file.settle(plan, config.publish), config.publish, env, dry_run_dir)
        published = tuple(c.url for c in result.comments) + result.dry_run_files
    elif bisect_report:
        say("publish.repo is not set: the bisection is in the report only")
    return replace(
        outcome,
        bisect_report=Path(str(bisect_report)) if bisect_report else None,
        published=published,
        plan_file=plan_out if plan is not None and plan_out is not None else None,
    )


def _tip_alone(m: Measurement, date: str, tip: str, last: tuple[str, str] | None) -> Night:
    """A night with nothing to compare against (the first, or no commit since the last good one):
    the tip measured alone, good where it ran and gave right results."""
    good = m.status is ProbeStatus.OK and not m.wrong
    why = "first night" if last is None else "no new commits since the last good night"
    return Night(
        date,
        tip,
        good,
        {
            "baseline": last[1] if last else None,
            "note": why,
            "status": "ok" if good else (m.reason or "wrong results")[-300:],
        },
    )


def _compare(
    session: pipeline.Session,
    config: Config,
    date: str,
    base: str,
    tip: str,
    store: str | None,
    work_dir: str | None,
    verify_fixes: bool,
    say: Callable[[str], None],
    on_range: Callable[[int], None] = lambda n: None,
) -> tuple[Night, pipeline.RunOutcome | None]:
    probe = session.probe()
    keys = tuple(s.key for s in config.shapes)
    mb, mt, rows = ab_until_sure(probe, base, tip, keys, config.thresholds, config.protocol)
    if rows is None:
        failed = mt if mt.status is ProbeStatus.SKIP else mb
        return Night(
            date,
            tip,
            False,
            {"baseline": base, "status": f"{failed.sha[:12]} did not build or run: {failed.reason.strip()[-300:]}"},
        ), None
    shapes = {
        r.shape: {
            "verdict": r.verdict.value,
            "change_pct": r.comparison.change_pct if r.comparison else None,
            "ci95": list(r.comparison.ci95) if r.comparison else None,
        }
        for r in rows
    }
    regressed = [r.shape for r in rows if r.verdict in (perf.PerfVerdict.SLOWER, perf.PerfVerdict.WRONG)]
    verdict: dict[str, object] = {"baseline": base, "shapes": shapes, "overall": perf.overall(rows)}
    good = not regressed and not perf.unsure(rows)
    if not regressed:
        return Night(date, tip, good, verdict), None
    say(f"step in {', '.join(regressed)} between {base[:12]} and {tip[:12]}: bisecting")
    options = pipeline.RunOptions(
        good=base,
        bad=tip,
        store=store,
        work_dir=work_dir,
        report_dir=str(nightly_dir(config) / f"{date}-bisect"),
        verify_fixes=verify_fixes,
        command=f"bisector run --config {config.path} --good {base} --bad {tip}",
    )
    on_range(len(gitrepo.commit_range(session.repo, base, tip)))
    outcome = pipeline.bisect(config, options, observer=session.observer)  # its own session, same store file
    result = outcome.result

    def step(s: Step) -> dict[str, object]:
        return {"commit": s.commit, "pr": s.pr, "shapes": list(s.shapes), "change_pct": dict(s.change_pct)}

    verdict["steps"] = [step(s) for s in result.steps]
    verdict["dropped"] = [step(s) for s in result.dropped]
    verdict["unsure"] = uncertain_json(result.uncertain)
    return Night(date, tip, False, verdict), outcome


def _finish(session: pipeline.Session, night: Night, measured: bool) -> NightOutcome:
    """Write reports/nightly/<date>.md and its trend plot from the store (every night so far)."""
    config = session.config
    out = nightly_dir(config)
    out.mkdir(parents=True, exist_ok=True)
    nights = [n for n in session.store.nights(session.campaign) if n.date <= night.date]
    if not any(n.date == night.date for n in nights):
        nights.append(night)
    keys = [s.key for s in config.shapes]
    subj = {n.date: pipeline.medians(session, n.sha, "subject_tflops") for n in nights}
    ctrl = {n.date: pipeline.medians(session, n.sha, "control_tflops") for n in nights}
    dates = [n.date for n in nights]
    from bisector.report.plots import render_trend  # matplotlib, only when a night's report is written

    trend = render_trend(
        dates,
        {k: [subj[d].get(k) for d in dates] for k in keys},
        {k: [ctrl[d].get(k) for d in dates] for k in keys} if config.control != "none" else {},
        out / f"{night.date}-trend.png",
        f"{config.name}: nightly TFLOP/s, {config.upstream.branch}",
    )
    path = out / f"{night.date}.md"
    path.write_text(render_markdown(config, night, nights, subj, ctrl, trend.name))
    return NightOutcome(
        night.date,
        night.sha,
        night.verdict.get("baseline"),  # type: ignore[arg-type]
        night.good,
        measured,
        dict(night.verdict),
        path,
        trend,
    )


def render_markdown(
    config: Config,
    night: Night,
    nights: list[Night],
    subj: Mapping[str, Mapping[str, float]],
    ctrl: Mapping[str, Mapping[str, float]],
    trend_png: str,
) -> str:
    v = night.verdict
    keys = [s.key for s in config.shapes]
    state = "good" if night.good else "NOT good (the baseline stays at the last good night)"
    lines = [
        f"# Nightly {night.date}: {config.name}",
        "",
        _answer(night),
        "",
        f"Upstream `{config.upstream.repo}` branch `{config.upstream.branch}`, newest commit `{night.sha[:12]}`; "
        f"this night is **{state}**.",
        "",
    ]
    if v.get("baseline"):
        lines.append(f"Compared with the last good night's commit `{str(v['baseline'])[:12]}`.")
    if v.get("note"):
        lines.append(f"Note: {v['note']}.")
    if v.get("status") and v.get("status") != "ok":
        lines.append(f"Problem: {v['status']}")
    shapes = v.get("shapes")
    if isinstance(shapes, Mapping):
        lines += ["", "| shape | change | 95% CI | verdict |", "|---|---:|---|---|"]
        for k, s in shapes.items():
            ch, ci = s.get("change_pct"), s.get("ci95")
            lines.append(
                f"| {k} | {'—' if ch is None else f'{ch:+.1f}%'} | "
                f"{'—' if not ci else f'[{ci[0]:+.1f}, {ci[1]:+.1f}]%'} | {s.get('verdict')} |"
            )
    if "steps" in v:
        lines += ["", "## Steps found by the bisection", "", *_bisection_lines(v)]
        if v.get("bisect_report"):
            rel = os.path.relpath(str(v["bisect_report"]), nightly_dir(config))
            lines += ["", f"Full bisection report: [{rel}]({rel})"]
    lines += ["", "## Trend", "", f"![trend]({trend_png})", "", *_trend_table(keys, nights, subj, ctrl)]
    lines += [
        "",
        "TFLOP/s medians over each night's stored trials; `ctl` is the control "
        f"({config.control}) timed in the same processes.",
        "",
    ]
    return "\n".join(lines)


def _trend_table(
    keys: Sequence[str],
    nights: Sequence[Night],
    subj: Mapping[str, Mapping[str, float]],
    ctrl: Mapping[str, Mapping[str, float]],
) -> list[str]:
    """A row per night: its commit, whether it was good, and each shape's subject (and control) TFLOP/s."""
    lines = ["| night | commit | good | " + " | ".join(keys) + " |", "|---|---|---|" + "---:|" * len(keys)]
    for n in nights:
        cells = []
        for k in keys:
            s, c = subj.get(n.date, {}).get(k), ctrl.get(n.date, {}).get(k)
            cells.append("—" if s is None else f"{s:.2f}" + (f" (ctl {c:.2f})" if c is not None else ""))
        lines.append(f"| {n.date} | `{n.sha[:7]}` | {'yes' if n.good else 'no'} | " + " | ".join(cells) + " |")
    return lines


def _answer(night: Night) -> str:
    """The question the nightly answers, first: is the newest commit slower than the last good night,
    on what, and which PR did it."""
    v = night.verdict
    raw = v.get("shapes")
    shapes: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    moved = ", ".join(
        f"{k} {s['change_pct']:+.1f}%" if isinstance(s.get("change_pct"), (int, float)) else f"{k} {s.get('verdict')}"
        for k, s in shapes.items()
        if s.get("verdict") in ("slower", "wrong results")
    )
    base = f" (`{str(v['baseline'])[:12]}`)" if v.get("baseline") else ""
    if night.good:
        return (
            f"**Answer**: good, nothing slower than the last good night{base}."
            if base
            else "**Answer**: good; the first night measured, the baseline from now on."
        )
    text = f"**Answer**: slower than the last good night{base}" + (f": {moved}" if moved else "")
    steps = list(v.get("steps") or ())  # type: ignore[call-overload]
    if steps:
        text += "; the bisection blames " + ", ".join(
            (f"#{s['pr']} " if s.get("pr") else "") + f"(`{str(s['commit'])[:12]}`)" for s in steps
        )
    elif "steps" in v:
        text += "; the bisection blames no single commit (below)"
    return text + "."


def _bisection_lines(v: Mapping[str, object]) -> list[str]:
    """The steps, or why there are none: a night that regressed and a bisection that found nothing
    to blame must say which candidates did not hold and where the search stayed unsure."""

    def step(s: Mapping[str, Any]) -> str:
        pr = f" (#{s['pr']})" if s.get("pr") else ""
        changes = ", ".join(f"{k} {c:+.1f}%" for k, c in s["change_pct"].items())
        return f"`{s['commit'][:12]}`{pr}: {changes}"

    steps, dropped, unsure = (list(v.get(k) or ()) for k in ("steps", "dropped", "unsure"))  # type: ignore[call-overload]
    lines = [f"- {step(s)}" for s in steps]
    if not steps:
        lines.append(
            "No step held between the last good night and this one: the change is spread over "
            "several commits below the minimum step, or the trials could not resolve it."
        )
    lines += [f"- dropped (did not hold on re-measurement): {step(s)}" for s in dropped]
    lines += [
        f"- unsure at the trial cap: `{u['before'][:12]}`..`{u['after'][:12]}` in {', '.join(u['shapes'])}"
        for u in unsure
    ]
    return lines

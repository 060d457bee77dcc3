"""report.md: what a kernel engineer pastes into a PR. Short, exact, no filler."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Iterable, Sequence

from bisector.model import Step
from bisector.report import why
from bisector.report.data import FixResult, HunkFinding, ReportData
from bisector.throughput import describe as describe_throughput


def _pr(pr: int | None) -> str:
    return f"#{pr}" if pr else ""


METRIC_WORDS = {"ratio": "the subject/control ratio", "speed": "the subject's own speed at full clock"}
METRIC_SHORT = {"ratio": "ratio", "speed": "full-clock speed"}


def metric_of_shape(metric: str, shape: str) -> str:
    """The metric of one shape's suite, from "speed" or "fa: speed, gemm: ratio"."""
    per = dict((p.split(":")[0].strip(), p.split(":")[1].strip()) for p in metric.split(",")) if ":" in metric else {}
    return per.get(shape.split("/", 1)[0], metric)


def metric_words(metric: str) -> str:
    """"speed" -> words; "fa: speed, gemm: ratio" -> "the subject's own ... (fa) and the ... (gemm)"."""
    if ":" not in metric:
        return METRIC_WORDS.get(metric, metric)
    parts = [p.split(":") for p in metric.split(",")]
    return " and ".join(f"{METRIC_WORDS.get(m.strip(), m.strip())} ({s.strip()})" for s, m in parts)


def tflops(value: float) -> str:
    """One decimal at GPU scale (1284.6), four significant digits below (0.08651 on a CPU)."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str] | None = None) -> list[str]:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _short_shape(shape: str) -> str:
    return shape.split("/", 1)[1] if "/" in shape else shape


def _ref(sha: str, data: ReportData) -> str:
    commit = data.commit(sha)
    return f"`{sha[:7]}`" + (f" ({_pr(commit.pr)})" if commit and commit.pr else "")


def step_summary(step: Step, data: ReportData) -> str:
    """One line per step, also used for PR comments."""
    commit = data.commit(step.commit)
    kind = "regression" if step.is_regression else "improvement"
    where = f"`{step.commit[:7]}`" + (f" ({_pr(step.pr)})" if step.pr else "")
    if step.candidates:
        where = "one of " + ", ".join(f"`{c[:7]}`" for c in step.candidates) + " (the others did not build)"
    changes = ", ".join(f"{_short_shape(s)} {step.change_pct[s]:+.1f}%" for s in step.shapes)
    subject = f": {commit.subject}" if commit else ""
    return f"{kind} at {where}{subject} — {changes}"


def steps_table(data: ReportData) -> list[str]:
    if not data.steps:
        return [f"No step of {data.min_step_pct:g}% or more in any shape between "
                f"`{data.good.short}` and `{data.bad.short}`."]
    rows = []
    for step in data.steps:
        commit = data.commit(step.commit)
        culprit = f"`{step.commit[:7]}`" if not step.candidates else \
            "one of " + " ".join(f"`{c[:7]}`" for c in step.candidates)
        for shape in step.shapes:
            lo, hi = step.ci95[shape]
            rows.append([culprit, _pr(step.pr), commit.subject if commit else "", _short_shape(shape),
                         f"{step.change_pct[shape]:+.1f}%", f"[{lo:+.1f}, {hi:+.1f}]",
                         f"{step.p_value[shape]:.1g}",
                         ("regression" if step.change_pct[shape] < 0 else "improvement")
                         + ("" if step.verified else " (unverified)")])
    return _table(["culprit", "PR", "subject", "shape", "change", "95% CI", "p", "verdict"], rows)


def results_table(data: ReportData) -> list[str]:
    """The MISSION.md form: commit, date, PR, TFLOP/s per shape, and the control's row."""
    header = ["commit", "date", "PR", *(_short_shape(s) for s in data.shapes)]
    step_at = {s.commit for s in data.steps}
    wrong = {(w.sha, w.shape) for w in data.wrong}
    rows = []
    for row in data.rows:
        cells = []
        for shape in data.shapes:
            value = row.subject_tflops.get(shape)
            if (row.commit.sha, shape) in wrong:
                cells.append("wrong")
            else:
                cells.append(tflops(value) if value is not None else "")
        mark = " ◀" if row.commit.sha in step_at else ""
        rows.append([f"`{row.commit.short}`{mark}", row.commit.date[:10], _pr(row.commit.pr), *cells])
    control = []
    for shape in data.shapes:
        values = [r.control_tflops[shape] for r in data.rows if shape in r.control_tflops]
        control.append(f"~{tflops(statistics.median(values))}" if values else "")
    rows.append([f"{data.control} (control)", "", "", *control])
    return _table(header, rows, ["---", "---", "---", *(["---:"] * len(data.shapes))])


def wrong_rows(data: ReportData) -> list[list[str]]:
    """One row per shape and run of measured commits with the same error: a wrong-result window
    of nine commits is one row, not nine."""
    def err(v: float | None) -> str:
        return f"{v:.3g}" if v is not None else ""

    rows = []
    for shape in sorted({w.shape for w in data.wrong}):
        runs: list[tuple[list[str], tuple[str, str]]] = []
        for w in (w for w in data.wrong if w.shape == shape):
            key = (err(w.max_abs_err), err(w.max_rel_err))
            if runs and runs[-1][1] == key:
                runs[-1][0].append(w.sha)
            else:
                runs.append(([w.sha], key))
        for shas, (abs_err, rel_err) in runs:
            prs = [_pr(c.pr) if (c := data.commit(sha)) else "" for sha in (shas[0], shas[-1])]
            if len(shas) == 1:
                rows.append([f"`{shas[0][:7]}`", prs[0], _short_shape(shape), abs_err, rel_err])
            else:
                rows.append([f"`{shas[0][:7]}`..`{shas[-1][:7]}` ({len(shas)} measured)", " .. ".join(prs),
                             _short_shape(shape), abs_err, rel_err])
    return rows


def _after(sha: str, than: str, data: ReportData) -> bool:
    order = [c.sha for c in data.range_commits]
    return sha in order and than in order and order.index(sha) > order.index(than)


def _ci(c: object) -> str:
    lo, hi = c.ci95  # type: ignore[attr-defined]
    return f"{c.change_pct:+.1f}% [{lo:+.1f}, {hi:+.1f}]"  # type: ignore[attr-defined]


def fix_lines(fix: FixResult, data: ReportData) -> list[str]:
    commit = data.commit(fix.step_commit)
    name = f"`{fix.step_commit[:7]}`" + (f" ({_pr(commit.pr)})" if commit and commit.pr else "")
    if not fix.applied:
        return [f"- revert of {name}: does not apply on the tip: {fix.conflict}"]
    if fix.error:
        return [f"- revert of {name} (`{fix.patch_path}`): could not be measured: {fix.error}"]
    parts = []
    for shape in fix.shapes:
        verdict = fix.verdict(shape)
        if verdict == "not measured":
            parts.append(f"{_short_shape(shape)}: not measured")
            continue
        tail = ""
        remaining = fix.remaining_pct(shape) or 0.0
        later = [s for s in data.steps if s.is_regression and s.commit != fix.step_commit and shape in s.shapes
                 and _after(s.commit, fix.step_commit, data)]
        if later and verdict != "restored":
            tail = " (also lost to " + ", ".join(f"{_ref(s.commit, data)} {s.change_pct[shape]:+.1f}%"
                                                 for s in later) + ")"
        warn = " ⚠ the revert makes the tip slower" if verdict == "slower than the tip" else ""
        figures = (f"{tflops(fix.restored[shape])} TFLOP/s with the revert, {tflops(fix.baseline[shape])} before "
                   f"the step, {tflops(fix.tip[shape])} at the tip; "
                   if shape in fix.restored and shape in fix.baseline and shape in fix.tip else "")
        parts.append(f"{_short_shape(shape)}: **{verdict}**{warn}: {figures}"
                     f"{METRIC_SHORT.get(metric_of_shape(data.metric, shape), 'the metric')} "
                     f"{_ci(fix.vs_parent[shape])} against the step's "
                     f"parent, {_ci(fix.vs_tip[shape])} against the tip{tail}"
                     + (f"; {-remaining:.1f}% still missing" if verdict in ("partly restored", "not restored") else ""))
    correct = "" if fix.correct else " — WRONG RESULTS with the patch"
    patch = Path(fix.patch_path).name if fix.patch_path else ""
    return [f"- revert of {name} on the tip ([{patch}]({patch})), {fix.trials} trials of each measured side by "
            f"side with the tip and the step's parent{correct}:", *[f"  - {p}" for p in parts]]


def diff_block(diff: str) -> list[str]:
    """A fenced diff, the fence longer than any run of backticks inside it."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", diff)), default=0))
    return [f"{fence}diff", diff.rstrip("\n"), fence]


def hunk_lines(finding: HunkFinding, data: ReportData) -> list[str]:
    """What narrowed a culprit to its hunks: every subset tried, then the hunks found as a diff."""
    link = Path(finding.patch_path).name if finding.patch_path else ""
    lines = [f"- {_ref(finding.step_commit, data)}: {finding.summary}" + (f" ([{link}]({link}))" if link else "") + ":"]
    for t in finding.tries:
        moved = "; ".join(filter(None, [", ".join(f"{_short_shape(s)} {v:+.1f}%" for s, v in t.change_pct.items()),
                                        t.error])) or "not measured"
        trials = f" ({t.trials} trials)" if t.trials else ""
        lines.append(f"  - parent + {'; '.join(f'`{h}`' for h in t.hunks)}: {moved}{trials}"
                     f" — {'reproduces' if t.carries else 'does not reproduce'} the step")
    diff = finding.diff if len(finding.diff) <= 4000 else finding.diff[:4000] + "\n... (cut; the patch file has it all)\n"
    return [*lines, "", *diff_block(diff), ""]


def render(data: ReportData, plots: Sequence[str] = (), csv_name: str = "trials.csv") -> str:
    m = data.machine
    lines = [f"# {data.title}", ""]
    lines.append(f"Upstream `{data.upstream}` ({data.branch}), range `{data.good.short}`..`{data.bad.short}` "
                 f"({len(data.range_commits) - 1} commits), {data.commits_probed} commits measured, "
                 f"{data.trials} trials; this run {data.wall_s / 60:.1f} min, trial processes "
                 f"{data.trial_s / 60:.1f} min in all.")
    machine = ", ".join(str(m[k]) for k in ("device_name", "driver", "torch", "triton") if m.get(k))
    proto = data.protocol
    lines.append(f"Machine: {machine or data.device}. Control: {data.control}, timed in the same process, "
                 f"alternating with the subject. Cold protocol: a fresh process per trial, a JIT cache of each "
                 f"commit's own emptied before its first trial, {proto.get('reps', '?')} timed repetitions after "
                 f"{proto.get('warmup', '?')} warm-up, cache flushed before each, random inputs, output checked "
                 f"against the control. Values are medians over trials of the per-trial median TFLOP/s; steps "
                 f"are tested on {metric_words(data.metric)} (minimum step {data.min_step_pct:g}%).")
    if data.throughput is not None:
        lines.append(describe_throughput(data.throughput))
    lines += [f"\n> {note}" for note in data.notes]
    lines += ["", "## Steps", "", *steps_table(data)]
    if data.dropped:
        lines += ["", "Not confirmed on re-measurement against the parent (dropped): "
                  + "; ".join(step_summary(s, data) for s in data.dropped)]
    if data.uncertain:
        cap = data.protocol.get("max_trials", "?")
        pairs = "; ".join(f"{_ref(u.before, data)}..{_ref(u.after, data)} in "
                          + ", ".join(_short_shape(s) for s in u.shapes) for u in data.uncertain)
        lines += ["", f"Still unsure at the trial cap ({cap} trials a commit), taken as no step: {pairs}. "
                  f"A step near {data.min_step_pct:g}% could hide there; raise `protocol.max_trials` to decide."]
    if data.hunks:
        lines += ["", "## The hunks that carry each step", "",
                  "Each culprit's parent, rebuilt with part of the culprit's hunks applied and measured side by "
                  "side with fresh trials of the parent on the step's shapes (the change shown is against those; "
                  "a part whose place stays unclear gets more rounds): a part that sits nearer the culprit than "
                  "the parent, by the median over the step's shapes, is split again (delta debugging).", ""]
        for finding in data.hunks:
            lines += hunk_lines(finding, data)
    if data.fixes:
        lines += ["", "## Candidate fixes, verified on the tip", ""]
        for fix in data.fixes:
            lines += fix_lines(fix, data)
    lines += why.sections(data)  # issue #14: compiled kernels, hunk groups, interacting steps (report/why.py)
    lines += ["", "## TFLOP/s per measured commit", "", *results_table(data)]
    if data.wrong:
        lines += ["", "## Wrong results (never ranked)", ""]
        for w in data.wrong_windows:
            fixed = f", right again from {_ref(w.fixed, data)}" if w.fixed else ", still wrong at the tip"
            lines.append(f"- {', '.join(_short_shape(s) for s in w.shapes)}: wrong from {_ref(w.first, data)} "
                         f"(right at {_ref(w.last_good, data)}){fixed}.")
        if data.wrong_windows:
            lines.append("")
        lines += _table(["commits", "PRs", "shape", "max abs err", "max rel err"], wrong_rows(data))
    if data.skipped:
        lines += ["", "## Skipped (did not build or import)", ""]
        for sha, reason in data.skipped.items():
            c = data.commit(sha)
            last = reason.strip().splitlines()[-1] if reason.strip() else "no log"
            log = data.build_logs.get(sha)
            lines.append(f"- `{sha[:7]}` {_pr(c.pr) if c else ''}: {last}" + (f" ([log]({log}))" if log else ""))
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += ["", f"Raw trials, every repetition: [{csv_name}]({csv_name})."]
    if data.reproduce:
        lines += ["", "## Reproduce", "", "```sh", *data.reproduce, "```"]
    return "\n".join(lines) + "\n"

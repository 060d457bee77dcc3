"""report.md: what a kernel engineer pastes into a PR, showing why to trust it: every step with the
metric and threshold that decided it, every measured commit with
that metric's spread and its number of trials, every unsure pair with what its trials said.

Each section is its own function of ReportData (golden files in tests/golden/report_*.md)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bisector.measure.time_spent import describe as describe_throughput
from bisector.model import Step, base_shape
from bisector.report import why_sections as why
from bisector.report.action_summary import summary_lines
from bisector.report.calls import calls_section
from bisector.report.control_moves import WARNING as CONTROL_WARNING
from bisector.report.data import METRIC_DEFINITIONS, METRIC_SHORT, METRIC_UNIT, METRIC_WORDS, ReportData
from bisector.report.figures import (
    change,
    commit_ref,
    md_table,
    metric_cell,
    metric_value,
    p_value,
    pct,
    short_shape,
    tflops,
)
from bisector.report.fixes_section import fixes_section
from bisector.report.hunks_section import diff_block, hunks_section
from bisector.search.evidence import UnsurePair
from bisector.why.facts import StepMove

__all__ = [
    "METRIC_SHORT",
    "METRIC_WORDS",
    "counts",
    "diff_block",
    "fixes_section",
    "hunks_section",
    "metric_words",
    "render",
    "step_summary",
    "tflops",
    "wrong_rows",
]

# the cold protocol's JIT cache, where Triton kept its autotune choices per commit (Config.keeps_autotune)
AUTOTUNE_KEPT = (
    " (Triton's autotune choices kept in it: a commit's first trial tunes cold, its later trials reuse them)"
)
UNSURE_OPEN = 5  # more unsure pairs than this are folded into <details>


def _pr(pr: int | None) -> str:
    return f"#{pr}" if pr else ""


def metric_words(metric: Mapping[str, str]) -> str:
    """{"fa": "speed"} -> words; {"fa": "speed", "gemm": "ratio"} -> "the subject's own ... (fa) and the ... (gemm)"."""
    if len(set(metric.values())) <= 1:
        only = next(iter(metric.values()), "ratio")
        return METRIC_WORDS.get(only, only)
    return " and ".join(f"{METRIC_WORDS.get(m, m)} ({suite})" for suite, m in metric.items())


_table, _short_shape = md_table, short_shape


def _suites(shapes: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(s.split("/", 1)[0] for s in shapes))


def step_summary(step: Step, data: ReportData) -> str:
    """One line per step, also used for PR comments."""
    commit = data.commit(step.commit)
    kind = "regression" if step.is_regression else "improvement"
    where = f"`{step.commit[:7]}`" + (f" ({_pr(step.pr)})" if step.pr else "")
    if step.candidates:
        where = (
            "one of "
            + ", ".join(f"`{c[:7]}`" for c in step.candidates)
            + " (not told apart: commits that did not build or gave wrong results)"
        )
    changes = ", ".join(
        f"{_short_shape(s)} {step.change_pct[s]:+.1f}%{_own_speed(step.commit, s, data)}" for s in step.shapes
    )
    subject = f": {commit.subject}" if commit else ""
    return f"{kind} at {where}{subject} — {changes}"


def _own_speed(sha: str, shape: str, data: ReportData) -> str:
    """` (the subject's own TFLOP/s -20.0%: the control moved +12.6%)` where the control moved with the step."""
    move = _move(sha, shape, data)
    if move is None or not _distorts(move, data):
        return ""
    return f" (the subject's own TFLOP/s {pct(move.subject_pct)}: the control moved {pct(move.control_pct)})"


# -- header ------------------------------------------------------------------------------------


def machine_text(data: ReportData) -> str:
    """`NVIDIA H200, driver 580.159.04, torch 2.11.0 (CUDA 13.0), triton 3.6.0, Python 3.12.3`, from the
    trials' machine fingerprint (benches/machine.py)."""
    m = data.machine
    raw = m.get("versions")
    versions: dict[str, Any] = raw if isinstance(raw, dict) else {}
    torch = versions.get("torch") or m.get("torch")
    toolkit = (
        f"CUDA {m['torch_cuda']}" if m.get("torch_cuda") else f"HIP {m['torch_hip']}" if m.get("torch_hip") else ""
    )
    parts = [
        str(m.get("device_name") or data.device),
        f"driver {m['driver']}" if m.get("driver") else "",
        f"torch {torch}" + (f" ({toolkit})" if toolkit else "") if torch else "",
        f"triton {versions.get('triton') or m.get('triton')}" if versions.get("triton") or m.get("triton") else "",
        f"Python {m['python']}" if m.get("python") else "",
    ]
    return ", ".join(p for p in parts if p)


def metric_definitions(metric: Mapping[str, str]) -> str:
    """Every metric the run used, defined: "ratio = ...; full-clock TFLOP/s = ..."."""
    used = dict.fromkeys(metric.values() or ("ratio",))
    return "; ".join(METRIC_DEFINITIONS.get(m, m) for m in used)


def title(data: ReportData) -> list[str]:
    return [f"# {data.title}"]


def counts(data: ReportData) -> str:
    """The run's counts and times, from its RunTotals (older data: the search's own counts)."""
    if data.totals is not None:
        return f"{data.totals.counts()}; {data.totals.times()}"
    return (
        f"{len(data.range_commits)} commits (GOOD and BAD included), {data.commits_probed} measured; "
        f"{data.trials} trials"
    )


def header(data: ReportData) -> list[str]:
    """What was measured where, and how the steps were decided (the title and the actions come first)."""
    proto = data.protocol
    lines = [
        f"Upstream `{data.upstream}` ({data.branch}), range `{data.good.short}`..`{data.bad.short}`: {counts(data)}."
    ]
    lines.append(
        f"Machine: {machine_text(data)}. Control: {data.control}, timed in the same process, "
        f"alternating with the subject. Cold protocol: a fresh process per trial, a JIT cache of each "
        f"commit's own emptied before its first trial{AUTOTUNE_KEPT if proto.get('autotune_kept') else ''}, "
        f"{proto.get('reps', '?')} timed repetitions after "
        f"{proto.get('warmup', '?')} warm-up, cache flushed before each, random inputs, output checked "
        f"against the control. TFLOP/s are medians over trials of the per-trial median; steps are "
        f"tested on {metric_words(data.metric)}, one value per trial (minimum step "
        f"{data.min_step_text}), shown beside the TFLOP/s with its spread over the trials. "
        f"Metrics: {metric_definitions(data.metric)}."
    )
    if data.isolation:
        lines.append(f"Isolation of the code under test: {data.isolation}.")
    if data.throughput is not None:
        lines.append(describe_throughput(data.throughput, data.totals))
    lines += [f"\n> {note}" for note in data.notes]
    return lines


# -- steps -------------------------------------------------------------------------------------


def _trials_of(sha: str, shape: str, data: ReportData) -> str:
    row, shape = data.row(sha), base_shape(shape)  # a latency shape's trials are its shape's
    return str(row.trials.get(shape, 0)) if row is not None and row.trials.get(shape) else "?"


def steps_table(data: ReportData) -> list[str]:
    if not data.steps:
        return [
            f"No step of {data.min_step_text} or more in any shape between `{data.good.short}` and `{data.bad.short}`."
        ]
    rows = []
    for step in data.steps:
        commit = data.commit(step.commit)
        culprit = (
            f"`{step.commit[:7]}`"
            if not step.candidates
            else "one of " + " ".join(f"`{c[:7]}`" for c in step.candidates)
        )
        after = step.candidates[-1] if step.candidates else step.commit
        for shape in step.shapes:
            lo, hi = step.ci95[shape]
            rows.append(
                [
                    culprit,
                    _pr(step.pr),
                    commit.subject if commit else "",
                    _short_shape(shape),
                    f"{METRIC_SHORT.get(data.metric_of(shape), data.metric_of(shape))} ≥{data.min_step(shape):g}%",
                    _levels(step, shape, data),
                    f"{step.change_pct[shape]:+.1f}%",
                    f"[{lo:+.1f}, {hi:+.1f}]",
                    _tflops_move(step.commit, shape, data),
                    p_value(step.p_value[shape]),
                    f"{_trials_of(step.parent, shape, data)} + {_trials_of(after, shape, data)}",
                    ("regression" if step.change_pct[shape] < 0 else "improvement")
                    + ("" if step.verified else " (unverified)"),
                ]
            )
    return _table(
        [
            "culprit",
            "PR",
            "subject",
            "shape",
            "decided on",
            "parent → culprit",
            "change",
            "95% CI",
            "TFLOP/s change",
            "p",
            "trials",
            "verdict",
        ],
        rows,
    )


def _levels(step: Step, shape: str, data: ReportData) -> str:
    """`0.2933 → 0.1070`: the levels the step's change was read from (its test's geometric means)."""
    levels = step.levels.get(shape)
    if levels is None:
        return ""
    metric = data.metric_of(shape)
    return f"{metric_value(levels[0], metric)} → {metric_value(levels[1], metric)}"


def _move(sha: str, shape: str, data: ReportData) -> StepMove | None:
    return next((m for m in data.moves if m.commit == sha and m.shape == shape), None)


def _tflops_move(sha: str, shape: str, data: ReportData) -> str:
    """The subject's own TFLOP/s change across the step, and the control's when it moved by more
    than the step's noise (then the metric and the TFLOP/s disagree for the machine's reasons)."""
    move = _move(sha, shape, data)
    if move is None:
        return ""
    if _distorts(move, data):
        return f"**{pct(move.subject_pct)}** (control {pct(move.control_pct)} ⚠)"
    return pct(move.subject_pct)


def _distorts(move: StepMove, data: ReportData) -> bool:
    """The control moved beyond the step's noise and the step was read on a ratio to it: the ratio
    carries the control's move (the subject's own speed does not)."""
    return move.control_moved and move.subject_pct is not None and data.metric_of(move.shape).endswith("ratio")


def control_notes(data: ReportData) -> list[str]:
    """A line per step and shape read on a ratio whose control moved by more than the step's noise."""
    moved = [m for m in data.moves if _distorts(m, data)]
    if not moved:
        return []
    return [
        "⚠ The control moved beyond the step's noise: "
        + "; ".join(
            f"{commit_ref(m.commit, data)} {_short_shape(m.shape)}, control {pct(m.control_pct)} on this commit "
            f"against its "
            f"parent (the step's noise: ±{m.noise_pct:.1f}%), subject {pct(m.subject_pct)}, "
            f"{METRIC_SHORT.get(data.metric_of(m.shape), data.metric_of(m.shape))} {m.metric_pct:+.1f}%"
            for m in moved
        )
        + ". "
        + CONTROL_WARNING
    ]


def steps_section(data: ReportData) -> list[str]:
    """The steps, the rule that made each one, and the steps that did not hold."""
    lines = ["## Steps", ""]
    if data.steps:
        lines += [
            f'A step changes its suite\'s metric ("decided on") by at least {data.min_step_text} '
            f"(`thresholds.min_step_pct`) with p below {data.alpha:g} for the whole search "
            f"(`thresholds.alpha`, shared over shapes and comparisons), then holds against its parent in "
            f"fresh trials measured side by side"
            + (
                ", in trial processes that share no history with the search's (forked from a new zygote; "
                "a step those deny gets a second look from another new zygote before it is dropped)"
                if data.fresh_lineage
                else ""
            )
            + ". Parent → culprit: the metric's geometric mean (the mean of its logs) over the parent's and "
            "the culprit's trials (trials: parent + culprit), less any trial far from both levels, as the "
            "test reads them; change = culprit / parent - 1, with the test's 95% CI and p. Every change "
            "of a metric in this report (the reverts' and their combinations' too) is read this way; "
            "the per-commit tables below show medians instead, which can differ from these levels by "
            "a little. TFLOP/s change: the subject's median TFLOP/s, culprit against parent.",
            "",
        ]
    lines += steps_table(data)
    notes = control_notes(data)
    lines += ["", *notes] if notes else []
    lines += ["", "What decided:", *(f"- {line}" for line in data.decided)] if data.decided else []
    if data.dropped:
        lines += [
            "",
            "Not confirmed on re-measurement against the parent (dropped): "
            + "; ".join(step_summary(s, data) for s in data.dropped),
        ]
    return lines


# -- unsure pairs ------------------------------------------------------------------------------


def _unsure(data: ReportData) -> tuple[UnsurePair, ...]:
    """The pairs with their comparisons; pairs named only in `uncertain` without them."""
    return data.unsure or tuple(UnsurePair(u.before, u.after, u.shapes) for u in data.uncertain)


def _sides(pair: UnsurePair, data: ReportData) -> str:
    """Trials each side: those compared, else the commits' rows."""
    sides = {(str(c.n_before), str(c.n_after)) for c in pair.comparisons} or {
        (_trials_of(pair.before, s, data), _trials_of(pair.after, s, data)) for s in pair.shapes
    }
    return ", ".join(f"{a} + {b}" for a, b in sorted(sides))


def _spanned(pair: UnsurePair, data: ReportData) -> list[Step]:
    """Steps found between the pair's commits in one of its shapes: an unsure pair of an early look
    (the search refined it through another shape or look) that is not "no step" after all."""
    order = {c.sha: i for i, c in enumerate(data.range_commits)}
    lo, hi = order.get(pair.before, -1), order.get(pair.after, -1)
    return [s for s in data.steps if lo < order.get(s.commit, -1) <= hi and set(s.shapes) & set(pair.shapes)]


def unsure_section(data: ReportData) -> list[str]:
    """Pairs still undecided at the trial cap, in range order: a table, folded when long."""
    order = {c.sha: i for i, c in enumerate(data.range_commits)}
    pairs = sorted(_unsure(data), key=lambda p: (order.get(p.before, -1), order.get(p.after, -1)))
    if not pairs:
        return []
    cap = data.protocol.get("max_trials", "?")
    reach = [
        max(abs(lo), abs(hi)) for p in pairs if not _spanned(p, data) for c in p.comparisons for lo, hi in [c.ci95]
    ]
    widest = (
        f" The widest interval of those with no step found between them reaches ±{max(reach):.0f}%." if reach else ""
    )
    intro = (
        f"Still unsure at the trial cap ({cap} trials a commit), taken as no step: {len(pairs)} "
        f"pair{'s' if len(pairs) != 1 else ''}. A step near {data.min_step_text} could hide there; "
        f"raise `protocol.max_trials` to decide.{widest}"
    )
    rows = []
    for p in pairs:
        known = {c.shape: c for c in p.comparisons}
        cells = "; ".join(f"{_short_shape(s)} {change(known[s])}" if s in known else _short_shape(s) for s in p.shapes)
        spanned = _spanned(p, data)
        if spanned:
            cells += " (a step was found between them: " + ", ".join(commit_ref(s.commit, data) for s in spanned) + ")"
        rows.append([f"{commit_ref(p.before, data)}..{commit_ref(p.after, data)}", _sides(p, data), cells])
    table = _table(["pair", "trials", "change [95% CI] per unsure shape"], rows)
    if len(pairs) <= UNSURE_OPEN:
        return [intro, "", *table]
    return [intro, "", f"<details><summary>The {len(pairs)} unsure pairs</summary>", "", *table, "", "</details>"]


# -- per measured commit -----------------------------------------------------------------------


def suite_table(data: ReportData, suite: str) -> list[str]:
    """One suite's shapes: per commit, TFLOP/s and the metric with its spread; the control's row last."""
    shapes = [s for s in data.shapes if s.split("/", 1)[0] == suite]
    metric = data.metric_of(shapes[0]) if shapes else "ratio"
    unit = METRIC_UNIT.get(metric, metric)
    header = ["commit", "date", "PR"]
    for shape in shapes:
        header += [f"{_short_shape(shape)} TFLOP/s", f"{_short_shape(shape)} {unit}"]
    # ◀ where a step of this suite's shapes is (at each candidate when it could not be told apart)
    step_at = {c for s in data.steps if set(s.shapes) & set(shapes) for c in (s.commit, *s.candidates)}
    wrong = {(w.sha, w.shape) for w in data.wrong}
    rows = []
    for row in data.rows:
        if not any(s in row.subject_tflops or (row.commit.sha, s) in wrong for s in shapes):
            continue
        cells = []
        for shape in shapes:
            if (row.commit.sha, shape) in wrong:
                cells += ["wrong", "wrong"]
                continue
            value = row.subject_tflops.get(shape)
            cells += [tflops(value) if value is not None else "", metric_cell(row.metric.get(shape, ()), metric)]
        mark = " ◀" if row.commit.sha in step_at else ""
        rows.append([f"`{row.commit.short}`{mark}", row.commit.date[:10], _pr(row.commit.pr), *cells])
    control = []
    for shape in shapes:
        values = [r.control_tflops[shape] for r in data.rows if shape in r.control_tflops]
        control += [f"~{tflops(statistics.median(values))}" if values else "", ""]
    rows.append([f"{data.control} (control)", "", "", *control])
    return _table(header, rows, ["---", "---", "---", *(["---:"] * (2 * len(shapes)))])


def results_table(data: ReportData) -> list[str]:
    """Every suite's table under a heading naming its metric."""
    lines: list[str] = []
    for suite in _suites(data.shapes):
        shape = next(s for s in data.shapes if s.split("/", 1)[0] == suite)
        lines += [
            f"### {suite}: steps tested on {METRIC_WORDS.get(data.metric_of(shape), data.metric_of(shape))}",
            "",
            *suite_table(data, suite),
            "",
        ]
    return lines[:-1]


def commits_section(data: ReportData) -> list[str]:
    return [
        "## Per measured commit",
        "",
        "Per shape: the median TFLOP/s over the commit's trials, then the metric its steps were tested on: "
        "median ±CV over the same trials (number of trials). The metric, not the TFLOP/s, decides a step: "
        "on a busy machine TFLOP/s move between neighbours with no step while the ratio to the control, "
        "timed in the same process, holds. ◀ marks a culprit; wrong: the output disagreed with the "
        "control's." + (BLANK_NOTE if _some_unmeasured(data) else ""),
        "",
        *results_table(data),
    ]


BLANK_NOTE = (
    " A blank: no trial of that shape ran at the commit; the search measures a commit it splits a part "
    "at on the shapes that moved, or may have, between the part's ends only."
)


def _some_unmeasured(data: ReportData) -> bool:
    """Some measured commit lacks a shape the others have (`SearchSettings.split_on_moved`)."""
    wrong = {(w.sha, w.shape) for w in data.wrong}
    return any(
        s not in row.subject_tflops and (row.commit.sha, s) not in wrong
        for row in data.rows
        for s in data.shapes
        if any(s in r.subject_tflops for r in data.rows)
    )


# -- wrong results, skipped commits, files -----------------------------------------------------

PR_LIST = 8  # PRs listed one by one; a longer stretch is named by its commits only


def pr_list(first: str, last: str, data: ReportData) -> str:
    """The PRs of the range's commits from `first` to `last`, listed (never "#136 .. #151": PRs
    numerically between them may have merged elsewhere in the history); past PR_LIST, a count."""
    order = [c.sha for c in data.range_commits]
    if first not in order or last not in order:
        return ""
    prs = [_pr(c.pr) for c in data.range_commits[order.index(first) : order.index(last) + 1] if c.pr]
    return ", ".join(prs) if len(prs) <= PR_LIST else f"{len(prs)} PRs (see the commits)"


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
            if len(shas) == 1:
                c = data.commit(shas[0])
                rows.append([f"`{shas[0][:7]}`", _pr(c.pr) if c else "", _short_shape(shape), abs_err, rel_err])
            else:
                rows.append(
                    [
                        f"`{shas[0][:7]}`..`{shas[-1][:7]}` ({len(shas)} measured)",
                        pr_list(shas[0], shas[-1], data),
                        _short_shape(shape),
                        abs_err,
                        rel_err,
                    ]
                )
    return rows


def wrong_section(data: ReportData) -> list[str]:
    if not data.wrong:
        return []
    lines = ["## Wrong results (never ranked)", ""]
    for w in data.wrong_windows:
        fixed = f", right again from {commit_ref(w.fixed, data)}" if w.fixed else ", still wrong at the tip"
        lines.append(
            f"- {', '.join(_short_shape(s) for s in w.shapes)}: wrong from {commit_ref(w.first, data)} "
            f"(right at {commit_ref(w.last_good, data)}){fixed}."
        )
    if data.wrong_windows:
        lines.append("")
    return lines + _table(["commits", "PRs", "shape", "max abs err", "max rel err"], wrong_rows(data))


def skipped_section(data: ReportData) -> list[str]:
    if not data.skipped:
        return []
    lines = ["## Skipped (did not build or import)", ""]
    for sha, reason in data.skipped.items():
        c = data.commit(sha)
        last = reason.strip().splitlines()[-1] if reason.strip() else "no log"
        log = data.build_logs.get(sha)
        lines.append(f"- `{sha[:7]}` {_pr(c.pr) if c else ''}: {last}" + (f" ([log]({log}))" if log else ""))
    return lines


def files_section(data: ReportData, plots: Sequence[str], csv_name: str) -> list[str]:
    lines: list[str] = []
    if plots:
        lines += [
            "## Plots",
            "",
            "Per shape: the metric the steps were tested on, a dot per trial and a line through the "
            "medians, over the commits measured in range order (equally spaced: a stretch of unmeasured "
            "commits takes no room); below it the subject's TFLOP/s and the control's, each on its own "
            "axis; then a zoom on each step.",
            "",
            *[f"![{p}]({p})" for p in plots],
            "",
        ]
    lines.append(f"Raw trials, every repetition: [{csv_name}]({csv_name}).")
    if data.reproduce:
        lines += ["", "## Reproduce", "", "```sh", *data.reproduce, "```"]
    return lines


def render(data: ReportData, plots: Sequence[str] = (), csv_name: str = "trials.csv") -> str:
    unsure = unsure_section(data)
    sections = [
        title(data),
        summary_lines(data),
        header(data),
        steps_section(data) + (["", *unsure] if unsure else []),
        hunks_section(data),
        fixes_section(data),
        why.sections(data),
        commits_section(data),
        calls_section(data),
        wrong_section(data),
        skipped_section(data),
        files_section(data, plots, csv_name),
    ]
    lines: list[str] = []
    for section in sections:
        while section and section[-1] == "":
            section = section[:-1]
        if section:
            lines += [*([""] if lines else []), *section]
    return "\n".join(lines) + "\n"

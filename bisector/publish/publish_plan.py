"""What a run wants to say on GitHub, as frozen data: the pipeline writes it, `publish` reads it.

A plan holds no token and no config: it is safe to write next to a report and to read back later
(`bisector publish --plan PLAN.json`). Every problem in a plan file is a BadInput naming the key.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bisector.errors import BadInput
from bisector.jsonfile import read_json

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class RunVerdict(enum.Enum):
    """The overall answer of a run. INCOMPLETE is never shown as "no change"."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no_change"
    INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class PlotLink:
    label: str
    url: str


@dataclass(frozen=True)
class CulpritPost:
    """One culprit PR and the evidence posted on it."""

    pr: int
    step_summary: str  # markdown: the step, its size, the commit
    table: str  # markdown table of the measurements around the step
    plots: tuple[PlotLink, ...] = ()
    patch: str | None = None  # unified diff (git format) of the verified fix, if any
    restore: str = ""  # e.g. "restores S=180,180 to 1286.1 TFLOP/s (-0.2% vs the pre-step baseline)"
    patch_base: str | None = None  # commit the patch applies to (the draft PR's branch point)
    commit: str = ""  # culprit commit SHA, for the draft PR's title
    hunk: str = ""  # which of the commit's hunks carry the step (a line)
    hunk_diff: str = ""  # those hunks as a diff on the parent
    kernel: str = ""  # markdown: what changed in the compiled kernels across the step (posted folded)
    kind: str = "regression"  # "regression" | "improvement": the step as a whole (model.regression)
    verified: bool = True  # held against its parent in fresh trials
    cause: str = ""  # one line: why the step happened, where the run says (the compiled kernel's lead fact)
    todo: str = ""  # one paragraph: what to do about this PR, from the reverts measured on the tip
    combined_patch: str | None = None  # a revert that applies together with other PRs' reverts, as one diff
    nearby: tuple[str, ...] = ()  # missing data that could hide or move this step (its neighbours), one line each


@dataclass(frozen=True)
class PublishPlan:
    run_id: str
    repo: str  # owner/name of the upstream
    verdict: RunVerdict
    report: str  # the full report markdown
    culprits: tuple[CulpritPost, ...] = ()
    requester_pr: int | None = None  # the PR whose comment asked for the run
    head_sha: str | None = None  # the commit the status is posted on
    base_branch: str = "main"  # the draft PR's target branch
    missing: tuple[str, ...] = ()  # what data is missing, one line each
    report_url: str | None = None  # where the full report lives, for the status link
    # A finished answer for the requester PR (a /perf table, or why a command failed), posted there
    # in place of the generated summary: what the measuring side wants said, as data.
    answer: str = ""
    # The report's action summary (bisector/report/action_summary.py): the requester's answer opens with it.
    summary: str = ""
    # The code measured was not the upstream's own (a fork PR's head, a PR head not yet merged): it ran in
    # the same process as the timer and could have written its own numbers. Its results are labelled, set
    # no commit status and propose no patch (bisector/publish/messages.py, actions.py).
    untrusted: bool = False
    # Verified regressions and improvements of the run, counted apart (steps without a PR included).
    regressions: int = 0
    improvements: int = 0

    def __post_init__(self) -> None:
        if not _RUN_ID.fullmatch(self.run_id):
            raise BadInput(
                f"plan: run_id: must match {_RUN_ID.pattern} (it goes into a hidden marker), got {self.run_id!r}"
            )
        if self.repo.count("/") != 1 or not all(self.repo.split("/")):
            raise BadInput(f"plan: repo: must be 'owner/name', got {self.repo!r}")

    @property
    def complete(self) -> bool:
        return not self.missing and self.verdict is not RunVerdict.INCOMPLETE


def plan_to_dict(plan: PublishPlan) -> dict[str, Any]:
    """JSON-ready: enums as values, tuples as lists."""
    data = asdict(plan)
    data["verdict"] = plan.verdict.value
    plain: dict[str, Any] = json.loads(json.dumps(data))
    return plain


def dump_plan(plan: PublishPlan, path: Path) -> None:
    path.write_text(json.dumps(plan_to_dict(plan), indent=2) + "\n")


def load_plan(path: Path) -> PublishPlan:
    data = read_json(path)
    return plan_from_dict(data, str(path))


class _Reader:
    """Typed access to one JSON object, naming `file: key` in every error."""

    def __init__(self, data: Any, where: str, prefix: str, known: tuple[str, ...]) -> None:
        self.where, self.prefix = where, prefix
        if not isinstance(data, Mapping):
            raise BadInput(f"{where}: {prefix or 'plan'}: must be an object")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise BadInput(f"{where}: {self.name(unknown[0])}: unknown key (known: {', '.join(known)})")
        self.data = data

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data or (self.data[key] is None and default is None):
            if default is ...:
                raise BadInput(f"{self.where}: {self.name(key)}: missing")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise BadInput(f"{self.where}: {self.name(key)}: must be {names}, got {shown}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key, list, [])
        if not all(isinstance(v, str) for v in value):
            raise BadInput(f"{self.where}: {self.name(key)}: must be a list of strings")
        return tuple(value)


_PLAN_KEYS = tuple(PublishPlan.__dataclass_fields__)
_CULPRIT_KEYS = tuple(CulpritPost.__dataclass_fields__)


def plan_from_dict(data: Any, where: str = "plan") -> PublishPlan:
    top = _Reader(data, where, "", _PLAN_KEYS)
    repo = top.get("repo", str)
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise BadInput(f"{where}: repo: must be 'owner/name', got {repo!r}")
    run_id = top.get("run_id", str)
    if not _RUN_ID.fullmatch(run_id):
        raise BadInput(f"{where}: run_id: must match {_RUN_ID.pattern}, got {run_id!r}")
    raw_verdict = top.get("verdict", str)
    try:
        verdict = RunVerdict(raw_verdict)
    except ValueError:
        choices = ", ".join(v.value for v in RunVerdict)
        raise BadInput(f"{where}: verdict: must be one of {choices}, got {raw_verdict!r}") from None
    culprits = [_culprit(raw, where, i) for i, raw in enumerate(top.get("culprits", list, []))]
    requester = top.get("requester_pr", int, None)
    if requester is not None:
        requester = _positive(top, "requester_pr")
    return PublishPlan(
        run_id=run_id,
        repo=repo,
        verdict=verdict,
        report=top.get("report", str, ""),
        culprits=tuple(culprits),
        requester_pr=requester,
        head_sha=top.get("head_sha", str, None),
        base_branch=top.get("base_branch", str, "main"),
        missing=top.strings("missing"),
        report_url=top.get("report_url", str, None),
        answer=top.get("answer", str, ""),
        summary=top.get("summary", str, ""),
        untrusted=top.get("untrusted", bool, False),
        regressions=_count(top, "regressions"),
        improvements=_count(top, "improvements"),
    )


def _culprit(raw: Any, where: str, i: int) -> CulpritPost:
    """The plan's culprit `i`: what its comment says, its plots' links and its patch."""
    c = _Reader(raw, where, f"culprits[{i}]", _CULPRIT_KEYS)
    plots = []
    for j, p in enumerate(c.get("plots", list, [])):
        link = _Reader(p, where, f"culprits[{i}].plots[{j}]", ("label", "url"))
        plots.append(PlotLink(label=link.get("label", str), url=link.get("url", str)))
    return CulpritPost(
        pr=_positive(c, "pr"),
        step_summary=c.get("step_summary", str),
        table=c.get("table", str, ""),
        plots=tuple(plots),
        patch=c.get("patch", str, None),
        restore=c.get("restore", str, ""),
        patch_base=c.get("patch_base", str, None),
        commit=c.get("commit", str, ""),
        hunk=c.get("hunk", str, ""),
        hunk_diff=c.get("hunk_diff", str, ""),
        kernel=c.get("kernel", str, ""),
        kind=_kind(c),
        verified=c.get("verified", bool, True),
        cause=c.get("cause", str, ""),
        todo=c.get("todo", str, ""),
        combined_patch=c.get("combined_patch", str, None),
        nearby=c.strings("nearby"),
    )


KINDS = ("regression", "improvement")


def _kind(r: _Reader) -> str:
    kind: str = r.get("kind", str, "regression")
    if kind not in KINDS:
        raise BadInput(f"{r.where}: {r.name('kind')}: must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def _count(r: _Reader, key: str) -> int:
    value: int = r.get(key, int, 0)
    if value < 0:
        raise BadInput(f"{r.where}: {r.name(key)}: must be 0 or more, got {value}")
    return value


def _positive(r: _Reader, key: str) -> int:
    value: int = r.get(key, int)
    if value <= 0:
        raise BadInput(f"{r.where}: {r.name(key)}: must be a positive PR number, got {value}")
    return value


__all__ = [
    "CulpritPost",
    "PlotLink",
    "PublishPlan",
    "RunVerdict",
    "dump_plan",
    "load_plan",
    "plan_from_dict",
    "plan_to_dict",
]

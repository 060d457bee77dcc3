"""What a plan's text may say on GitHub: the bot's renderings, nothing that reaches beyond its thread.

A plan's texts hold what the upstream wrote (commit subjects, kernel names, tracebacks), and a plan
file is written beside code under test, which may forge one. Posted by a token with issues,
pull-requests and statuses write, such text could ping anyone (`@name`, `@org/team`), write into
other repositories' threads (`owner/name#12`, a link to another repository's issue: GitHub adds a
"mentioned this" there), carry links or images to any host, hide text or another run's marker in an
HTML comment, or impersonate the bot's answer. So:

- the bot's own plans are `rendered()` once they are final (bisector/triggers/plan_file.py): each
  of those spots gets a zero-width space (U+200B) where GitHub would act (after `@`, after the `#` of
  another repository's reference, inside a foreign `https://`, after `<` of any HTML but the few
  tags the bot writes), which reads the same and does nothing;
- `problems()` finds what `rendered()` removes, plus what the bot never writes: text over a field's
  size, a multi-line one-line field, a table that is not only table rows, an answer that is none of
  the bot's answers, a link or status URL outside the repository, a malformed SHA or branch.
  `publish`, holding a plan to what a trusted job authorized, refuses a plan with any of them
  (bisector/publish/expectation.py): nothing is posted.

The diffs (a verified patch, a hunk) are exempt from the text rules: they are posted inside a code
fence longer than any backtick run in them, where GitHub links and pings nothing, and a patch must
stay byte-exact for its draft PR.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace

from bisector.publish.publish_plan import CulpritPost, PlotLink, PublishPlan

ZWSP = "\u200b"
# The tags the bot's markdown writes (bisector/publish/messages.py, the report), bare: no attributes.
TAGS = ("details", "summary", "sub", "sup", "b", "i", "br", "code", "kbd")
LIMITS = {
    "answer": 16_000,
    "summary": 16_000,
    "report": 4_000_000,
    "step_summary": 2_000,
    "table": 64_000,
    "hunk": 2_000,
    "kernel": 200_000,
    "restore": 4_000,
    "missing": 1_000,
    "label": 200,
    "url": 2_000,
    "hunk_diff": 2_000_000,
    "patch": 4_000_000,
    "cause": 1_000,
    "todo": 4_000,
    "nearby": 1_000,
}
MAX_MISSING, MAX_CULPRITS = 200, 100
ONE_LINE = ("step_summary", "hunk", "restore", "missing", "label", "cause", "todo", "nearby")
ANSWER_HEADS = (
    "### bisector `/perf`: ",
    "`/perf` failed: ",
    "`/bisect` failed: ",
    "`/perf` refused: ",
    "`/bisect` refused: ",
)
SUMMARY_HEAD = "**What to do**"
_SHA = re.compile(r"[0-9a-f]{7,64}")
_BRANCH = re.compile(r"(?!.*\.\.)(?!/)[A-Za-z0-9._/-]{1,200}(?<![/.])")

_MENTION = re.compile(r"(?<![A-Za-z0-9_])@(?=[A-Za-z0-9])")
_CROSSREF = re.compile(r"(?<![\w/.-])([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})([#@])(?=[0-9a-fA-F])")
_URL = re.compile(r"(?i)(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*(?=:/{2})")  # the scheme of any scheme://
_WWW = re.compile(r"(?i)(?<![\w.-])www(?=\.)")
_LINK_PATH = re.compile(r"\]\(\s*<?(?=/)")  # a markdown link to an absolute path: another repo's page
_ENTITY = re.compile(r"&(?=#\d+;|#[xX][0-9a-fA-F]+;|[A-Za-z][A-Za-z0-9]*;)")  # &#64; renders as @
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_ALLOWED_TAG = re.compile(r"</?(?:{})\s*/?>".format("|".join(TAGS)), re.IGNORECASE)
_URL_END = re.compile(r"[\s<>()\[\]\"'`]")


def web_base(api_url: str) -> str:
    """Where the repository's pages live, from the API base (github.com, or an Enterprise host)."""
    api = api_url.rstrip("/")
    if api == "https://api.github.com":
        return "https://github.com"
    return api[: -len("/api/v3")] if api.endswith("/api/v3") else api


class _Spots:
    """Where a text would make GitHub act beyond its thread, found by one set of rules for both
    the check and the neutralization (so `rendered` text always passes `problems`)."""

    def __init__(self, repo: str, web: str) -> None:
        self.repo, self.own = repo.lower(), f"{web.rstrip('/')}/{repo}".lower()

    def find(self, text: str) -> Iterator[tuple[int, str]]:
        """(offset where a zero-width space defuses it, what it is), in text order."""
        for m in _MENTION.finditer(text):
            yield m.end(), f"an @-mention ({_shown(text, m.start())})"
        for m in _CROSSREF.finditer(text):
            if f"{m.group(1)}/{m.group(2)}".lower() != self.repo:
                yield m.end(), f"a reference into another repository ({_shown(text, m.start())})"
        for m in _URL.finditer(text):
            if not self._own_url(text, m.start()):
                yield m.end(), f"a link outside {self.repo} ({_shown(text, m.start())})"
        for m in _WWW.finditer(text):
            yield m.end(), f"a link outside {self.repo} ({_shown(text, m.start())})"
        for m in _LINK_PATH.finditer(text):
            yield m.end(), f"a link to an absolute path ({_shown(text, m.start())})"
        for m in _ENTITY.finditer(text):
            yield m.end(), f"an HTML entity ({_shown(text, m.start())})"
        for m in _TAG.finditer(text):
            if not _ALLOWED_TAG.match(text, m.start()):
                yield m.end(), f"HTML the bot does not write ({_shown(text, m.start())})"

    def _own_url(self, text: str, start: int) -> bool:
        end = _URL_END.search(text, start)
        url = text[start : end.start() if end else len(text)].lower()
        return (
            (url == self.own or url.startswith(self.own + "/"))
            and ".." not in url
            and "%2e" not in url
            and "\\" not in url
        )


def _shown(text: str, at: int) -> str:
    word = re.match(r"\S{1,40}", text[at:])
    return repr(word.group(0) if word else text[at : at + 1])


def neutral(text: str, spots: _Spots) -> str:
    """`text` with a zero-width space at every spot (applied until none is left)."""
    for _ in range(4):
        found = sorted({at for at, _ in spots.find(text)}, reverse=True)
        if not found:
            return text
        for at in found:
            text = text[:at] + ZWSP + text[at:]
    return text


def rendered(plan: PublishPlan, web: str) -> PublishPlan:
    """The plan as the bot posts it: every text field neutral (see the module's docstring)."""
    spots = _Spots(plan.repo, web)
    n: Callable[[str], str] = lambda text: neutral(text, spots)  # noqa: E731
    culprits = tuple(
        replace(
            c,
            step_summary=n(c.step_summary),
            table=n(c.table),
            restore=n(c.restore),
            hunk=n(c.hunk),
            kernel=n(c.kernel),
            cause=n(c.cause),
            todo=n(c.todo),
            nearby=tuple(n(line) for line in c.nearby),
            plots=tuple(PlotLink(n(p.label), p.url) for p in c.plots),
        )
        for c in plan.culprits
    )
    return replace(
        plan,
        report=n(plan.report),
        answer=n(plan.answer),
        summary=n(plan.summary),
        missing=tuple(n(m) for m in plan.missing),
        culprits=culprits,
    )


def problems(plan: PublishPlan, web: str) -> list[str]:
    """`field: problem` for everything in the plan the bot's rendering would not hold; [] when none."""
    spots = _Spots(plan.repo, web)
    out: list[str] = []

    def text(field: str, value: str, kind: str) -> None:
        if len(value) > LIMITS[kind]:
            out.append(f"{field}: {len(value)} characters, over the {LIMITS[kind]} the bot writes")
        if kind in ONE_LINE and "\n" in value.strip():
            out.append(f"{field}: more than one line")
        if kind not in ("patch", "hunk_diff"):  # a combined patch is a "patch"
            out.extend([f"{field}: {what}" for _, what in spots.find(value)][:1])

    def url(field: str, value: str) -> None:
        if len(value) > LIMITS["url"] or not spots._own_url(value, 0) or any(c.isspace() for c in value):
            out.append(f"{field}: {value[:80]!r} is not a page of {plan.repo}")

    text("answer", plan.answer, "answer")
    if plan.answer.strip() and not plan.answer.lstrip().startswith(ANSWER_HEADS):
        out.append(f"answer: not one of the bot's answers (it opens with {plan.answer.strip()[:40]!r})")
    text("summary", plan.summary, "summary")
    if plan.summary.strip() and not plan.summary.lstrip().startswith(SUMMARY_HEAD):
        out.append(f"summary: not the bot's action summary (it opens with {plan.summary.strip()[:40]!r})")
    text("report", plan.report, "report")
    if len(plan.missing) > MAX_MISSING:
        out.append(f"missing: {len(plan.missing)} lines, over {MAX_MISSING}")
    for i, line in enumerate(plan.missing):
        text(f"missing[{i}]", line, "missing")
    if plan.report_url is not None:
        url("report_url", plan.report_url)
    if plan.head_sha is not None and not _SHA.fullmatch(plan.head_sha):
        out.append(f"head_sha: not a commit SHA: {plan.head_sha[:80]!r}")
    if not _BRANCH.fullmatch(plan.base_branch):
        out.append(f"base_branch: not a branch name: {plan.base_branch[:80]!r}")
    if len(plan.culprits) > MAX_CULPRITS:
        out.append(f"culprits: {len(plan.culprits)}, over {MAX_CULPRITS}")
    for i, c in enumerate(plan.culprits):
        out += _culprit(f"culprits[{i}]", c, text, url)
    return out


def _culprit(
    where: str, c: CulpritPost, text: Callable[[str, str, str], None], url: Callable[[str, str], None]
) -> list[str]:
    out: list[str] = []
    for kind in ("step_summary", "table", "restore", "hunk", "kernel", "hunk_diff", "cause", "todo"):
        text(f"{where}.{kind}", getattr(c, kind), kind)
    if c.patch is not None:
        text(f"{where}.patch", c.patch, "patch")
    if c.combined_patch is not None:
        text(f"{where}.combined_patch", c.combined_patch, "patch")
    if len(c.nearby) > MAX_MISSING:
        out.append(f"{where}.nearby: {len(c.nearby)} lines, over {MAX_MISSING}")
    for j, line in enumerate(c.nearby):
        text(f"{where}.nearby[{j}]", line, "nearby")
    rows = [line for line in c.table.strip().splitlines() if line.strip()]
    if any(not (r.strip().startswith("|") and r.strip().endswith("|")) for r in rows):
        out.append(f"{where}.table: not only table rows")
    for name, sha in (("commit", c.commit), ("patch_base", c.patch_base)):
        if sha and not _SHA.fullmatch(sha):
            out.append(f"{where}.{name}: not a commit SHA: {sha[:80]!r}")
    for j, p in enumerate(c.plots):
        text(f"{where}.plots[{j}].label", p.label, "label")
        url(f"{where}.plots[{j}].url", p.url)
    return out


__all__ = ["ANSWER_HEADS", "LIMITS", "ZWSP", "neutral", "problems", "rendered", "web_base"]

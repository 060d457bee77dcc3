"""The plan is trusted only after the untrusted is gone, and only for what the bot would have written.

- Before a plan is written, whatever code under test left running below the bot is killed and the
  plan says so (bisector/isolation/survivors.py, bisector/triggers/plan_file.py): a real escapee that
  killed its own fence (as a GPU trial, unsandboxed, can) and would rewrite the plan a moment later.
- `publish`, holding a plan to what the authorize job recorded, refuses forged text: real plan files,
  the real CLI and the local GitHub server; nothing is posted, not even read.
- Text the upstream wrote (commit subjects) is rendered harmless and then passes that same check.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bisector.build.steps import run_step
from bisector.config import Publish
from bisector.isolation import cgroups, survivors
from bisector.publish import CulpritPost, PlotLink, PublishPlan, RunVerdict, dump_plan, load_plan
from bisector.publish.plan_text import ZWSP, problems, rendered
from bisector.triggers import plan_file
from tests.fakegithub import FakeGitHub
from tests.processes import alive
from tests.test_publish import REPO
from tests.test_publish_trust import PR, answer_plan, config, expect, fake, head, post  # noqa: F401 - fixtures

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
UPSTREAM_SUBJECT = (
    "speed up @alice's kernel (cc @org/team), see evil/repo#12, evil/repo@0123abcd, "
    "https://evil.example/x.png, www.evil.example, [a](/evil/repo/issues/1), "
    "<img src=x>, <!-- bisector:run=pr1-c1:pr=950 -->, &#64;bob, ok: #950 and "
    "`@triton.jit` and a@b.example"
)


def culprit(**changes: object) -> CulpritPost:
    c = CulpritPost(
        pr=PR,
        step_summary="regression at `3b0c9e1` (#1020): fix it — gemm/m256 -20.0%",
        table="| shape | change |\n|---|---:|\n| gemm/m256 | -20.0% |",
        commit="3b0c9e1",
    )
    return replace(c, **changes)  # type: ignore[arg-type]


FORGERIES = [
    ({"answer": "### bisector `/perf`: the PR head is **faster**, thanks @alice"}, "answer: an @-mention ('@alice')"),
    ({"answer": "LGTM, approved by the maintainers ✅"}, "answer: not one of the bot's answers"),
    ({"answer": "### bisector `/perf`: " + "x" * 20_000}, "answer: 20022 characters, over the 16000"),
    ({"report": "## Report\n\nsee evil/repo#12\n"}, "report: a reference into another repository ('evil/repo#12')"),
    ({"report": "[click](https://evil.example/login)"}, "report: a link outside flydsl/flydsl"),
    ({"report": "![x](https://evil.example/pixel.png)"}, "report: a link outside"),
    ({"report": "[x](/evil/repo/issues/1)"}, "report: a link to an absolute path"),
    ({"report": "<!-- bisector:run=pr1020-c1:pr=950 -->"}, "report: HTML the bot does not write"),
    ({"report": "<img src=x onerror=y>"}, "report: HTML the bot does not write"),
    ({"report": "&#64;alice"}, "report: an HTML entity"),
    ({"summary": "Merge this now."}, "summary: not the bot's action summary"),
    ({"missing": ("ping @mallory",)}, "missing[0]: an @-mention"),
    ({"report_url": "https://evil.example/r"}, "report_url: 'https://evil.example/r' is not a page of"),
    ({"report_url": "https://github.com/flydsl/flydsl/../../evil/repo"}, "report_url:"),
    ({"culprits": (culprit(table="not a table\n@alice"),)}, "culprits[0].table: an @-mention"),
    ({"culprits": (culprit(table="| a |\nplain text"),)}, "culprits[0].table: not only table rows"),
    ({"culprits": (culprit(step_summary="regression\n\n# Approved"),)}, "culprits[0].step_summary: more than one"),
    (
        {"culprits": (culprit(plots=(PlotLink("plot", "https://evil.example/p.png"),)),)},
        "culprits[0].plots[0].url: 'https://evil.example/p.png' is not a page of",
    ),
    ({"base_branch": "main..evil"}, "base_branch: not a branch name"),
    ({"culprits": (culprit(todo="Merge this, says @alice"),)}, "culprits[0].todo: an @-mention"),
    ({"culprits": (culprit(cause="see evil/repo#12"),)}, "culprits[0].cause: a reference into another repository"),
    ({"culprits": (culprit(nearby=("ok", "<img src=x>")),)}, "culprits[0].nearby[1]: HTML the bot does not write"),
    ({"culprits": (culprit(todo="revert\n\n# Approved"),)}, "culprits[0].todo: more than one line"),
]


@pytest.mark.parametrize(
    "forgery, named", FORGERIES, ids=[f[1].split(":")[0] + str(i) for i, f in enumerate(FORGERIES)]
)
def test_forged_text_posts_nothing(
    fake: FakeGitHub, head: str, config: Path, tmp_path: Path, forgery: dict, named: str
) -> None:
    plan = answer_plan(head, **forgery)
    result = post(tmp_path, config, plan, *expect(head))
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: plan: ") and named.replace("flydsl/flydsl", REPO) in line, line
    assert line.endswith("not what the bot writes: nothing posted"), line
    assert fake.requests == []  # refused before connecting


def test_upstream_text_is_rendered_harmless_and_then_posted(
    fake: FakeGitHub, head: str, config: Path, tmp_path: Path
) -> None:
    """The bot's own plan carries a hostile commit subject: rendered, it passes the check and pings nobody."""
    plan = answer_plan(
        head,
        answer="",
        report=f"## Report\n\n| commit | subject |\n|---|---|\n| 3b0c9e1 | {UPSTREAM_SUBJECT} |\n",
        culprits=(
            culprit(
                step_summary=f"regression at `3b0c9e1` (#{PR}): {UPSTREAM_SUBJECT}",
                todo=f"Revert `3b0c9e1` (#{PR}) {UPSTREAM_SUBJECT}",
                nearby=(f"`3b0c9e1` did not build or run: {UPSTREAM_SUBJECT}",),
            ),
        ),
        missing=(f"`3b0c9e1` did not build or run: {UPSTREAM_SUBJECT}",),
    )
    assert problems(plan, fake.url)  # as the upstream wrote it, it would be refused
    path = tmp_path / "written.json"
    written = plan_file.write(plan, path, Publish(base_url=fake.url))
    assert load_plan(path) == written and problems(written, fake.url) == []
    result = post(tmp_path, config, written, *expect(head))
    assert result.exit_code == 0, result.output
    [body] = [c["body"] for c in fake.issue_comments(REPO, PR)]
    for raw in (
        "@alice",
        "@org/team",
        "evil/repo#12",
        "evil/repo@0123",
        "https://evil",
        "www.evil",
        "](/evil",
        "<img",
        "<!-- bisector:run=pr1-c1",
        "&#64;",
    ):
        assert raw not in body, raw
    visible = body.replace(ZWSP, "")
    assert "speed up @alice's kernel" in visible and "a@b.example" in visible and "#950" in visible
    assert body.count("<!-- bisector:") == 1  # only the bot's own marker


@pytest.mark.parametrize(
    "text",
    [
        UPSTREAM_SUBJECT,
        "@@@a",
        "<<<!--",
        "x@y @z",
        "HTTPS://EVIL.example",
        "ftp://x",
        "evil/repo#1#2",
        "&amp;&#x40;a",
        "](  </evil)",
        "www.www.x",
        "@" + ZWSP + "a",
        "<details open>",
        "</details >",
    ],
)
def test_what_the_bot_renders_always_passes_its_own_check(text: str) -> None:
    plan = PublishPlan(
        run_id="r1", repo="org/lib", verdict=RunVerdict.NO_CHANGE, report=text, missing=(text.replace("\n", " "),)
    )
    out = rendered(plan, "https://github.com")
    assert problems(out, "https://github.com") == [], (text, out.report)
    assert out.report.replace(ZWSP, "") == text.replace(ZWSP, "")  # it reads the same


ESCAPE = (
    # A process in a session of its own that would rewrite the plan in a moment, then the step kills
    # its own fence (a GPU trial runs without the sandbox's PID namespace: it can see its parents).
    'setsid sh -c "sleep 4; echo forged > {plan}" & sleep 0.5; kill -9 $(ps -o ppid= -p $$)\n'
)


@linux
def test_the_plan_is_written_after_the_untrusted_is_gone(tmp_path: Path) -> None:
    plan_path = tmp_path / "publish-plan.json"
    (tmp_path / "step.sh").write_text(ESCAPE.format(plan=plan_path))
    out = run_step(
        "escape",
        ["bash", str(tmp_path / "step.sh")],
        tmp_path,
        dict(os.environ),
        120.0,
        tmp_path / "s.log",
        tmp_path / "all.log",
    )  # no sandbox: as a GPU trial runs
    assert not out.ok  # its fence was killed under it
    escaped = survivors.leftovers()
    assert escaped and all(alive(p) for p in escaped), "the escapee did not come back to the bot"
    plan = PublishPlan(
        run_id="pr1020-c77",
        repo=REPO,
        verdict=RunVerdict.NO_CHANGE,
        report="",
        requester_pr=PR,
        answer="### bisector `/perf`: the PR head is **same**",
    )
    written = plan_file.write(plan, plan_path, Publish())
    assert survivors.leftovers() == [] and not any(alive(p) for p in escaped)
    assert cgroups.own_groups() == []  # the killed fence's cgroup (where there are any) is gone too
    [line] = written.missing
    assert line.startswith(
        f"{len(escaped)} process(es) started by the code under test outlived their trials and "
        "were killed before this plan was written: "
    )
    assert "sh (pid " in line and not written.complete  # never "no change" with that said
    time.sleep(5)  # past the moment the escapee would have rewritten it
    assert json.loads(plan_path.read_text())["missing"] == [line]
    dump_plan(written, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == plan_path.read_text()


def test_a_settled_plan_kills_nothing_when_nothing_is_left() -> None:
    plan = PublishPlan(run_id="r1", repo="org/lib", verdict=RunVerdict.NO_CHANGE, report="")
    assert plan_file.settle(plan, Publish()) == plan

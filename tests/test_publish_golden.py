"""Each kind of PR comment against golden output, the way Apache Otava tests its Slack messages.

The CPU demo's comments are rendered from a committed store (tests/fixtures/cpu-demo.sqlite.gz, a
`bisector demo --device cpu` run): the demo repository written again (its SHAs are reproducible),
the run replayed offline from the store (the search, the verification, the hunks, the reverts and
their combinations, as measured), the plan built and the comments posted with PyGithub to the local
GitHub server. Its six PRs give a regression whose revert restores the tip (#131), an improvement
(#108), a regression whose revert overlaps another's (#115), and one whose revert does not apply
alone but applies together with another (#122). A latency step and a wrong-result window next to a
step come from tests/report_fixtures.py's synthetic data, as do the results measured on untrusted code.

After an intended change of wording: `BISECTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_publish_golden.py`,
then read the diff.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from bisector import pipeline
from bisector.config import Publish
from bisector.demo import write_demo_repo
from bisector.demo.demo_config import demo_config
from bisector.publish import RunVerdict, messages, publish
from bisector.publish.publish_plan import PublishPlan
from bisector.search.wrong_results import WrongResult
from bisector.triggers import outcome_plan
from tests.fakegithub import FakeGitHub
from tests.report_fixtures import series, sha
from tests.test_publish import ENV, FAST

GOLDEN = Path(__file__).parent / "golden"
STORE = Path(__file__).parent / "fixtures" / "cpu-demo.sqlite.gz"
REPO = "demo/demolib"
RUN_ID = "run-cpu-demo-a0e9ecf-eef6c3f"
SCREEN = 20  # lines a reader sees before scrolling: this PR's step and what to do about it


def matches_golden(name: str, text: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{name} differs from its golden file"


@pytest.fixture(scope="module")
def demo_plan(tmp_path_factory: pytest.TempPathFactory) -> PublishPlan:
    """The CPU demo's plan, replayed offline from the committed store."""
    tmp = tmp_path_factory.mktemp("demo")
    manifest = write_demo_repo(tmp / "upstream")  # the campaign key is the checkout's directory name
    store = tmp / "results.sqlite"
    with gzip.open(STORE) as src, open(store, "wb") as dst:
        shutil.copyfileobj(src, dst)
    config = demo_config("cpu", tmp / "upstream")
    options = pipeline.RunOptions(
        good=manifest.good,
        bad=manifest.bad,
        store=str(store),
        work_dir=str(tmp / "work"),
        report_dir=str(tmp / "report"),
        offline=True,
    )
    outcome = pipeline.bisect(config, options)
    plan = outcome_plan.from_outcome(config, outcome, RUN_ID, repo=REPO)
    assert plan is not None
    return plan


def body(plan: PublishPlan, pr: int) -> str:
    return messages.culprit_body(plan, next(c for c in plan.culprits if c.pr == pr))


def first_screen(text: str) -> str:
    return "\n".join(text.splitlines()[:SCREEN])


@pytest.mark.parametrize(
    "kind, pr", [("regression", 131), ("improvement", 108), ("interacts", 115), ("no_revert", 122)]
)
def test_demo_comments_match_golden(demo_plan: PublishPlan, kind: str, pr: int) -> None:
    matches_golden(f"publish_pr_{kind}.md", body(demo_plan, pr))


def test_each_comment_opens_with_its_own_step_and_what_to_do(demo_plan: PublishPlan) -> None:
    """The first screen names this PR's step and what to do about it; another PR's step appears there
    only where this PR's revert is measured with it (an interaction, a combined revert)."""
    prs = {c.pr for c in demo_plan.culprits}
    assert prs == {108, 115, 122, 131, 145, 155}
    for c in demo_plan.culprits:
        screen = first_screen(body(demo_plan, c.pr))
        assert f"(#{c.pr})" in screen and "**What to do**" in screen, c.pr
        assert "Run verdict" not in screen and "largest gain first" not in screen  # not the run's list
        others = set(map(int, re.findall(r"#(\d+)", screen))) - {c.pr}
        todo = next(line for line in screen.splitlines() if line.startswith("**What to do**"))
        assert others <= set(map(int, re.findall(r"#(\d+)", todo))), (c.pr, others)  # only in what to do
        assert "gave wrong results" not in screen  # the unrelated window is counted further down
    assert "#115" in first_screen(body(demo_plan, 155))  # the overlap, said as what it means for #155's revert


def test_the_improvement_is_thanked_and_never_called_a_regression(demo_plan: PublishPlan) -> None:
    text = body(demo_plan, 108)
    assert "thank you" in text.splitlines()[1]
    own = text.split("<details><summary>This run's other steps")[0]
    assert "regression" not in own.lower() and "revert" not in own.lower()
    status = messages.status_description(demo_plan)
    assert status.startswith("5 regressions (#115, #122, #131, #145, #155), 1 improvement (#108)"), status
    assert messages.status_state(demo_plan) == "failure"


def test_a_revert_that_applies_only_with_another_is_offered_combined(demo_plan: PublishPlan) -> None:
    [c] = [c for c in demo_plan.culprits if c.pr == 122]
    assert c.patch is None and c.combined_patch  # its own revert conflicts on the tip
    assert "Together with the revert of #155" in c.todo and "a fix by hand restores about" in c.todo
    # the combined revert is a real patch on the tip, both reverts as the interactions stage built them:
    # #155's window argument gone, #122's fastmath default back to the caller's True
    assert c.combined_patch.startswith("diff --git a/demolib/cpu_fa.py")
    assert (
        "-               sm_scale: float | None = None, window: int | None = None) -> torch.Tensor:" in c.combined_patch
    )
    assert "+    return _run(q, k, v, sm_scale, fastmath=True)" in c.combined_patch


def test_missing_data_only_where_it_could_move_this_step(demo_plan: PublishPlan) -> None:
    """The demo's wrong-result window (gemm, #136..#151) and its commit that does not import are far from
    every step: counted in each comment, listed in none."""
    assert len(demo_plan.missing) == 9
    for c in demo_plan.culprits:
        text = body(demo_plan, c.pr)
        assert c.nearby == () and "gave wrong results" not in text and "did not build" not in text
        assert "Elsewhere in the range: 9 more items of missing data" in text


def test_posted_with_pygithub_to_the_local_server(demo_plan: PublishPlan) -> None:
    with FakeGitHub() as fake:
        head = fake.add_repo(REPO, {"README.md": "demo\n"})
        for c in demo_plan.culprits:
            fake.add_pull(REPO, c.pr, head_sha=head, title=f"PR {c.pr}")
        plan = replace(demo_plan, head_sha=head)
        out = publish(plan, Publish(repo=REPO, token_env="BISECTOR_GH", base_url=fake.url), ENV, policy=FAST)
        assert sorted(c.issue for c in out.comments) == [108, 115, 122, 131, 145, 155]
        [posted] = fake.issue_comments(REPO, 108)
        assert posted["body"] == (GOLDEN / "publish_pr_improvement.md").read_text()
        [status] = fake.repos[REPO].statuses
        assert status["state"] == "failure" and "1 improvement (#108)" in status["description"]


# ---- kinds the demo does not have: synthetic ReportData (tests/report_fixtures.py) -----------------


def synthetic_plan(data, untrusted: bool = False) -> PublishPlan:
    return outcome_plan.build(data, "synthetic-run", REPO, "# bisector: synthetic\n\nthe report\n", untrusted=untrusted)


def latency_data():
    """A step decided on call latency (the H200 demo's dispatch plant, #166's kind)."""
    return series(12, [0, 3, 5, 6, 7, 9, 12], {6: -36.9}, ("gemm/decode",), metric="latency_ratio")


def wrong_nearby_data():
    """A step whose culprit's neighbour gave wrong results on the step's shape, and an unrelated
    commit that did not import far away."""
    data = series(
        20, [0, 4, 7, 8, 9, 12, 20], {8: -30.0}, ("fa/s1024", "gemm/tall"), skipped=[16], wrong={9: ("fa/s1024",)}
    )
    return replace(data, wrong=(*data.wrong, WrongResult(sha(18), "gemm/tall", 0.5, 1.5)))


def test_a_latency_step_says_what_it_was_decided_on() -> None:
    plan = synthetic_plan(latency_data())
    [c] = plan.culprits
    text = messages.culprit_body(plan, c)
    matches_golden("publish_pr_latency.md", text)
    assert "| gemm/decode | -36.9% |" in text and "| latency ratio |" in first_screen(text)


def test_a_wrong_result_window_next_to_the_step_is_listed() -> None:
    plan = synthetic_plan(wrong_nearby_data())
    [c] = plan.culprits
    text = messages.culprit_body(plan, c)
    matches_golden("publish_pr_wrong_nearby.md", text)
    assert c.nearby == (f"`{sha(9)[:7]}` (#1009) gave wrong results on fa/s1024",)
    assert "did not build or run" not in text and sha(18)[:7] not in text  # not next to it: counted only
    assert "Elsewhere in the range: 2 more items of missing data" in text


# ---- results measured on untrusted code (#57 item 8) ------------------------------------------------

FORGED_ANSWER = (
    "### bisector `/perf`: the PR head is **faster**\n\nPR head `0123456789ab` against its merge "
    "base `ba9876543210`, 3 + 3 trials.\n\n| shape | change |\n|---|---:|\n| gemm/m256 | +222.8% |\n"
)


def test_untrusted_results_are_labelled_set_no_status_and_propose_no_patch() -> None:
    """A step measured on a fork's code: the plan says so, the comment and the report carry the label,
    no revert is proposed, the status is never success (nor failure), no draft PR."""
    data = series(8, [0, 2, 4, 5, 6, 8], {5: +222.8}, ("gemm/m256",))
    plan = synthetic_plan(data, untrusted=True)
    assert plan.untrusted and plan.verdict is RunVerdict.IMPROVEMENT
    assert outcome_plan.UNTRUSTED_NOTE in plan.report.splitlines()[2]  # under the report's title
    text = messages.culprit_body(plan, plan.culprits[0])
    matches_golden("publish_pr_untrusted.md", text)
    assert text.splitlines()[3].startswith(f"> **{messages.UNTRUSTED}**") and messages.CONFIRM in text
    assert (
        messages.status_state(plan) == "pending" and messages.status_state(replace(plan, untrusted=False)) == "success"
    )
    regression = synthetic_plan(series(8, [0, 2, 4, 5, 6, 8], {5: -40.0}, ("gemm/m256",)), untrusted=True)
    assert regression.culprits[0].patch is None and regression.culprits[0].combined_patch is None
    assert "No patch is proposed" in messages.culprit_body(regression, regression.culprits[0])
    assert messages.status_state(regression) == "pending"


def test_a_forged_improvement_posts_no_status_and_is_labelled(tmp_path: Path) -> None:
    """The measure job's plan claims +222.8% and says nothing of trust (a trial rewrote its numbers and the
    plan file); the publish job, told by the authorize job that the PR's own code was measured, labels it
    and posts no status; the same plan without that word would have posted success."""
    with FakeGitHub() as fake:
        head = fake.add_repo(REPO, {"README.md": "demo\n"})
        fake.add_pull(REPO, 1020, head_sha=head, title="faster, trust me")
        plan = PublishPlan(
            run_id="pr1020-c7",
            repo=REPO,
            verdict=RunVerdict.IMPROVEMENT,
            report="",
            requester_pr=1020,
            head_sha=head,
            answer=FORGED_ANSWER,
        )
        cfg = Publish(repo=REPO, token_env="BISECTOR_GH", base_url=fake.url)
        from bisector.publish import Expectation

        expected = Expectation(repo=REPO, pr=1020, sha=head, untrusted=True)
        out = publish(plan, cfg, ENV, policy=FAST, expected=expected)
        assert out.status is None and fake.repos[REPO].statuses == []
        assert "measured on untrusted code: no commit status" in out.notes
        [posted] = fake.issue_comments(REPO, 1020)
        lines = posted["body"].splitlines()
        assert lines[1] == "### bisector `/perf`: the PR head is **faster**"
        assert lines[3] == f"> **{messages.UNTRUSTED}** {messages.CONFIRM}" and "+222.8%" in posted["body"]
        trusting = publish(plan, cfg, ENV, policy=FAST, expected=replace(expected, untrusted=False))
        assert trusting.status is not None and trusting.status.state == "success"  # what the word prevents


def test_the_cause_line_comes_from_the_compiled_kernels(tmp_path: Path) -> None:
    """#145 of the H200 demo, its kernels compiled ahead of time (tests/fixtures/kernels): the comment's
    first screen says which compiled kernel changed and what moved in it."""
    from bisector.why.kernel_diff.collect import KERNELS_DIR, compare_dirs
    from tests.test_kernels import FIXTURES, INDEX, _data, fixture_step

    st = INDEX["145"]
    shutil.copytree(FIXTURES, tmp_path / KERNELS_DIR)
    step = fixture_step()
    data = _data(compare_dirs(tmp_path, st["parent"], st["culprit"]), [step])
    plan = synthetic_plan(data)
    text = messages.culprit_body(plan, plan.culprits[0])
    cause = next(line for line in first_screen(text).splitlines() if line.startswith("**Cause**"))
    assert cause.startswith("**Cause**: `_matmul_kernel`: ") and "num_stages 3 → 2" in cause, cause


def test_a_status_fails_only_on_a_verified_regression() -> None:
    """An unverified regression is neither a failure nor a success; an improvement alone succeeds."""
    data = series(8, [0, 2, 4, 5, 6, 8], {5: -40.0, 6: +30.0}, ("gemm/m256",))
    unverified = replace(data, steps=(replace(data.steps[0], verified=False), data.steps[1]))
    states = {}
    for name, d in (
        ("verified", data),
        ("unverified", unverified),
        ("improvement", replace(data, steps=data.steps[1:])),
    ):
        plan = synthetic_plan(d)
        states[name] = (plan.verdict, messages.status_state(plan), messages.status_description(plan))
    assert states["verified"] == (RunVerdict.REGRESSION, "failure", "1 regression (#1005), 1 improvement (#1006)")
    assert states["unverified"][:2] == (RunVerdict.INCOMPLETE, "error")
    assert states["unverified"][2] == "1 improvement (#1006), 1 unverified step (#1005)"
    assert states["improvement"] == (RunVerdict.IMPROVEMENT, "success", "1 improvement (#1006)")

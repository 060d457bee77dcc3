"""`publish` holds a plan (written beside code under test) to what a trusted job authorized.

Real plan files, the real CLI and the local fake GitHub server: a forged plan posts nothing.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisector.commands.publish_cmd import command as publish_command
from bisector.publish import CulpritPost, PublishPlan, RunVerdict, dump_plan
from bisector.triggers.comment import to_this_pr
from tests.fakegithub import FakeGitHub
from tests.test_publish import ENV, REPO, write_config

PR, OTHER = 1020, 950


@pytest.fixture
def fake():
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def head(fake: FakeGitHub) -> str:
    sha = fake.add_repo(REPO, {"README.md": "flydsl\n"})
    fake.add_pull(REPO, OTHER, head_sha=sha, title="someone else's PR")
    fake.add_pull(REPO, PR, head_sha=sha, title="asks for /perf")
    return sha


@pytest.fixture
def config(tmp_path: Path, fake: FakeGitHub) -> Path:
    return write_config(tmp_path, fake)


def answer_plan(head: str, **changes: object) -> PublishPlan:
    """What the measure job writes for `/perf` on #1020, pinned at `head`."""
    plan = PublishPlan(
        run_id=f"pr{PR}-c77",
        repo=REPO,
        verdict=RunVerdict.REGRESSION,
        report="",
        requester_pr=PR,
        head_sha=head,
        answer="### bisector `/perf`: the PR head is **slower**",
    )
    return replace(plan, **changes)  # type: ignore[arg-type]


def culprit(pr: int) -> CulpritPost:
    return CulpritPost(pr=pr, step_summary=f"**Step at 3b0c9e1 (#{pr})**", table="| a |\n|---|", commit="3b0c9e1")


def post(tmp_path: Path, config: Path, plan: PublishPlan, *flags: str):
    path = tmp_path / "publish-plan.json"
    dump_plan(plan, path)
    return CliRunner().invoke(publish_command, ["--plan", str(path), "--config", str(config), *flags], env=ENV)


def expect(head: str, pr: int = PR) -> tuple[str, ...]:
    return ("--expect-repo", REPO, "--expect-pr", str(pr), "--expect-sha", head)


def test_the_authorized_answer_is_posted(fake: FakeGitHub, head: str, config: Path, tmp_path: Path) -> None:
    result = post(tmp_path, config, answer_plan(head), *expect(head))
    assert result.exit_code == 0, result.output
    assert [c["body"].splitlines()[1] for c in fake.issue_comments(REPO, PR)] == [
        "### bisector `/perf`: the PR head is **slower**"
    ]
    assert [(s["sha"], s["state"]) for s in fake.repos[REPO].statuses] == [(head, "failure")]


@pytest.mark.parametrize(
    "forgery, named",
    [
        ({"requester_pr": OTHER}, f"comment on #{OTHER}: only #{PR}"),
        ({"head_sha": "b" * 40}, f"status 'failure' on {'b' * 40}: a status may go only on the pinned head"),
        ({"culprits": (culprit(OTHER),)}, f"comment on #{OTHER}: only #{PR}"),
        ({"repo": "evil/repo"}, "plan: repo is 'evil/repo'"),
        ({"run_id": "pr950-c1"}, "plan: run_id 'pr950-c1' is not a run of a comment on #1020"),
    ],
)
def test_a_forged_plan_posts_nothing(
    fake: FakeGitHub, head: str, config: Path, tmp_path: Path, forgery: dict, named: str
) -> None:
    config.write_text(
        config.read_text().replace(f'repo = "{REPO}"\n', "", 1) if "repo" in forgery else config.read_text()
    )  # a config naming the repo would refuse it on its own
    result = post(tmp_path, config, answer_plan(head, **forgery), *expect(head))
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and named in line and line.endswith("nothing posted"), line
    assert fake.requests == []  # not even a read: refused before connecting
    assert fake.issue_comments(REPO, OTHER) == fake.issue_comments(REPO, PR) == []
    assert fake.repos[REPO].statuses == []


def test_without_the_expectation_the_same_forgery_would_post(
    fake: FakeGitHub, head: str, config: Path, tmp_path: Path
) -> None:
    """What the check stops: the unchecked command comments wherever the plan says."""
    result = post(tmp_path, config, answer_plan(head, requester_pr=OTHER))
    assert result.exit_code == 0 and len(fake.issue_comments(REPO, OTHER)) == 1


def test_a_bisect_plan_cut_to_this_pr_is_accepted(fake: FakeGitHub, head: str, config: Path, tmp_path: Path) -> None:
    """The measure stage keeps culprits of other PRs in the report only, a status only on the pin."""
    bisect = answer_plan(
        "c" * 40, answer="", report="## Report\n\nthe step is #950\n", culprits=(culprit(OTHER), culprit(PR))
    )
    result = post(tmp_path, config, to_this_pr(bisect, PR, head), *expect(head))
    assert result.exit_code == 0, result.output
    assert fake.issue_comments(REPO, OTHER) == [] and fake.repos[REPO].statuses == []
    [answer] = fake.issue_comments(REPO, PR)
    assert "This PR is a culprit" in answer["body"] and "the step is #950" in answer["body"]


def test_nightly_posts_on_culprits_but_answers_no_pr(fake: FakeGitHub, head: str, config: Path, tmp_path: Path) -> None:
    nightly = PublishPlan(
        run_id="2026-08-18.fa",
        repo=REPO,
        verdict=RunVerdict.REGRESSION,
        report="r",
        culprits=(culprit(OTHER),),
        head_sha=head,
    )
    forged = post(tmp_path, config, replace(nightly, requester_pr=PR), "--nightly")
    assert forged.exit_code == 2 and "a nightly plan answers no PR" in forged.output and fake.requests == []
    result = post(tmp_path, config, nightly, "--nightly")
    assert result.exit_code == 0, result.output
    assert len(fake.issue_comments(REPO, OTHER)) == 1 and json.loads(result.output)["status"]["sha"] == head


@pytest.mark.parametrize(
    "flags, problem",
    [
        (("--expect-pr", "1020", "--expect-sha", "a" * 40), "need --expect-repo"),
        (("--expect-repo", REPO), "--expect-repo needs --expect-pr and --expect-sha"),
        (("--expect-repo", REPO, "--expect-pr", "1020"), "--expect-pr and --expect-sha go together"),
        (("--expect-repo", REPO, "--expect-pr", "1020", "--expect-sha", "main"), "--expect-sha: not a full commit SHA"),
        (("--nightly", "--expect-pr", "1020"), "--nightly answers no PR"),
        (("--expect-untrusted",), "--expect-untrusted goes with --expect-repo/--expect-pr/--expect-sha"),
        (("--nightly", "--expect-untrusted"), "--expect-untrusted goes with"),
    ],
)
def test_bad_expectations_are_bad_input(
    fake: FakeGitHub, head: str, config: Path, tmp_path: Path, flags: tuple[str, ...], problem: str
) -> None:
    result = post(tmp_path, config, answer_plan(head), *flags)
    assert result.exit_code == 2 and problem in result.output, result.output
    assert fake.requests == []

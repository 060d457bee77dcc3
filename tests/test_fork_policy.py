"""`/perf` and `/bisect` on a fork's code are refused where code under test runs without a sandbox
(bisector/triggers/fork_policy.py), unless the config opts in by name: a one-line answer in the PR.

The workflow's stages against the local GitHub server, a real upstream with a fork PR whose head
exists only as refs/pull/N/head, real configs read from TOML. "No sandbox" is a GPU config (its
trials run in the fence only, whatever the host) or the sandbox turned off (BISECTOR_SANDBOX=off).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from git import Repo

from bisector import config as config_mod
from bisector import gitrepo
from bisector.commands import check_config_cmd
from bisector.isolation import sandbox
from bisector.triggers import fork_policy
from bisector.triggers.slash_commands import BisectCommand, PerfCommand
from tests.fakegithub import FakeGitHub
from tests.gitfixtures import commit_file, git
from tests.test_nightly import make_upstream, write_config
from tests.test_triggers import invoke, outputs, post_event, publish_plan

FORK = "carol/lib"
NO_GPU_SANDBOX = "the GPU driver did not initialize inside the namespaces (libcuda.so.1 304)"


@pytest.fixture(autouse=True)
def gpu_driver_refuses_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose GPU driver does not initialize inside the sandbox (as the H200's did while /proc
    was read-only): its GPU trials would run in the fence only."""
    monkeypatch.setattr(sandbox, "gpu_inside", lambda: NO_GPU_SANDBOX)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """An upstream with a fork PR #7 (its head only under refs/pull/7/head) and a PR #8 from a branch
    of the upstream itself; configs for the CPU and for a GPU (no sandbox for its trials)."""
    tmp = tmp_path_factory.mktemp("forks")
    up = make_upstream(tmp / "upstream")
    git(tmp / "upstream", "checkout", "-q", "-b", "fork-work")
    head = commit_file(tmp / "upstream", "kern/ops.py", "def mm(a, b):\n    return a @ b @ b\n", "fork work", 3)
    git(tmp / "upstream", "checkout", "-q", "main")
    git(tmp / "upstream", "update-ref", "refs/pull/7/head", head)
    git(tmp / "upstream", "branch", "-q", "-D", "fork-work")
    fake = FakeGitHub().start()
    fake.add_repo("org/lib", {"kern/ops.py": "x\n"})
    fake.add_pull("org/lib", 7, head_sha=head, title="Faster mm", user="carol", head_repo=FORK)
    fake.set_permission("org/lib", "maria", "maintain")
    cpu = write_config(tmp, f"file://{tmp / 'upstream'}", base_url=fake.url)
    text = cpu.read_text()
    gpu = tmp / "gpu.toml"
    gpu.write_text(text.replace('kind = "cpu"', 'kind = "cuda"').replace('backend = "torch"', 'backend = "torch_cuda"'))
    opted = tmp / "opted.toml"
    opted.write_text(gpu.read_text() + "\n[triggers]\nallow_unsandboxed_forks = true\n")
    yield {"tmp": tmp, "fake": fake, "cfg": cpu, "gpu": gpu, "opted": opted, "base": up["docs"], "head": head}
    fake.stop()


@pytest.fixture
def sandbox_off(monkeypatch: pytest.MonkeyPatch):
    """This process's sandbox probe as on a host that allows none."""
    monkeypatch.setenv("BISECTOR_SANDBOX", "off")
    sandbox.probe.cache_clear()
    yield
    monkeypatch.delenv("BISECTOR_SANDBOX")
    sandbox.probe.cache_clear()


def with_config(world: dict, key: str) -> dict:
    return {**world, "cfg": world[key]}


def bot_answers(world: dict, cid: int, number: int = 7) -> list[str]:
    return [c["body"] for c in world["fake"].issue_comments("org/lib", number) if f"pr{number}-c{cid}" in c["body"]]


def test_perf_on_a_fork_is_refused_where_gpu_trials_run_unsandboxed(
    world: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflow's three stages: authorize reads where the head lives, the GPU job refuses and
    writes the one-line answer as its plan, publish posts it in place of "queued"."""
    w = with_config(world, "gpu")
    path, cid = post_event(w, "perf_fork_slower.json")
    out = w["tmp"] / "out-perf"
    assert invoke(w, monkeypatch, path, "--authorize-only", "--outputs", str(out)).exit_code == 0
    assert outputs(out)["head_repo"] == FORK
    plan = w["tmp"] / "plan-perf.json"
    result = invoke(
        w,
        monkeypatch,
        path,
        "--plan-out",
        str(plan),
        "--head-sha",
        outputs(out)["head_sha"],
        "--head-repo",
        outputs(out)["head_repo"],
        token=False,
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("refused: `/perf` refused: it would run code from the fork carol/lib")
    assert not list((w["tmp"] / "work").glob("trials/*")) and not list((w["tmp"] / "work").glob("builds/*"))
    published = publish_plan(w, plan, out)
    assert published.exit_code == 0, published.output
    [body] = bot_answers(w, cid)
    marker, line = body.strip().splitlines()  # one line, in place of the "queued" answer
    assert marker.startswith("<!-- bisector:run=pr7-c") and "queued" not in body
    assert line.startswith("`/perf` refused:") and NO_GPU_SANDBOX in line
    assert fork_policy.OPT_IN in line


def test_without_the_head_repo_the_measure_job_counts_the_head_as_a_forks(
    world: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = with_config(world, "gpu")
    path, _ = post_event(w, "perf_fork_slower.json")
    plan = w["tmp"] / "plan-unknown.json"
    result = invoke(w, monkeypatch, path, "--plan-out", str(plan), "--head-sha", w["head"], token=False)
    assert result.exit_code == 0 and "refused" in result.output, result.output
    answer = json.loads(plan.read_text())["answer"]
    assert answer.startswith("`/perf` refused: it would run code from a fork") and "\n" not in answer.strip()


def test_bisect_to_the_fork_head_is_refused_on_a_cpu_host_without_a_sandbox(
    world: dict, sandbox_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locally (one process, the token from the environment): the refusal goes through the same thread."""
    path, cid = post_event(world, "bisect_authorized.json", BASE=world["base"][:10], HEAD="refs/pull/7/head")
    result = invoke(world, monkeypatch, path)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("refused: `/bisect` refused:"), result.output
    [body] = bot_answers(world, cid)
    assert "BISECTOR_SANDBOX=off" in body and len(body.strip().splitlines()) == 2


def test_bisect_to_a_fork_commit_named_by_its_sha_is_refused(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mirror holds refs/pull/*: a fork's commit named by SHA is still a fork's code."""
    w = with_config(world, "gpu")
    path, _ = post_event(w, "bisect_authorized.json", BASE=w["base"][:10], HEAD=w["head"][:12])
    plan = w["tmp"] / "plan-sha.json"
    result = invoke(
        w, monkeypatch, path, "--plan-out", str(plan), "--head-sha", w["head"], "--head-repo", "org/lib", token=False
    )
    assert result.exit_code == 0 and "refused" in result.output, result.output
    assert "not of the upstream's history" in json.loads(plan.read_text())["answer"]


def test_what_may_run(world: dict) -> None:
    """Opted in by name, a branch of the upstream itself, or only the upstream's own commits: no refusal."""
    gpu, opted = config_mod.load(world["gpu"]), config_mod.load(world["opted"])

    def mirror() -> Repo:
        return gitrepo.open_repo(str(world["tmp"] / "upstream"))

    fork_bisect = BisectCommand(world["base"][:10], "refs/pull/7/head")
    upstream_bisect = BisectCommand(world["base"][:10], "main")
    assert fork_policy.refusal(PerfCommand(), 7, "org/lib", FORK, gpu, mirror)
    assert fork_policy.refusal(fork_bisect, 7, "org/lib", FORK, gpu, mirror)
    assert not fork_policy.refusal(PerfCommand(), 7, "org/lib", FORK, opted, mirror)
    assert not fork_policy.refusal(PerfCommand(), 8, "org/lib", "org/lib", gpu, mirror)
    assert not fork_policy.refusal(upstream_bisect, 7, "org/lib", FORK, gpu, mirror)
    cpu = config_mod.load(world["cfg"])
    assert bool(fork_policy.refusal(PerfCommand(), 7, "org/lib", FORK, cpu, mirror)) is not sandbox.probe().sandboxed


@pytest.mark.parametrize(
    "line, problem",
    [
        ('allow_unsandboxed_forks = "yes"', "triggers.allow_unsandboxed_forks: must be bool"),
        ("allow_forks = true", "triggers.allow_forks: unknown key"),
    ],
)
def test_check_config_validates_the_opt_in(world: dict, tmp_path: Path, line: str, problem: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(world["cfg"].read_text() + f"\n[triggers]\n{line}\n")
    result = CliRunner().invoke(check_config_cmd.command, [str(bad)])
    assert result.exit_code == 2 and problem in result.output, result.output
    good = CliRunner().invoke(check_config_cmd.command, [str(world["opted"])])
    assert good.exit_code == 0 and "may run a fork's code on a runner without a sandbox" in good.output, good.output

"""Whether a `/perf` or `/bisect` may run a fork's code on this host.

A fork's code is anyone's: on a host that gives code under test no sandbox (no user namespaces,
or a GPU, whose trials run in the fence only: bisector/isolation/sandbox.py) it would run as the bot's
user, beside the runner's files. Such a command is refused with a one-line answer in the PR, unless
the config opts in by name (`[triggers] allow_unsandboxed_forks = true`, or `[sandbox] require =
false`); one that runs is sandboxed or stopped (`sandbox.require`: nothing of it runs unsandboxed
later, e.g. where a GPU's driver is found not to work inside the sandbox). A PR whose head branch
lives in the upstream itself was pushed by someone with write access: not a fork's code; nor is a
commit reachable from the upstream's branches or tags. Where the head's repository is not known (a
dry run, a workflow that did not pass it) it counts as a fork's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import git

from bisector import gitrepo
from bisector.config import Config
from bisector.errors import BisectorError
from bisector.isolation import sandbox
from bisector.triggers.slash_commands import Command, PerfCommand

# A ref into a pull request: fork code, measured only as the pinned head of this PR.
PULL_REF = re.compile(r"(?:refs/)?pull/(\d+)/(\w+)(.*)")
OPT_IN = "[triggers] allow_unsandboxed_forks = true"


def on_upstream(repo: git.Repo, ref: str) -> bool:
    """`ref` names a commit of the upstream's own history: reachable from one of its branches or tags
    (a mirror also holds refs/pull/*, whose commits may be anyone's)."""
    try:
        sha = gitrepo.resolve(repo, ref)
        return bool(
            repo.git.for_each_ref(
                "--contains", sha, "--count=1", "--format=%(refname)", "refs/heads", "refs/tags", "refs/remotes"
            ).strip()
        )
    except (BisectorError, git.GitCommandError):
        return False


def runs_fork_code(command: Command, head_is_upstreams: bool, upstream: Callable[[], git.Repo]) -> bool:
    """`/perf` measures the PR head; `/bisect` its two ends and what lies between: a fork's code
    when an end is a pull request ref of a fork's PR, or a commit outside the upstream's history."""
    if isinstance(command, PerfCommand):
        return not head_is_upstreams
    ends = (command.good, command.bad)
    if any(PULL_REF.fullmatch(r) for r in ends) and not head_is_upstreams:
        return True
    others = [r for r in ends if not PULL_REF.fullmatch(r)]
    return bool(others) and not all(on_upstream(upstream(), r) for r in others)


def no_sandbox(config: Config) -> str:
    """Why this host's trials of `config` run without a sandbox ("" when they have one)."""
    gpu = config.device != "cpu"
    if sandbox.applies(gpu):
        return ""
    probe = sandbox.probe()
    return probe.reason if not probe.sandboxed else f"GPU trials: fence and subreapers only ({sandbox.gpu_inside()})"


def forks_need_sandbox(config: Config) -> bool:
    """Whether a fork's code runs only sandboxed: `[sandbox] require`, by default yes unless the
    config allows unsandboxed forks by name."""
    if config.sandbox.require is not None:
        return config.sandbox.require
    return not config.triggers.allow_unsandboxed_forks


def must_be_sandboxed(
    command: Command, repo: str, head_repo: str | None, config: Config, upstream: Callable[[], git.Repo]
) -> bool:
    """Whether `command` may run only sandboxed: the config requires it for every run, or it runs a
    fork's code and the config requires it for those (the default)."""
    if config.sandbox.require:
        return True
    return forks_need_sandbox(config) and runs_fork_code(command, head_repo == repo, upstream)


def refusal(
    command: Command, number: int, repo: str, head_repo: str | None, config: Config, upstream: Callable[[], git.Repo]
) -> str:
    """The one-line answer refusing `command` on PR `number` of `repo`, or "" when it may run.
    `head_repo`: where the PR's head branch lives (None: not known); `upstream`: opens the mirror."""
    why = no_sandbox(config)
    if not why or not forks_need_sandbox(config):
        return ""
    if not runs_fork_code(command, head_repo == repo, upstream):
        return ""
    whose = (
        f"from the fork {head_repo}"
        if head_repo and head_repo != repo and isinstance(command, PerfCommand)
        else "from a fork, or not of the upstream's history"
    )
    return (
        f"`{command.verb}` refused: it would run code {whose} on a runner with no sandbox for code under test "
        f"({why}); the bot's config may allow it with `{OPT_IN}`."
    )


__all__ = [
    "OPT_IN",
    "PULL_REF",
    "forks_need_sandbox",
    "must_be_sandboxed",
    "no_sandbox",
    "on_upstream",
    "refusal",
    "runs_fork_code",
]

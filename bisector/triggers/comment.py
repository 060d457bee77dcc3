"""`handle-comment`: one PR comment in, an answer in the same thread out.

Locally one process does it all (`handle`), the token coming from the vault:

    event -> ignore? -> parse -> react "eyes" -> permission -> pin the PR head -> lock the GPUs
          -> /bisect | /perf -> publish plan -> post it

In the workflow (.github/workflows/pr-comment.yml) it is three jobs at two trust levels:

    authorize  GitHub-hosted, token   event -> parse -> permission -> pin the head -> "queued" answer
    measure    GPU runner, no secret  event -> parse -> refs/pull/N/head == pinned? -> measure
                                      -> publish-plan.json (the answer, or why it failed)
    publish    GitHub-hosted, token   `bisector publish --plan publish-plan.json`

Fork code is never checked out by the workflow: the bot fetches `refs/pull/N/head` from the
upstream into its own mirror, refuses it unless it is the commit pinned when the command was
authorized, and builds and runs it in processes that hold no secret.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import git

from bisector import gitrepo, pipeline
from bisector.config import Config, select_shapes
from bisector.errors import BadInput, BisectorError, GitError, RefError
from bisector.isolation import sandbox
from bisector.model import ProbeStatus
from bisector.publish.messages import marker
from bisector.publish.publish_plan import PublishPlan, RunVerdict
from bisector.runner import lock
from bisector.triggers import fork_policy, perf, plan_file
from bisector.triggers import outcome_plan as plan_mod
from bisector.triggers import slash_commands as commands
from bisector.triggers.ab import ab_until_sure
from bisector.triggers.event import CommentEvent, ignore_reason, read_event
from bisector.triggers.permissions import refusal
from bisector.triggers.thread import DryRunThread, GitHubThread, Thread

_PERF_VERDICT = {
    "slower": RunVerdict.REGRESSION,
    "wrong results": RunVerdict.REGRESSION,
    "faster": RunVerdict.IMPROVEMENT,
    "same": RunVerdict.NO_CHANGE,
    "not sure": RunVerdict.INCOMPLETE,
}


@dataclass(frozen=True)
class Handled:
    action: str  # ignored | usage | refused | authorized | bisect | perf
    message: str  # one line for the log
    answer: str = ""  # where the answer went (comment URL, dry-run file, plan file)
    head_sha: str = ""  # authorized: the PR head pinned for the measuring side
    repo: str = ""  # authorized: where the answer may go (publish --expect-repo)
    pr: int = 0  # authorized: the only PR the answer may go to (publish --expect-pr)
    verb: str = ""  # authorized: /bisect or /perf
    head_repo: str = ""  # authorized: where the PR's head branch lives (a fork's name, or the repo itself)


@dataclass(frozen=True)
class Job:
    config: Config
    store: str | None = None
    work_dir: str | None = None
    report_dir: str | None = None


def run_id(event: CommentEvent) -> str:
    return f"pr{event.number}-c{event.comment_id}"


def fetch_pull_head(repo: git.Repo, upstream: str, number: int) -> str:
    """The PR head as the upstream has it (works for forks): refs/pull/N/head, fetched into our mirror."""
    ref = f"refs/pull/{number}/head"
    if gitrepo.is_url(upstream):
        try:
            repo.git.fetch(upstream, f"+{ref}:{ref}")
        except git.GitCommandError as exc:
            raise GitError(f"{upstream}: cannot fetch {ref}: {(exc.stderr or '').strip()[-200:]}") from None
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}"))
    except git.GitCommandError:
        raise RefError(f"{upstream}: no {ref} (is #{number} a pull request of this repository?)") from None


def check_pin(fetched: str, pinned: str | None, number: int) -> str:
    """The commit to measure: the pinned one, and only if refs/pull/N/head still points there."""
    if pinned is not None and fetched != pinned:
        raise BadInput(
            f"refs/pull/{number}/head is {fetched[:12]} now, not {pinned[:12]} as pinned when the "
            "command was authorized (pushed since?): not measured; post the command again"
        )
    return fetched


def _read(event_path: str | Path, cfg: Config) -> tuple[CommentEvent, commands.Command | commands.Usage | None, str]:
    """The event, its command (None: stay silent) and why there is none."""
    event = read_event(event_path)
    if cfg.publish.repo is not None and cfg.publish.repo != event.repo:
        raise BadInput(f"{event_path}: the comment is on {event.repo} but {cfg.path} publishes to {cfg.publish.repo}")
    reason = ignore_reason(event)
    if reason:
        return event, None, reason
    command = commands.parse(event.body)
    if command is None:
        return event, None, "no /bisect or /perf command in the comment"
    return event, command, ""


def _verb(command: commands.Command | commands.Usage) -> str:
    return command.verb if not isinstance(command, commands.Usage) else command.line.split()[0]


def _thread(event: CommentEvent, cfg: Config, env: Mapping[str, str], dry_run_dir: Path | None) -> Thread:
    return (
        DryRunThread(event, cfg.publish, env, dry_run_dir)
        if dry_run_dir is not None
        else GitHubThread(event, cfg.publish, env)
    )


def _gate(event: CommentEvent, command: commands.Command | commands.Usage, thread: Thread) -> Handled | None:
    """React, check the permission, answer a refusal or the usage; None when the command may run."""
    thread.react("eyes")
    tag = marker(run_id(event), event.number)
    perm = thread.permission()
    if not perm.allowed:
        return Handled(
            "refused",
            f"{event.login} has {perm.shown} permission",
            thread.answer(tag, f"{tag}\n{refusal(event.login, _verb(command), perm)}\n"),
        )
    if isinstance(command, commands.Usage):
        text = f"{tag}\nI could not read `{command.line}`: {command.problem}.\n\n```\n{command.text}```\n"
        return Handled("usage", command.problem, thread.answer(tag, text))
    return None


@contextlib.contextmanager
def _gated(
    event_path: str | Path, job: Job, env: Mapping[str, str], dry_run_dir: Path | None
) -> Iterator[tuple[CommentEvent, commands.Command | commands.Usage | None, Thread | None, Handled | None]]:
    """The event read, its thread opened and the command gated (permission, usage): the early
    answer when there is one; the thread closed on the way out."""
    event, command, reason = _read(event_path, job.config)
    if command is None:
        yield event, command, None, Handled("ignored", reason)
        return
    thread = _thread(event, job.config, env, dry_run_dir)
    try:
        yield event, command, thread, _gate(event, command, thread)
    finally:
        thread.close()


def authorize(event_path: str | Path, job: Job, env: Mapping[str, str], dry_run_dir: Path | None = None) -> Handled:
    """Everything that needs the token before a GPU runner is taken: permission, usage, the pinned head."""
    with _gated(event_path, job, env, dry_run_dir) as (event, command, thread, early):
        if early is not None:
            return early
        # _gate answered the rest
        assert thread is not None and command is not None and not isinstance(command, commands.Usage)
        head = thread.pull_head()
        if head is None:
            raise BadInput("--authorize-only needs GitHub to pin the PR head: not in a dry run")
        tag, verb = marker(run_id(event), event.number), _verb(command)
        where = thread.answer(
            tag,
            f"{tag}\n`{verb}` from @{event.login}: queued for a GPU runner. It measures the PR "
            f"head as of now, `{head[:12]}`; commits pushed later are not measured. This "
            "comment is replaced by the results.\n",
        )
        return Handled(
            "authorized",
            f"{event.login} may run {verb}; PR head pinned at {head[:12]}",
            where,
            head,
            repo=event.repo,
            pr=event.number,
            verb=verb,
            head_repo=thread.head_repo() or "",
        )


def handle(
    event_path: str | Path,
    job: Job,
    env: Mapping[str, str],
    dry_run_dir: Path | None = None,
    say: Callable[[str], None] = lambda s: None,
) -> Handled:
    """All stages in one process (local use): authorize, measure, post."""
    with _gated(event_path, job, env, dry_run_dir) as (event, command, thread, early):
        if early is not None:
            return early
        # _gate answered the rest
        assert thread is not None and command is not None and not isinstance(command, commands.Usage)
        pinned = thread.pull_head()  # None in a dry run: measured as fetched
        tag, verb = marker(run_id(event), event.number), command.verb
        thread.answer(
            tag,
            f"{tag}\n`{verb}` from @{event.login}: queued for the GPU on runner "
            f"`{lock.runner_name()}`; this comment is replaced by the results.\n",
        )
        try:
            plan, handled = _measure(event, command, job, pinned, say, thread.head_repo())
        except BisectorError as exc:
            thread.answer(tag, f"{tag}\n`{verb}` failed: {exc}\n")
            raise
        result = thread.publish(plan_file.settle(plan, job.config.publish))
        where = ", ".join(c.url for c in result.comments) or ", ".join(result.dry_run_files[:2])
        return replace(handled, answer=where)


def measure(
    event_path: str | Path,
    job: Job,
    pinned: str,
    plan_out: Path,
    say: Callable[[str], None] = lambda s: None,
    head_repo: str | None = None,
) -> Handled:
    """The GPU stage: no token, no GitHub call. The permission was checked and the head pinned by
    `authorize`; this writes the plan that `bisector publish` posts (the answer, or why it failed).
    `head_repo`: where the PR's head lives, as `authorize` read it (None: a fork's, for all we know)."""
    event, command, reason = _read(event_path, job.config)
    if command is None:
        return Handled("ignored", reason)
    if isinstance(command, commands.Usage):
        return Handled("usage", command.problem)  # answered by the authorize stage
    try:
        plan, handled = _measure(event, command, job, pinned, say, head_repo)
    except BisectorError as exc:
        plan_file.write(failure_plan(event, command.verb, exc), plan_out, job.config.publish)
        raise
    plan_file.write(to_this_pr(plan, event.number, pinned), plan_out, job.config.publish)
    return replace(handled, answer=str(plan_out))


def to_this_pr(plan: PublishPlan, number: int, pinned: str) -> PublishPlan:
    """What `publish --expect-pr N --expect-sha SHA` accepts: culprits of other PRs stay in the report
    (nothing checks a culprit a plan names), a status only on the pinned head."""
    return replace(
        plan,
        culprits=tuple(c for c in plan.culprits if c.pr == number),
        head_sha=plan.head_sha if plan.head_sha == pinned else None,
    )


def failure_plan(event: CommentEvent, verb: str, exc: BisectorError) -> PublishPlan:
    return PublishPlan(
        run_id=run_id(event),
        repo=event.repo,
        verdict=RunVerdict.INCOMPLETE,
        report="",
        requester_pr=event.number,
        answer=f"`{verb}` failed: {exc}",
    )


def refused_plan(event: CommentEvent, answer: str) -> PublishPlan:
    """The one-line answer of a command this host may not run (bisector/triggers/fork_policy.py)."""
    return PublishPlan(
        run_id=run_id(event),
        repo=event.repo,
        verdict=RunVerdict.INCOMPLETE,
        report="",
        requester_pr=event.number,
        answer=answer,
    )


def _measure(
    event: CommentEvent,
    command: commands.Command,
    job: Job,
    pinned: str | None,
    say: Callable[[str], None],
    head_repo: str | None = None,
) -> tuple[PublishPlan, Handled]:
    cfg = job.config
    refused = fork_policy.refusal(
        command, event.number, event.repo, head_repo, cfg, lambda: gitrepo.open_repo(cfg.upstream.repo)
    )
    if refused:
        return refused_plan(event, refused), Handled("refused", refused)
    fail_closed = fork_policy.must_be_sandboxed(
        command, event.repo, head_repo, cfg, lambda: gitrepo.open_repo(cfg.upstream.repo)
    )
    # fail closed: nothing of a fork's code (or any, where the config requires it) runs unsandboxed
    with (
        sandbox.required(cfg.device != "cpu") if fail_closed else contextlib.nullcontext(),
        lock.config_lock(cfg, on_wait=lambda p: say(f"waiting for {p} (another job holds the GPU)")),
    ):
        if isinstance(command, commands.BisectCommand):
            return _bisect(event, command, job, pinned, head_repo)
        return _perf(event, command, job, pinned)


def _pinned_range(
    event: CommentEvent, command: commands.BisectCommand, config: Config, pinned: str | None
) -> tuple[str, str]:
    """GOOD and BAD, with this PR's head ref replaced by the pinned commit; other pull refs refused."""
    out = []
    for ref in (command.good, command.bad):
        match = fork_policy.PULL_REF.fullmatch(ref)  # a ref into a pull request: only as this PR's pinned head
        if match is None or pinned is None:
            out.append(ref)
            continue
        number, kind, suffix = int(match.group(1)), match.group(2), match.group(3)
        if number != event.number or kind != "head" or not re.fullmatch(r"[~^0-9]*", suffix):
            raise BadInput(
                f"{ref}: the only pull request ref a command may name is this PR's head "
                f"(refs/pull/{event.number}/head), measured at the pinned commit"
            )
        repo = gitrepo.open_repo(config.upstream.repo)
        out.append(check_pin(fetch_pull_head(repo, config.upstream.repo, event.number), pinned, event.number) + suffix)
    return out[0], out[1]


def _bisect(
    event: CommentEvent, command: commands.BisectCommand, job: Job, pinned: str | None, head_repo: str | None = None
) -> tuple[PublishPlan, Handled]:
    config = select_shapes(job.config, command.selection.only())
    good, bad = _pinned_range(event, command, config, pinned)
    out = Path(job.report_dir or Path(config.report_dir) / "pr" / str(event.number) / run_id(event))
    # A PR's head (not merged), a fork's code or a commit outside the upstream's history timed itself:
    # labelled, no status, no patch.
    untrusted = any(
        fork_policy.PULL_REF.fullmatch(r) for r in (command.good, command.bad)
    ) or fork_policy.runs_fork_code(command, head_repo == event.repo, lambda: gitrepo.open_repo(config.upstream.repo))
    options = pipeline.RunOptions(
        good=good,
        bad=bad,
        store=job.store,
        work_dir=job.work_dir,
        report_dir=str(out),
        command=f"bisector run --config {config.path} --good {good} --bad {bad}",
        notes=(plan_mod.UNTRUSTED_NOTE,) if untrusted else (),
    )
    outcome = pipeline.bisect(config, options)
    report_md = (outcome.report_dir / "report.md").read_text()
    patches = {sha: Path(p).read_text() for sha, p in outcome.patches.items()}
    plan = plan_mod.build(
        outcome.report,
        run_id(event),
        event.repo,
        report_md,
        requester_pr=event.number,
        patches=patches,
        base_branch=config.upstream.branch,
        untrusted=untrusted,
        combined=plan_mod.reverts_of(config, outcome.report, patches) if not untrusted else None,
    )
    return plan, Handled("bisect", f"{len(outcome.result.steps)} step(s) in {command.good}..{command.bad}")


def _perf(
    event: CommentEvent, command: commands.PerfCommand, job: Job, pinned: str | None
) -> tuple[PublishPlan, Handled]:
    config = select_shapes(job.config, command.selection.only())
    session = pipeline.Session(config, job.store, job.work_dir)
    try:
        head = check_pin(fetch_pull_head(session.repo, config.upstream.repo, event.number), pinned, event.number)
        base = gitrepo.merge_base(session.repo, head, config.upstream.branch)
        notes = []
        if base == head:
            notes.append("the PR head is already on the base branch: both sides are the same commit")
        session.store.add_commits(session.campaign, [gitrepo.to_commit(session.repo.commit(s)) for s in (base, head)])
        probe = session.probe()
        keys = tuple(s.key for s in config.shapes)
        th = config.thresholds
        mb, mh, decided = ab_until_sure(probe, base, head, keys, th, config.protocol)
        if decided is None:
            bad = mb if mb.status is ProbeStatus.SKIP else mh
            notes.append(f"`{bad.sha[:12]}` did not build or run: {bad.reason.strip()[-300:]}")
        tflops = {
            "base": pipeline.medians(session, base, "subject_tflops"),
            "head": pipeline.medians(session, head, "subject_tflops"),
            "control": pipeline.medians(session, head, "control_tflops"),
        }
        rows = perf.compare_shapes(keys, mb.samples, mh.samples, th.min_step, th.alpha, mh.wrong, tflops)
        counts = {"base": mb.count(), "head": mh.count()}
        text = perf.body(rows, head, base, counts, th.min_step_pct, th.alpha, notes)
        # The PR head is the PR's own code until it is merged: it ran in the process that timed it.
        untrusted = not fork_policy.on_upstream(session.repo, head)
        plan = PublishPlan(
            run_id=run_id(event),
            repo=event.repo,
            verdict=_PERF_VERDICT[perf.overall(rows)],
            report="",
            requester_pr=event.number,
            answer=text,
            untrusted=untrusted,
        )
        return plan, Handled(
            "perf", f"{perf.overall(rows)}: " + ", ".join(f"{r.shape} {r.verdict.value}" for r in rows)
        )
    finally:
        session.close()


__all__ = [
    "Handled",
    "Job",
    "authorize",
    "check_pin",
    "failure_plan",
    "fetch_pull_head",
    "handle",
    "measure",
    "run_id",
    "to_this_pr",
]

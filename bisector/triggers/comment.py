"""`handle-comment`: one PR comment in, an answer in the same thread out.

    event -> ignore? -> parse -> react "eyes" -> permission -> lock the GPUs -> /bisect | /perf -> answer

Fork code is never checked out by the workflow: the bot fetches `refs/pull/N/head` from the
upstream into its own mirror, and the build and trial processes run it with a scrubbed environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import git

from bisector import gitrepo, pipeline
from bisector.config import Config
from bisector.errors import BadInput, BisectorError, GitError, RefError
from bisector.model import ProbeStatus
from bisector.publish.messages import marker
from bisector.runner import lock
from bisector.triggers import commands, perf
from bisector.triggers import plan as plan_mod
from bisector.triggers.event import CommentEvent, ignore_reason, read_event
from bisector.triggers.permissions import refusal
from bisector.triggers.thread import DryRunThread, GitHubThread, Thread


@dataclass(frozen=True)
class Handled:
    action: str  # ignored | usage | refused | bisect | perf | failed
    message: str  # one line for the log
    answer: str = ""  # where the answer went (comment URL or dry-run file)


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
        return repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
    except git.GitCommandError:
        raise RefError(f"{upstream}: no {ref} (is #{number} a pull request of this repository?)") from None


def handle(event_path: str | Path, job: Job, env: Mapping[str, str], dry_run_dir: Path | None = None,
           say: Callable[[str], None] = lambda s: None) -> Handled:
    event = read_event(event_path)
    cfg = job.config
    if cfg.publish.repo is not None and cfg.publish.repo != event.repo:
        raise BadInput(f"{event_path}: the comment is on {event.repo} but {cfg.path} publishes to {cfg.publish.repo}")
    reason = ignore_reason(event)
    if reason:
        return Handled("ignored", reason)
    command = commands.parse(event.body)
    if command is None:
        return Handled("ignored", "no /bisect or /perf command in the comment")
    thread: Thread = (DryRunThread(event, cfg.publish, env, dry_run_dir) if dry_run_dir is not None
                      else GitHubThread(event, cfg.publish, env))
    try:
        thread.react("eyes")
        tag = marker(run_id(event), event.number)
        verb = command.verb if not isinstance(command, commands.Usage) else command.line.split()[0]
        perm = thread.permission()
        if not perm.allowed:
            return Handled("refused", f"{event.login} has {perm.shown} permission",
                           thread.answer(tag, f"{tag}\n{refusal(event.login, verb, perm)}\n"))
        if isinstance(command, commands.Usage):
            text = f"{tag}\nI could not read `{command.line}`: {command.problem}.\n\n```\n{command.text}```\n"
            return Handled("usage", command.problem, thread.answer(tag, text))
        thread.answer(tag, f"{tag}\n`{verb}` from @{event.login}: queued for the GPU on runner "
                           f"`{lock.runner_name()}`; this comment is replaced by the results.\n")
        try:
            with lock.config_lock(cfg, on_wait=lambda p: say(f"waiting for {p} (another job holds the GPU)")):
                if isinstance(command, commands.BisectCommand):
                    return _bisect(event, command, job, thread, tag)
                return _perf(event, command, job, thread, tag)
        except BisectorError as exc:
            thread.answer(tag, f"{tag}\n`{verb}` failed: {exc}\n")
            raise
    finally:
        thread.close()


def _bisect(event: CommentEvent, command: commands.BisectCommand, job: Job, thread: Thread, tag: str) -> Handled:
    config = pipeline.select_shapes(job.config, command.selection.only())
    out = Path(job.report_dir or Path(config.report_dir) / "pr" / str(event.number) / run_id(event))
    options = pipeline.RunOptions(good=command.good, bad=command.bad, store=job.store, work_dir=job.work_dir,
                                  report_dir=str(out), command=f"bisector run --config {config.path} "
                                  f"--good {command.good} --bad {command.bad}")
    outcome = pipeline.bisect(config, options)
    report_md = (outcome.report_dir / "report.md").read_text()
    patches = {sha: Path(p).read_text() for sha, p in outcome.patches.items()}
    plan = plan_mod.build(outcome.report, run_id(event), event.repo, report_md, requester_pr=event.number,
                          patches=patches, base_branch=config.upstream.branch)
    result = thread.publish(plan)
    where = ", ".join(c.url for c in result.comments) or ", ".join(result.dry_run_files[:2])
    return Handled("bisect", f"{len(outcome.result.steps)} step(s) in {command.good}..{command.bad}", where)


def _perf(event: CommentEvent, command: commands.PerfCommand, job: Job, thread: Thread, tag: str) -> Handled:
    config = pipeline.select_shapes(job.config, command.selection.only())
    session = pipeline.Session(config, job.store, job.work_dir)
    try:
        head = fetch_pull_head(session.repo, config.upstream.repo, event.number)
        base = gitrepo.merge_base(session.repo, head, config.upstream.branch)
        notes = []
        if base == head:
            notes.append("the PR head is already on the base branch: both sides are the same commit")
        session.store.add_commits(session.campaign, [gitrepo.to_commit(session.repo.commit(s)) for s in (base, head)])
        probe = session.probe()
        keys = tuple(s.key for s in config.shapes)
        th = config.thresholds
        repeats = config.protocol.trials
        while True:  # the search's rule: double the trials while a shape is undecided
            mb, mh = probe(base, repeats), probe(head, repeats)
            if ProbeStatus.SKIP in (mb.status, mh.status):
                bad = mb if mb.status is ProbeStatus.SKIP else mh
                notes.append(f"`{bad.sha[:12]}` did not build or run: {bad.reason.strip()[-300:]}")
                break
            rows = perf.compare_shapes(keys, mb.samples, mh.samples, th.min_step_pct, th.alpha, mh.wrong)
            if not perf.unsure(rows) or repeats * 2 > config.protocol.max_trials:
                break
            repeats *= 2
        tflops = {"base": pipeline.medians(session, base, "subject_tflops"),
                  "head": pipeline.medians(session, head, "subject_tflops"),
                  "control": pipeline.medians(session, head, "control_tflops")}
        rows = perf.compare_shapes(keys, mb.samples, mh.samples, th.min_step_pct, th.alpha, mh.wrong, tflops)
        counts = {"base": mb.count(), "head": mh.count()}
        text = perf.body(rows, head, base, counts, th.min_step_pct, th.alpha, notes)
        where = thread.answer(tag, f"{tag}\n{text}")
        return Handled("perf", f"{perf.overall(rows)}: " + ", ".join(f"{r.shape} {r.verdict.value}" for r in rows),
                       where)
    finally:
        session.close()


__all__ = ["Handled", "Job", "fetch_pull_head", "handle", "run_id"]

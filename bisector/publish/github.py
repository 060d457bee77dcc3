"""Thin PyGithub sender: upsert a comment by marker, open a draft PR from a patch, post a status.

Retries live in PyGithub's own `GithubRetry` (urllib3 Retry): server errors back off
exponentially, 429 honours Retry-After, and 403 rate limits wait for X-RateLimit-Reset (capped).
The token is given to PyGithub's auth object and nowhere else; `guard` turns every failure into
a PublishError whose message has the token cut out.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import github
from github import Auth, GithubRetry, InputGitTreeElement
from github.GithubException import GithubException, UnknownObjectException
from github.Repository import Repository

from bisector.errors import BadInput, BisectorError, PublishError
from bisector.publish.actions import CommentAction, DraftPullAction, StatusAction
from bisector.publish.patching import apply_patch, touched_paths

USER_AGENT = "bisector"


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. Tests shrink the waits; production keeps GitHub's recommended spacing."""

    total: int = 6
    backoff_factor: float = 1.0  # sleeps factor * 2**(n-1) between server-error retries
    backoff_max: float = 120.0
    max_rate_limit_wait: float = 900.0  # give up rather than wait longer for a rate-limit reset
    secondary_rate_wait: float = 60.0
    seconds_between_requests: float = 0.25
    seconds_between_writes: float = 1.0
    timeout_s: int = 30


@dataclass(frozen=True)
class CommentResult:
    issue: int
    comment_id: int
    url: str
    created: bool  # False: an existing comment of the same run was edited


@dataclass(frozen=True)
class DraftResult:
    culprit_pr: int
    number: int
    url: str
    branch: str
    created: bool


@dataclass(frozen=True)
class StatusResult:
    sha: str
    state: str
    description: str


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


@contextlib.contextmanager
def guard(what: str, secret: str | None) -> Iterator[None]:
    """Re-raise any failure as a one-line error naming `what`, with the secret removed."""
    try:
        yield
    except BadInput as exc:
        raise BadInput(_line(f"{what}: {exc}", secret)) from None
    except BisectorError as exc:
        raise PublishError(_line(f"{what}: {exc}", secret)) from None
    except GithubException as exc:
        message = exc.data.get("message") if isinstance(exc.data, dict) else exc.data
        raise PublishError(_line(f"{what}: GitHub answered {exc.status}: {message}", secret)) from None
    except Exception as exc:  # noqa: BLE001 - requests/urllib3/socket errors: the text is all we keep
        raise PublishError(_line(f"{what}: {type(exc).__name__}: {exc}", secret)) from None


def _line(text: str, secret: str | None) -> str:
    return "; ".join(part.strip() for part in scrub(text, secret).splitlines() if part.strip())


def _retry(policy: RetryPolicy) -> GithubRetry:
    kwargs: dict[str, Any] = dict(
        total=policy.total,
        backoff_factor=policy.backoff_factor,
        backoff_max=policy.backoff_max,
        status_forcelist=[429, 500, 502, 503, 504],
        respect_retry_after_header=True,
        raise_on_status=False,
        secondary_rate_wait=policy.secondary_rate_wait,
    )
    if "max_rate_limit_wait" in inspect.signature(GithubRetry.__init__).parameters:  # PyGithub >= 2.9
        kwargs["max_rate_limit_wait"] = policy.max_rate_limit_wait
    return GithubRetry(**kwargs)


def connect(token: str, base_url: str, policy: RetryPolicy) -> github.Github:
    return github.Github(
        auth=Auth.Token(token),
        base_url=base_url.rstrip("/"),
        timeout=policy.timeout_s,
        user_agent=USER_AGENT,
        retry=_retry(policy),
        seconds_between_requests=policy.seconds_between_requests or None,
        seconds_between_writes=policy.seconds_between_writes or None,
    )


def own_login(gh: github.Github, fallback: str) -> str:
    """The login whose comments are the bot's: GET /user for a personal token. An Actions or app
    installation token may not read /user (403): then `fallback`, the configured bot login."""
    try:
        return gh.get_user().login
    except GithubException as exc:
        if exc.status in (403, 404):
            return fallback
        raise


def upsert_comment(repo: Repository, action: CommentAction, author: str) -> CommentResult:
    """Edit the comment by `author` holding the marker (the oldest, if a race ever made two), else
    create one. A marker in someone else's comment is only text: anyone can paste it, and editing
    their comment would put the bot's words under their name (or fail)."""
    issue = repo.get_issue(action.issue)
    for comment in issue.get_comments():
        user = comment.user.login if comment.user is not None else ""
        if action.marker in (comment.body or "") and user.lower() == author.lower():
            if comment.body != action.body:
                comment.edit(action.body)
            return CommentResult(action.issue, comment.id, comment.html_url, created=False)
    comment = issue.create_comment(action.body)
    return CommentResult(action.issue, comment.id, comment.html_url, created=True)


def open_draft_pull(repo: Repository, action: DraftPullAction) -> DraftResult:
    """Commit the patched files on their own branch (git data API) and open a draft PR from it.

    A rerun of the same run moves the branch to the new commit and reuses the open PR.
    """
    base_commit = repo.get_git_commit(action.patch_base)
    originals: dict[str, bytes | None] = {}
    for path in touched_paths(action.patch):
        try:
            content = repo.get_contents(path, ref=action.patch_base)
        except UnknownObjectException:
            originals[path] = None
            continue
        if isinstance(content, list):
            raise PublishError(f"patch path {path!r} is a directory at {action.patch_base[:12]}")
        originals[path] = content.decoded_content
    patched = apply_patch(originals, action.patch)
    elements = []
    for path, data in patched.items():
        if data == originals[path]:
            continue
        if data is None:
            elements.append(InputGitTreeElement(path, "100644", "blob", sha=None))
        else:
            blob = repo.create_git_blob(base64.b64encode(data).decode("ascii"), "base64")
            elements.append(InputGitTreeElement(path, "100644", "blob", sha=blob.sha))
    if not elements:
        raise PublishError(f"the patch for #{action.culprit_pr} changes nothing at {action.patch_base[:12]}")
    tree = repo.create_git_tree(elements, base_tree=base_commit.tree)
    commit = repo.create_git_commit(action.message, tree, [base_commit])
    try:
        ref = repo.get_git_ref(f"heads/{action.branch}")
        _ = ref.object.sha  # completes the ref even with a lazy requester: 404 when the branch is new
    except UnknownObjectException:
        repo.create_git_ref(f"refs/heads/{action.branch}", commit.sha)
    else:
        ref.edit(commit.sha, force=True)
    owner = repo.full_name.split("/")[0]
    for pull in repo.get_pulls(state="open", head=f"{owner}:{action.branch}"):
        return DraftResult(action.culprit_pr, pull.number, pull.html_url, action.branch, created=False)
    pull = repo.create_pull(
        base=action.base_branch, head=action.branch, title=action.title, body=action.body, draft=True
    )
    return DraftResult(action.culprit_pr, pull.number, pull.html_url, action.branch, created=True)


def post_status(repo: Repository, action: StatusAction) -> StatusResult:
    kwargs = {"target_url": action.target_url} if action.target_url else {}
    repo.get_commit(action.sha).create_status(
        action.state, description=action.description, context=action.context, **kwargs
    )
    return StatusResult(action.sha, action.state, action.description)

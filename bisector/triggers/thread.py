"""Where the bot talks back: the PR's comment thread on GitHub, or files in a dry-run directory.

Both sides offer the same things: react to the command, read the author's permission, read the
PR's head commit (to pin it), upsert one answer comment by its hidden marker (through the publish
layer's sender), and publish a plan. The token is read from the config's env var here and handed only to PyGithub.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from bisector import publish
from bisector.config import Publish
from bisector.errors import BadInput
from bisector.publish.actions import CommentAction
from bisector.publish.github import RetryPolicy, connect, guard, own_login, upsert_comment
from bisector.publish.publish_plan import PublishPlan
from bisector.triggers import permissions
from bisector.triggers.event import CommentEvent

# Tests shrink the waits; production keeps GitHub's recommended spacing between writes.
RETRY_POLICY = RetryPolicy()


class Thread(Protocol):
    def react(self, content: str) -> None: ...

    def permission(self) -> permissions.Permission: ...

    def pull_head(self) -> str | None: ...

    def head_repo(self) -> str | None: ...

    def answer(self, marker: str, body: str) -> str: ...

    def publish(self, plan: PublishPlan) -> publish.PublishOutcome: ...

    def close(self) -> None: ...


def token_of(cfg: Publish, env: Mapping[str, str]) -> str:
    token = env.get(cfg.token_env, "")
    if not token.strip():
        raise BadInput(
            f"environment variable {cfg.token_env} (publish.token_env) is not set: it must hold the GitHub token"
        )
    return token


class GitHubThread:
    def __init__(self, event: CommentEvent, cfg: Publish, env: Mapping[str, str]) -> None:
        self.event, self.cfg, self.env = event, cfg, env
        self._token = token_of(cfg, env)
        self.gh = connect(self._token, cfg.base_url, RETRY_POLICY)
        with guard(f"reading repository {event.repo}", self._token):
            self.repo = self.gh.get_repo(event.repo)
        self._login: str | None = None
        self._head_repo: str | None = None
        self._head_read = False

    def react(self, content: str) -> None:
        with guard(f"reacting to comment {self.event.comment_id}", self._token):
            self.repo.get_issue(self.event.number).get_comment(self.event.comment_id).create_reaction(content)

    def permission(self) -> permissions.Permission:
        with guard(f"reading the permission of {self.event.login}", self._token):
            return permissions.lookup(self.repo, self.event.login)

    def pull_head(self) -> str:
        """The PR's head commit as GitHub has it now: the commit the authorized command measures."""
        with guard(f"reading the head of #{self.event.number}", self._token):
            head = self.repo.get_pull(self.event.number).head
            sha = head.sha
            self._head_repo = head.repo.full_name if head.repo is not None else None
            self._head_read = True
        if not sha:
            raise BadInput(f"#{self.event.number}: GitHub gave no head commit for this pull request")
        return sha

    def head_repo(self) -> str | None:
        """Where the PR's head branch lives ("owner/name"; None: a deleted fork), read with the head."""
        if not self._head_read:
            self.pull_head()
        return self._head_repo

    def answer(self, marker: str, body: str) -> str:
        with guard(f"commenting on #{self.event.number}", self._token):
            if self._login is None:
                self._login = own_login(self.gh, self.cfg.bot_login)
            return upsert_comment(self.repo, CommentAction(self.event.number, marker, body), self._login).url

    def publish(self, plan: PublishPlan) -> publish.PublishOutcome:
        return publish.publish(plan, self.cfg, self.env, None, RETRY_POLICY)

    def close(self) -> None:
        self.gh.close()


class DryRunThread:
    """Writes each payload to DIR/NN-<what>.json (and the comment bodies as .md); sends nothing."""

    def __init__(self, event: CommentEvent, cfg: Publish, env: Mapping[str, str], out: Path) -> None:
        self.event, self.cfg, self.env, self.out = event, cfg, env, Path(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"{out}: cannot create the dry-run directory: {exc.strerror}") from None
        self.count = len(list(self.out.glob("[0-9][0-9]-*.json")))
        self.answers: dict[str, str] = {}

    def _write(self, name: str, payload: dict[str, Any]) -> Path:
        self.count += 1
        path = self.out / f"{self.count:02d}-{name}.json"
        path.write_text(json.dumps({"base_url": self.cfg.base_url, **payload}, indent=2) + "\n")
        return path

    def react(self, content: str) -> None:
        self._write(
            "reaction",
            {
                "method": "POST",
                "path": f"/repos/{self.event.repo}/issues/comments/{self.event.comment_id}/reactions",
                "body": {"content": content},
            },
        )

    def permission(self) -> permissions.Permission:
        """No token in a dry run: the event's author_association (OWNER or MEMBER) decides."""
        return permissions.from_association(self.event.login, self.event.association)

    def pull_head(self) -> None:
        """No API in a dry run: nothing is pinned, the head is measured as fetched."""
        return None

    def head_repo(self) -> None:
        """No API in a dry run: where the head lives is not known (a fork's, for the fork policy)."""
        return None

    def answer(self, marker: str, body: str) -> str:
        path = self._write(
            f"comment-pr-{self.event.number}", CommentAction(self.event.number, marker, body).payload(self.event.repo)
        )
        path.with_suffix(".md").write_text(body)
        self.answers[marker] = body
        return str(path)

    def publish(self, plan: PublishPlan) -> publish.PublishOutcome:
        return publish.publish(plan, self.cfg, self.env, self.out / "publish", RETRY_POLICY)

    def close(self) -> None:
        pass

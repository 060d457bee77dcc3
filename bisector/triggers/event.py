"""Read a GitHub `issue_comment` event payload into a frozen CommentEvent, and decide if it is ours."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisector.errors import BadInput
from bisector.jsonfile import read_json


@dataclass(frozen=True)
class CommentEvent:
    action: str
    repo: str  # owner/name where the comment was made
    number: int  # the issue / PR number
    is_pull: bool
    comment_id: int
    body: str
    login: str
    user_type: str  # "User" | "Bot" | "Organization"
    association: str  # OWNER | MEMBER | COLLABORATOR | CONTRIBUTOR | NONE ...

    @property
    def is_bot(self) -> bool:
        return self.user_type == "Bot" or self.login.endswith("[bot]")


def _get(data: Any, path: str, where: str, kind: type | tuple[type, ...]) -> Any:
    value = data
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise BadInput(f"{where}: {path}: missing (not an issue_comment event?)")
        value = value[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadInput(f"{where}: {path}: must be {kind.__name__ if isinstance(kind, type) else kind}, got {value!r}")
    return value


def read_event(path: str | Path) -> CommentEvent:
    where = str(path)
    data = read_json(path)
    issue = _get(data, "issue", where, dict)
    return CommentEvent(
        action=_get(data, "action", where, str),
        repo=_get(data, "repository.full_name", where, str),
        number=_get(data, "issue.number", where, int),
        is_pull=bool(issue.get("pull_request")),
        comment_id=_get(data, "comment.id", where, int),
        body=_get(data, "comment.body", where, str) or "",
        login=_get(data, "comment.user.login", where, str),
        user_type=str((data["comment"]["user"] or {}).get("type", "User")),
        association=str(data["comment"].get("author_association", "NONE")),
    )


def ignore_reason(event: CommentEvent, bot_login: str | None = None) -> str | None:
    """Why the bot stays silent on this event, or None when it should look at the command."""
    if event.action != "created":
        return f"action is {event.action!r}: only new comments start runs (edits are ignored)"
    if not event.is_pull:
        return f"#{event.number} is an issue, not a pull request"
    if event.is_bot or (bot_login and event.login == bot_login):
        return f"comment by bot {event.login}"
    return None

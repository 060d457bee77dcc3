"""Who may start a run from a comment: write, maintain or admin on the repository, nobody else.

GitHub's permission endpoint folds roles into the legacy `permission` (maintain -> write,
triage -> read); the raw `role_name` is read where present so that a custom or triage role is
judged by what it really is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

ALLOWED = frozenset({"admin", "maintain", "write"})


@dataclass(frozen=True)
class Permission:
    login: str
    permission: str  # admin | write | read | none
    role_name: str | None = None  # admin | maintain | write | triage | read | a custom role

    @property
    def allowed(self) -> bool:
        if self.role_name in ALLOWED:
            return True
        if self.role_name is not None and self.role_name.lower() in ("triage", "read", "none"):
            return False
        return self.permission in ALLOWED

    @property
    def shown(self) -> str:
        return self.role_name or self.permission


class PermissionSource(Protocol):
    """What PyGithub's Repository offers (both read the same endpoint)."""

    def get_collaborator_permission(self, collaborator: str) -> str: ...

    def get_collaborator_role_name(self, collaborator: str) -> str: ...


def lookup(repo: PermissionSource, login: str) -> Permission:
    permission = repo.get_collaborator_permission(login)
    try:
        role = repo.get_collaborator_role_name(login)
    except (KeyError, AttributeError):  # older servers / PyGithub without role_name
        role = None
    return Permission(login, permission, role or None)


def from_association(login: str, association: str) -> Permission:
    """Dry runs without a token: the event's author_association, read conservatively."""
    permission = "write" if association in ("OWNER", "MEMBER") else "none"
    return Permission(login, permission, None)


def refusal(login: str, verb: str, perm: Permission) -> str:
    return (
        f"Sorry @{login}, `{verb}` runs benchmarks on the project's GPU runners, so it is limited to "
        f"people with write, maintain or admin permission on this repository (yours: {perm.shown}). "
        "A maintainer can post the same command for you."
    )

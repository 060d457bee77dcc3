"""The one secret filter: by a variable's name and by what its value looks like.

Used for every environment handed to code under test (trials, builds, import checks, `git apply`)
and at CLI start, where the bot's own environment is scrubbed before the command runs. It errs on
the side of dropping: a toolchain variable lost costs a clear build error, a token kept costs the
repository.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# The variable that holds the GitHub token, in the configs, the workflows and `Publish`'s default.
DEFAULT_TOKEN_ENV = "BISECTOR_GITHUB_TOKEN"

# Substrings of a name that mark a credential (AWS_SECRET_ACCESS_KEY, NPM_TOKEN, DB_PASSWORD, ...).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "PRIVATE", "COOKIE", "WEBHOOK")
# Whole `_`-separated parts of a name: MY_PAT, PAT_GITHUB, DB_PASS, SENTRY_DSN (never PATH or PATCH).
SECRET_PARTS = frozenset({"PAT", "PASS", "PW", "CRED", "CREDS", "DSN"})
# Whole families: the runner's GITHUB_* context, cloud and registry logins.
SECRET_PREFIXES = ("GITHUB_", "GH_", "AWS_", "AZURE_", "GOOGLE_", "HF_", "HUGGING", "NPM_", "PYPI_")
# Pointers to credential files or programs: the value is a path, what it names is the secret.
CREDENTIAL_POINTERS = frozenset(
    {
        "NETRC",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "KUBECONFIG",
        "DOCKER_CONFIG",
        "PGPASSFILE",
        "REGISTRY_AUTH_FILE",
        "BOTO_CONFIG",
        "VAULT_CONFIG_PATH",
    }
)
# Names that contain a secret word but are harmless and read by toolchains.
KEEP = frozenset({"KEYTIMEOUT", "TOKENIZERS_PARALLELISM"})

# A URL with a password: scheme://user:pass@host (DATABASE_URL, PIP_INDEX_URL with credentials).
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")
# Values shaped like a token, whatever the variable is called.
_TOKEN_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"gh[opsur]_[A-Za-z0-9_]{16,}"  # GitHub: personal, OAuth, app installation, user-to-server, refresh
    r"|github_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained PAT
    r"|glpat-[A-Za-z0-9_-]{16,}"  # GitLab PAT
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|npm_[A-Za-z0-9]{30,}"  # npm
    r"|pypi-[A-Za-z0-9_-]{40,}"  # PyPI API token
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    # a JWT: base64url {"... header . payload . signature
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r")"
)
# Webhook URLs carry their credential in the path (Slack, Discord, Teams, generic /webhooks/<id>/<token>).
_WEBHOOK_URL = re.compile(
    r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:[a-z0-9-]+\.)?discord(?:app)?\.com/api/webhooks/"
    r"|[a-z0-9.-]*webhook\.office\.com/"
    r"|[^\s/]+/(?:[^\s]*/)?(?:web)?hooks?/\S*[A-Za-z0-9_-]{16,})",
    re.IGNORECASE,
)
_PARTS = re.compile(r"[^A-Z0-9]+")


def secret_name(name: str) -> bool:
    """True when the name alone marks a credential."""
    upper = name.upper()
    if upper in KEEP:
        return False
    if upper in CREDENTIAL_POINTERS:
        return True
    if any(w in upper for w in SECRET_WORDS) or upper.startswith(SECRET_PREFIXES):
        return True
    return any(part in SECRET_PARTS for part in _PARTS.split(upper))


def secret_value(value: str) -> bool:
    """True when the value holds a URL with a password or something shaped like a token."""
    return bool(_URL_WITH_PASSWORD.search(value) or _TOKEN_VALUE.search(value) or _WEBHOOK_URL.search(value))


def is_secret(name: str, token_env: str | None = None, value: str | None = None) -> bool:
    """A credential by its name, by its value (when given), or because it is the configured token."""
    if token_env and name == token_env:
        return True
    return secret_name(name) or (value is not None and secret_value(value))


def scrub(environ: Mapping[str, str], token_env: str | None = None) -> dict[str, str]:
    """Every variable except those that are, or look like, credentials."""
    return {k: v for k, v in environ.items() if not is_secret(k, token_env, v)}


def secrets_in(environ: Mapping[str, str], token_env: str | None = None) -> dict[str, str]:
    """The variables `scrub` would drop."""
    return {k: v for k, v in environ.items() if is_secret(k, token_env, v)}

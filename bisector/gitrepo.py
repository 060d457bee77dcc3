"""Git through GitPython: open or clone an upstream, resolve refs, first-parent ranges, PR numbers."""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from pathlib import Path

import git
import platformdirs

from bisector.errors import BadInput, GitError, RefError
from bisector.model import Commit

# Config for every git the bot runs: no hook, no fsmonitor (each a command git would run). Given
# as GIT_CONFIG_COUNT variables, so GitPython's calls and plain subprocesses carry it alike.
NO_COMMANDS = {"core.hooksPath": "/dev/null", "core.fsmonitor": ""}


def quiet_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables that give git the `NO_COMMANDS` config (plus `extra`), above any file's."""
    pairs = {**NO_COMMANDS, **(extra or {})}
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for i, (key, value) in enumerate(pairs.items()):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


_SQUASH_PR = re.compile(r"\(#(\d+)\)\s*$")
_MERGE_PR = re.compile(r"^Merge pull request #(\d+)\b")
_URL = re.compile(r"^(https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


def pr_number(message: str) -> int | None:
    """PR number from a squash subject "... (#950)" or a merge commit "Merge pull request #950 ..."."""
    subject = message.strip().splitlines()[0] if message.strip() else ""
    for pattern in (_MERGE_PR, _SQUASH_PR):
        match = pattern.search(subject)
        if match:
            return int(match.group(1))
    return None


def is_url(path_or_url: str) -> bool:
    return bool(_URL.match(path_or_url))


def open_repo(path_or_url: str, cache_dir: Path | None = None, fetch: bool = True) -> git.Repo:
    """A local repository, or a URL cloned (or fetched when already cloned) into a cache dir."""
    if not is_url(path_or_url):
        path = Path(path_or_url).expanduser()
        if not path.exists():
            raise BadInput(f"{path_or_url}: no such directory")
        try:
            return _quiet(git.Repo(path, search_parent_directories=False))
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise BadInput(f"{path_or_url}: not a git repository") from None
    if path_or_url.startswith("file://"):
        _check_file_url(path_or_url)
    dest = mirror_path(path_or_url, cache_dir)
    root = dest.parent
    try:
        if dest.exists():
            repo = _quiet(git.Repo(dest))
            if fetch:
                repo.git.fetch("--prune", "origin")  # a mirror: refs/heads/* and refs/pull/* move
            return repo
        root.mkdir(parents=True, exist_ok=True)
        return _quiet(git.Repo.clone_from(path_or_url, dest, mirror=True, env=quiet_env()))
    except git.GitCommandError as exc:
        what = exc.command[1] if isinstance(exc.command, list) and len(exc.command) > 1 else "command"
        message = git_message(exc)
        if what == "clone" and _NOT_FOUND.search(message):
            raise BadInput(f"{path_or_url}: no git repository there (git clone: {message})") from None
        raise GitError(f"{path_or_url}: git {what} failed: {message}") from None


def _quiet(repo: git.Repo) -> git.Repo:
    """`repo` whose git commands run no hook and no fsmonitor (`NO_COMMANDS`)."""
    repo.git.update_environment(**quiet_env())
    return repo


def mirror_path(url: str, cache_dir: Path | None = None) -> Path:
    """Where `open_repo` keeps its mirror of `url`."""
    root = Path(cache_dir or platformdirs.user_cache_dir("bisector")) / "upstreams"
    name = re.sub(r"[^\w.-]+", "_", url.rstrip("/").split("/")[-1].removesuffix(".git"))
    return root / f"{name}-{hashlib.sha1(url.encode()).hexdigest()[:8]}"


_NOT_FOUND = re.compile(r"does not appear to be a git repository|repository .* not found|does not exist", re.I)


def git_message(exc: git.GitCommandError) -> str:
    """git's own complaint, on one line: the first `fatal:`/`error:` line of its stderr (GitPython
    wraps stderr in `stderr: '...'`; printing that raw showed `["'"]`)."""
    text = str(exc.stderr or "").strip()
    text = re.sub(r"^stderr: '", "", text).removesuffix("'")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "")
    return chosen.removeprefix("fatal: ").removeprefix("error: ") or f"exit {exc.status}"


def _check_file_url(url: str) -> None:
    """A file:// URL names a local path: say plainly when it is not there or not a repository."""
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
    if not path.exists():
        raise BadInput(f"{url}: no such repository ({path} does not exist)")
    try:
        git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BadInput(f"{url}: not a git repository ({path})") from None


def resolve(repo: git.Repo, ref: str) -> str:
    """Full SHA of a ref, a short SHA, or a remote branch name."""
    for candidate in (ref, f"origin/{ref}"):
        try:
            return str(repo.git.rev_parse("--verify", "--quiet", f"{candidate}^{{commit}}"))
        except git.GitCommandError:
            continue
    raise RefError(f"unknown ref {ref!r} in {repo.working_dir or repo.git_dir}")


def to_commit(c: git.Commit) -> Commit:
    return Commit(
        sha=c.hexsha,
        date=c.committed_datetime.isoformat(),
        author=c.author.name or "",
        subject=c.summary if isinstance(c.summary, str) else c.summary.decode(),
        pr=pr_number(c.message if isinstance(c.message, str) else c.message.decode()),
    )


def commit_range(repo: git.Repo, good: str, bad: str) -> tuple[Commit, ...]:
    """First-parent history GOOD..BAD, oldest first, with GOOD at index 0 and BAD last."""
    good_sha, bad_sha = resolve(repo, good), resolve(repo, bad)
    if good_sha == bad_sha:
        raise RefError(f"empty range: {good} and {bad} are the same commit")
    if not repo.is_ancestor(repo.commit(good_sha), repo.commit(bad_sha)):
        raise RefError(f"{good} is not an ancestor of {bad}")
    shas = repo.git.rev_list("--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()
    if not shas:
        raise RefError(f"empty range {good}..{bad}")
    if repo.git.rev_list("--first-parent", f"{bad_sha}").split().count(good_sha) == 0:
        # GOOD is an ancestor only through a merged side branch: a first-parent walk never meets it.
        raise RefError(f"{good} is not on the first-parent history of {bad}")
    return tuple(to_commit(repo.commit(sha)) for sha in [good_sha, *shas])


def merge_base(repo: git.Repo, a: str, b: str) -> str:
    bases = repo.merge_base(resolve(repo, a), resolve(repo, b))
    if not bases:
        raise RefError(f"{a} and {b} have no common ancestor")
    return bases[0].hexsha


def commit_diff(repo: git.Repo, sha: str) -> str:
    """The diff of one commit against its first parent, as a patch text."""
    return str(repo.git.diff(f"{sha}^1", sha, "--binary", "--full-index")) + "\n"


def revert_patch(repo: git.Repo, sha: str) -> str:
    """The reverse diff of one commit against its first parent, as a patch text."""
    return str(repo.git.diff(sha, f"{sha}^1", "--binary", "--full-index")) + "\n"


def file_at(repo: git.Repo, sha: str, path: str) -> str | None:
    """A file's text at a commit; None where the commit has no such file (or it is not text)."""
    try:
        return str(repo.git.show(f"{sha}:{path}", stdout_as_string=True, strip_newline_in_stdout=False))
    except (git.GitCommandError, UnicodeDecodeError):
        return None

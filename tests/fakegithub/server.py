"""A local GitHub REST server for tests: real HTTP on 127.0.0.1, in-memory state, scripted failures.

It answers the paths and JSON shapes PyGithub 2.x sends and expects (read from PyGithub's source)
for: repositories, issues and PRs, issue comments (paginated with Link headers), reactions,
collaborator permissions, pulls, git refs / branches / blobs / trees / commits, contents, commit
statuses and check runs. Point PyGithub at it with `Github(base_url=fake.url)`.

    fake = FakeGitHub(); fake.start()
    head = fake.add_repo("org/lib", {"src/k.py": "x = 1\n"})
    fake.add_pull("org/lib", 950, head_sha=head)
    fake.fail_next(r"/issues/950/comments$", status=502)       # one 502, then normal answers
    fake.rate_limit_next(kind="primary")                         # 403, Remaining: 0, reset 1 s ahead

Every request is recorded without its Authorization header; `auth_sha256` keeps a hash so a test
can check which token was sent without the server holding it (`fake.saw_token(token)`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
STATUS_STATES = ("error", "failure", "pending", "success")
NOW = "2026-08-20T00:00:00Z"


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers or {}
        self.body = {"message": message, "documentation_url": "https://docs.github.com/rest", **extra}


@dataclass
class Recorded:
    method: str
    path: str  # without the query string and without the server prefix
    query: dict[str, str]
    json: Any
    headers: dict[str, str]  # Authorization removed
    auth_scheme: str | None  # "token" / "Bearer" / None
    auth_sha256: str | None  # sha256 of the credential after the scheme
    status: int = 0


@dataclass
class Rule:
    pattern: re.Pattern[str]
    method: str | None
    count: int
    status: int
    body: dict[str, Any]
    headers: Callable[[], dict[str, str]]


@dataclass
class Repo:
    full_name: str
    id: int
    default_branch: str
    refs: dict[str, str] = field(default_factory=dict)  # "refs/heads/main" -> commit sha
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)


def _sha(kind: str, data: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest()


class FakeGitHub:
    def __init__(self, prefix: str = "", bot_login: str = "bisector-bot") -> None:
        self.prefix = prefix.rstrip("/")
        self.bot_login = bot_login
        self.requests: list[Recorded] = []
        self.repos: dict[str, Repo] = {}
        self.comments: dict[int, dict[str, Any]] = {}  # comment id -> comment (with "_repo", "_issue")
        self.reactions: dict[int, list[dict[str, Any]]] = {}  # comment id -> reactions
        self.objects: dict[str, tuple[str, Any]] = {}  # sha -> ("blob", bytes) | ("tree", {path: sha}) | ("commit", {})
        self._rules: list[Rule] = []
        self._ids = itertools.count(1000)
        self._token_sha: str | None = None
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._extra_headers: dict[str, str] = {}

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else keep-alive + delayed ACKs cost 40 ms a request

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _any(self) -> None:
                fake._handle(self)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"

    # ---- scripting -------------------------------------------------------------------------------
    def require_token(self, token: str) -> None:
        """Answer 401 Bad credentials unless this token is sent (only its hash is kept)."""
        self._token_sha = hashlib.sha256(token.encode()).hexdigest()

    def saw_token(self, token: str) -> bool:
        """True when every recorded request carried exactly this token."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return bool(self.requests) and all(r.auth_sha256 == digest for r in self.requests)

    def fail_next(
        self,
        path: str = ".*",
        status: int = 502,
        count: int = 1,
        method: str | None = None,
        message: str = "Server Error",
        headers: dict[str, str] | None = None,
    ) -> None:
        """The next `count` requests whose path matches the regex `path` get `status`."""
        self._rules.append(
            Rule(re.compile(path), method, count, status, {"message": message}, lambda: dict(headers or {}))
        )

    def rate_limit_next(
        self, path: str = ".*", kind: str = "primary", count: int = 1, method: str | None = None, wait_s: int = 1
    ) -> None:
        """primary: 403 'API rate limit exceeded', Remaining 0, reset `wait_s` ahead.
        secondary: 403 with Retry-After. retry-after: 429 with Retry-After."""
        if kind == "primary":
            self._rules.append(
                Rule(
                    re.compile(path),
                    method,
                    count,
                    403,
                    {"message": "API rate limit exceeded for user ID 1."},
                    lambda: {
                        "X-RateLimit-Limit": "5000",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Used": "5000",
                        "X-RateLimit-Reset": str(int(time.time()) + wait_s),
                    },
                )
            )
        elif kind in ("secondary", "retry-after"):
            status = 403 if kind == "secondary" else 429
            msg = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
            self._rules.append(
                Rule(re.compile(path), method, count, status, {"message": msg}, lambda: {"Retry-After": str(wait_s)})
            )
        else:
            raise ValueError(kind)

    # ---- seeding ---------------------------------------------------------------------------------
    def add_repo(self, full_name: str, files: dict[str, str | bytes] | None = None, branch: str = "main") -> str:
        """Create a repository whose `branch` holds one commit with `files`; returns that commit's sha."""
        with self._lock:
            repo = Repo(full_name, next(self._ids), branch)
            self.repos[full_name] = repo
            tree = self._put_tree(
                {p: self._put_blob(c.encode() if isinstance(c, str) else c) for p, c in (files or {}).items()}
            )
            sha = self._put_commit("initial", tree, [])
            repo.refs[f"refs/heads/{branch}"] = sha
            return sha

    def add_commit(
        self, full_name: str, files: dict[str, str | bytes | None], branch: str | None = None, message: str = "change"
    ) -> str:
        """Commit on top of `branch` (None deletes a file); returns the new commit's sha."""
        with self._lock:
            repo = self.repos[full_name]
            ref = f"refs/heads/{branch or repo.default_branch}"
            parent = repo.refs[ref]
            entries = dict(self.objects[self.objects[parent][1]["tree"]][1])
            for path, content in files.items():
                if content is None:
                    entries.pop(path, None)
                else:
                    entries[path] = self._put_blob(content.encode() if isinstance(content, str) else content)
            repo.refs[ref] = self._put_commit(message, self._put_tree(entries), [parent])
            return repo.refs[ref]

    def add_issue(self, full_name: str, number: int, title: str = "an issue", user: str = "alice") -> dict[str, Any]:
        with self._lock:
            issue = {"number": number, "title": title, "user": user, "state": "open", "body": "", "pull": False}
            self.repos[full_name].issues[number] = issue
            return issue

    def add_pull(
        self,
        full_name: str,
        number: int,
        head_sha: str | None = None,
        head_ref: str | None = None,
        base: str | None = None,
        title: str = "a pull request",
        user: str = "alice",
        draft: bool = False,
        head_repo: str | None = None,
    ) -> dict[str, Any]:
        """A PR (and its issue) whose head is `head_ref` (created at `head_sha` if missing); `head_repo`:
        the fork ("owner/name") its head branch lives in, the repository itself when None."""
        with self._lock:
            repo = self.repos[full_name]
            base = base or repo.default_branch
            head_ref = head_ref or f"pr-{number}"
            if f"refs/heads/{head_ref}" not in repo.refs:
                repo.refs[f"refs/heads/{head_ref}"] = head_sha or repo.refs[f"refs/heads/{base}"]
            self.add_issue(full_name, number, title, user)["pull"] = True
            pull = {
                "number": number,
                "title": title,
                "body": "",
                "user": user,
                "head": head_ref,
                "base": base,
                "draft": draft,
                "state": "open",
                "head_repo": head_repo,
            }
            repo.pulls[number] = pull
            return pull

    def add_comment(self, full_name: str, number: int, body: str, user: str = "alice") -> int:
        with self._lock:
            cid = next(self._ids)
            self.comments[cid] = {
                "id": cid,
                "body": body,
                "user": user,
                "_repo": full_name,
                "_issue": number,
                "created_at": NOW,
                "updated_at": NOW,
            }
            return cid

    def set_permission(self, full_name: str, user: str, permission: str) -> None:
        """admin | maintain | write | triage | read | none, as the permission endpoint reports it."""
        self.repos[full_name].permissions[user] = permission

    # ---- reading state ---------------------------------------------------------------------------
    def issue_comments(self, full_name: str, number: int) -> list[dict[str, Any]]:
        return [
            c
            for c in sorted(self.comments.values(), key=lambda c: c["id"])
            if c["_repo"] == full_name and c["_issue"] == number
        ]

    def ref(self, full_name: str, ref: str) -> str | None:
        return self.repos[full_name].refs.get(ref if ref.startswith("refs/") else f"refs/heads/{ref}")

    def file_at(self, full_name: str, ref: str, path: str) -> bytes | None:
        """The content of `path` at a branch name, full ref or commit sha."""
        sha = self.ref(full_name, ref) or ref
        kind, commit = self.objects[sha]
        assert kind == "commit"
        blob = self.objects[commit["tree"]][1].get(path)
        return None if blob is None else self.objects[blob][1]

    def requests_to(self, method: str, pattern: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # ---- git objects -----------------------------------------------------------------------------
    def _put_blob(self, data: bytes) -> str:
        sha = _sha("blob", data)
        self.objects[sha] = ("blob", data)
        return sha

    def _put_tree(self, entries: dict[str, str]) -> str:
        sha = _sha("tree", json.dumps(sorted(entries.items())).encode())
        self.objects[sha] = ("tree", dict(entries))
        return sha

    def _put_commit(self, message: str, tree: str, parents: list[str]) -> str:
        data = {"message": message, "tree": tree, "parents": list(parents), "date": NOW}
        sha = _sha("commit", json.dumps(data, sort_keys=True).encode() + str(next(self._ids)).encode())
        self.objects[sha] = ("commit", data)
        return sha

    def _object(self, sha: str, kind: str) -> Any:
        obj = self.objects.get(sha)
        if obj is None or obj[0] != kind:
            raise HTTPError(404, "Not Found")
        return obj[1]

    # ---- HTTP plumbing ---------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)
        if self.prefix and path.startswith(self.prefix):
            path = path[len(self.prefix) :]
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        auth = h.headers.get("Authorization")
        scheme, _, cred = (auth or "").partition(" ")
        kept = {k: v for k, v in h.headers.items() if k.lower() != "authorization"}
        digest = hashlib.sha256(cred.encode()).hexdigest() if auth else None
        rec = Recorded(h.command, path, query, payload, kept, scheme or None, digest)
        headers = {
            "X-RateLimit-Limit": "5000",
            "X-RateLimit-Remaining": "4999",
            "X-RateLimit-Reset": str(int(time.time()) + 3600),
            "X-RateLimit-Used": "1",
        }
        with self._lock:
            self.requests.append(rec)
            try:
                if raw and payload is None:
                    raise HTTPError(400, "Problems parsing JSON")
                rule = next(
                    (
                        r
                        for r in self._rules
                        if r.count > 0 and r.pattern.search(path) and r.method in (None, h.command)
                    ),
                    None,
                )
                if rule is not None:
                    rule.count -= 1
                    status, body, extra = rule.status, rule.body, rule.headers()
                else:
                    if self._token_sha is not None and rec.auth_sha256 != self._token_sha:
                        raise HTTPError(401, "Bad credentials")
                    status, body = self._route(h.command, path, query, payload)
                    extra, self._extra_headers = self._extra_headers, {}
            except HTTPError as exc:
                status, body, extra = exc.status, exc.body, exc.headers
            rec.status = status
        headers.update(extra)
        data = b"" if status == 204 else json.dumps(body).encode()
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        from tests.fakegithub.routes import ROUTES

        for verb, pattern, fn in ROUTES:
            m = pattern.fullmatch(path)
            if m and verb == method:
                return fn(self, query, body or {}, **m.groupdict())
        raise HTTPError(404, "Not Found")

    def _repo(self, owner: str, name: str) -> Repo:
        repo = self.repos.get(f"{owner}/{name}")
        if repo is None:
            raise HTTPError(404, "Not Found")
        return repo

    def _page(self, items: list[Any], query: dict[str, str], path: str) -> list[Any]:
        per_page = min(int(query.get("per_page", 30)), 100)
        page = int(query.get("page", 1))
        last = max(1, -(-len(items) // per_page))
        links = []
        rest = "&".join(f"{k}={quote(v)}" for k, v in query.items() if k not in ("page", "per_page"))
        base = f"{self.url}{path}?{rest + '&' if rest else ''}per_page={per_page}&page="
        if page < last:
            links.append(f'<{base}{page + 1}>; rel="next"')
            links.append(f'<{base}{last}>; rel="last"')
        if page > 1:
            links.append(f'<{base}{page - 1}>; rel="prev"')
            links.append(f'<{base}1>; rel="first"')
        if links:
            self._extra_headers = {"Link": ", ".join(links)}
        return items[(page - 1) * per_page : page * per_page]

    # ---- JSON shapes -----------------------------------------------------------------------------
    def _user(self, login: str) -> dict[str, Any]:
        uid = int(hashlib.sha1(login.encode()).hexdigest()[:6], 16)
        return {
            "login": login,
            "id": uid,
            "node_id": f"U_{uid}",
            "type": "User",
            "site_admin": False,
            "url": f"{self.url}/users/{login}",
            "html_url": f"{self.url}/{login}",
        }

    def _repo_json(self, r: Repo) -> dict[str, Any]:
        owner, name = r.full_name.split("/")
        return {
            "id": r.id,
            "node_id": f"R_{r.id}",
            "name": name,
            "full_name": r.full_name,
            "private": False,
            "owner": self._user(owner),
            "default_branch": r.default_branch,
            "fork": False,
            "url": f"{self.url}/repos/{r.full_name}",
            "html_url": f"{self.url}/{r.full_name}",
        }

    def _issue_json(self, r: Repo, i: dict[str, Any]) -> dict[str, Any]:
        n, api = i["number"], f"{self.url}/repos/{r.full_name}"
        out = {
            "id": r.id * 100000 + n,
            "node_id": f"I_{n}",
            "number": n,
            "title": i["title"],
            "body": i["body"],
            "state": i["state"],
            "user": self._user(i["user"]),
            "labels": [],
            "locked": False,
            "comments": len(self.issue_comments(r.full_name, n)),
            "created_at": NOW,
            "updated_at": NOW,
            "url": f"{api}/issues/{n}",
            "comments_url": f"{api}/issues/{n}/comments",
            "html_url": f"{self.url}/{r.full_name}/{'pull' if i['pull'] else 'issues'}/{n}",
        }
        if i["pull"]:
            out["pull_request"] = {"url": f"{api}/pulls/{n}", "html_url": out["html_url"]}
        return out

    def _comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        api = f"{self.url}/repos/{c['_repo']}"
        return {
            "id": c["id"],
            "node_id": f"IC_{c['id']}",
            "body": c["body"],
            "user": self._user(c["user"]),
            "created_at": c["created_at"],
            "updated_at": c["updated_at"],
            "author_association": "MEMBER",
            "url": f"{api}/issues/comments/{c['id']}",
            "issue_url": f"{api}/issues/{c['_issue']}",
            "html_url": f"{self.url}/{c['_repo']}/issues/{c['_issue']}#issuecomment-{c['id']}",
        }

    def _commit_json(self, r: Repo, sha: str, git: bool = False) -> dict[str, Any]:
        c = self._object(sha, "commit")
        api = f"{self.url}/repos/{r.full_name}"
        person = {"name": "bisector", "email": "bisector@example.invalid", "date": c["date"]}
        inner = {
            "sha": sha,
            "message": c["message"],
            "author": person,
            "committer": person,
            "tree": {"sha": c["tree"], "url": f"{api}/git/trees/{c['tree']}"},
            "url": f"{api}/git/commits/{sha}",
            "html_url": f"{self.url}/{r.full_name}/commit/{sha}",
            "parents": [{"sha": p, "url": f"{api}/git/commits/{p}"} for p in c["parents"]],
        }
        if git:
            return inner
        return {
            "sha": sha,
            "node_id": f"C_{sha}",
            "commit": inner,
            "url": f"{api}/commits/{sha}",
            "html_url": inner["html_url"],
            "files": [],
            "parents": [{"sha": p, "url": f"{api}/commits/{p}"} for p in c["parents"]],
        }

    def _ref_json(self, r: Repo, ref: str) -> dict[str, Any]:
        sha = r.refs[ref]
        api = f"{self.url}/repos/{r.full_name}"
        return {
            "ref": ref,
            "node_id": f"REF_{ref}",
            "url": f"{api}/git/{ref}",
            "object": {"sha": sha, "type": "commit", "url": f"{api}/git/commits/{sha}"},
        }

    def _pull_json(self, r: Repo, p: dict[str, Any]) -> dict[str, Any]:
        n, api = p["number"], f"{self.url}/repos/{r.full_name}"
        owner = r.full_name.split("/")[0]

        def side(ref: str, fork: str | None = None) -> dict[str, Any]:
            repo = (
                self._repo_json(r)
                if fork is None
                else {
                    **self._repo_json(r),
                    "full_name": fork,
                    "fork": True,
                    "name": fork.split("/")[1],
                    "owner": self._user(fork.split("/")[0]),
                }
            )
            who = owner if fork is None else fork.split("/")[0]
            return {
                "ref": ref,
                "label": f"{who}:{ref}",
                "sha": r.refs.get(f"refs/heads/{ref}", ""),
                "repo": repo,
                "user": self._user(who),
            }

        return {
            "id": r.id * 100000 + n,
            "node_id": f"PR_{n}",
            "number": n,
            "state": p["state"],
            "title": p["title"],
            "body": p["body"],
            "draft": p["draft"],
            "merged": False,
            "user": self._user(p["user"]),
            "head": side(p["head"], p.get("head_repo")),
            "base": side(p["base"]),
            "url": f"{api}/pulls/{n}",
            "issue_url": f"{api}/issues/{n}",
            "comments_url": f"{api}/issues/{n}/comments",
            "html_url": f"{self.url}/{r.full_name}/pull/{n}",
            "created_at": NOW,
            "updated_at": NOW,
        }

    def _resolve(self, r: Repo, ref: str) -> str:
        for candidate in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
            if candidate in r.refs:
                return r.refs[candidate]
        if self.objects.get(ref, ("",))[0] == "commit":
            return ref
        raise HTTPError(422, f"No commit found for SHA: {ref}")

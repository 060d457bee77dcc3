"""The REST endpoints of the fake GitHub: one small handler per (method, path), registered in ROUTES.

Each handler takes (fake, query, json body, **path groups) and returns (status, json), or raises
HTTPError with GitHub's error shape. Shapes follow what PyGithub 2.x reads.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

from tests.fakegithub.server import NOW, REACTIONS, STATUS_STATES, FakeGitHub, HTTPError, Repo, quote

# ---- routes: (method, path regex, handler(fake, query, body, **groups) -> (status, json)) ------------
Handler = Callable[..., tuple[int, Any]]
ROUTES: list[tuple[str, re.Pattern[str], Handler]] = []
_REPO = r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"


def route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        ROUTES.append((method, re.compile(pattern.replace("{repo}", _REPO)), fn))
        return fn

    return register


@route("GET", "/user")
def _get_user(f: FakeGitHub, q: dict, b: Any) -> tuple[int, Any]:
    return 200, f._user(f.bot_login)


@route("GET", "{repo}")
def _get_repo(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    return 200, f._repo_json(f._repo(owner, name))


def _issue(f: FakeGitHub, owner: str, name: str, number: str) -> tuple[Repo, dict[str, Any]]:
    r = f._repo(owner, name)
    issue = r.issues.get(int(number))
    if issue is None:
        raise HTTPError(404, "Not Found")
    return r, issue


@route("GET", "{repo}/issues/(?P<number>\\d+)")
def _get_issue(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, number: str) -> tuple[int, Any]:
    r, issue = _issue(f, owner, name, number)
    return 200, f._issue_json(r, issue)


@route("GET", "{repo}/issues/(?P<number>\\d+)/comments")
def _list_comments(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, number: str) -> tuple[int, Any]:
    r, issue = _issue(f, owner, name, number)
    items = [f._comment_json(c) for c in f.issue_comments(r.full_name, issue["number"])]
    return 200, f._page(items, q, f"/repos/{r.full_name}/issues/{number}/comments")


@route("POST", "{repo}/issues/(?P<number>\\d+)/comments")
def _create_comment(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, number: str) -> tuple[int, Any]:
    r, issue = _issue(f, owner, name, number)
    if not isinstance(b.get("body"), str) or not b["body"]:
        raise HTTPError(422, "Validation Failed", errors=[{"field": "body", "code": "missing_field"}])
    if len(b["body"]) > 65536:
        too_long = "body is too long (maximum is 65536 characters)"
        raise HTTPError(422, "Validation Failed", errors=[{"field": "body", "code": "custom", "message": too_long}])
    cid = f.add_comment(r.full_name, issue["number"], b["body"], user=f.bot_login)
    return 201, f._comment_json(f.comments[cid])


def _comment(f: FakeGitHub, owner: str, name: str, cid: str) -> dict[str, Any]:
    c = f.comments.get(int(cid))
    if c is None or c["_repo"] != f._repo(owner, name).full_name:
        raise HTTPError(404, "Not Found")
    return c


@route("GET", "{repo}/issues/comments/(?P<cid>\\d+)")
def _get_comment(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, cid: str) -> tuple[int, Any]:
    return 200, f._comment_json(_comment(f, owner, name, cid))


@route("PATCH", "{repo}/issues/comments/(?P<cid>\\d+)")
def _edit_comment(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, cid: str) -> tuple[int, Any]:
    c = _comment(f, owner, name, cid)
    if not isinstance(b.get("body"), str) or not b["body"]:
        raise HTTPError(422, "Validation Failed", errors=[{"field": "body", "code": "missing_field"}])
    c["body"], c["updated_at"] = b["body"], "2026-08-21T00:00:00Z"
    return 200, f._comment_json(c)


@route("DELETE", "{repo}/issues/comments/(?P<cid>\\d+)")
def _delete_comment(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, cid: str) -> tuple[int, Any]:
    f.comments.pop(_comment(f, owner, name, cid)["id"])
    return 204, None


@route("GET", "{repo}/issues/comments/(?P<cid>\\d+)/reactions")
def _list_reactions(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, cid: str) -> tuple[int, Any]:
    c = _comment(f, owner, name, cid)
    return 200, f._page(f.reactions.get(c["id"], []), q, f"/repos/{owner}/{name}/issues/comments/{cid}/reactions")


@route("POST", "{repo}/issues/comments/(?P<cid>\\d+)/reactions")
def _create_reaction(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, cid: str) -> tuple[int, Any]:
    c = _comment(f, owner, name, cid)
    if b.get("content") not in REACTIONS:
        raise HTTPError(422, "Validation Failed", errors=[{"field": "content", "code": "invalid"}])
    existing = [
        x for x in f.reactions.get(c["id"], []) if x["content"] == b["content"] and x["user"]["login"] == f.bot_login
    ]
    if existing:  # GitHub answers 200 with the same reaction instead of adding a second one
        return 200, existing[0]
    reaction = {
        "id": next(f._ids),
        "node_id": "RE",
        "content": b["content"],
        "user": f._user(f.bot_login),
        "created_at": NOW,
    }
    f.reactions.setdefault(c["id"], []).append(reaction)
    return 201, reaction


@route("GET", "{repo}/collaborators/(?P<user>[^/]+)/permission")
def _permission(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, user: str) -> tuple[int, Any]:
    perm = f._repo(owner, name).permissions.get(user, "none")
    role = {"admin": "admin", "maintain": "maintain", "write": "write", "triage": "triage", "read": "read"}
    legacy = {"maintain": "write", "triage": "read"}.get(perm, perm)  # GitHub's `permission` is the legacy name
    return 200, {"permission": legacy, "role_name": role.get(perm, "none"), "user": f._user(user)}


@route("GET", "{repo}/pulls/(?P<number>\\d+)")
def _get_pull(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, number: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    if int(number) not in r.pulls:
        raise HTTPError(404, "Not Found")
    return 200, f._pull_json(r, r.pulls[int(number)])


@route("GET", "{repo}/pulls")
def _list_pulls(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    state = q.get("state", "open")
    pulls = [p for _, p in sorted(r.pulls.items()) if state == "all" or p["state"] == state]
    if "head" in q:
        pulls = [p for p in pulls if f"{owner}:{p['head']}" == q["head"]]
    if "base" in q:
        pulls = [p for p in pulls if p["base"] == q["base"]]
    return 200, f._page([f._pull_json(r, p) for p in pulls], q, f"/repos/{r.full_name}/pulls")


@route("POST", "{repo}/pulls")
def _create_pull(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    head, base = b.get("head", ""), b.get("base", "")
    head = head.split(":", 1)[1] if ":" in head else head
    errors = [
        {"resource": "PullRequest", "field": k, "code": "invalid"}
        for k, ref in (("head", head), ("base", base))
        if f"refs/heads/{ref}" not in r.refs
    ]
    if not b.get("title"):
        errors.append({"resource": "PullRequest", "field": "title", "code": "missing_field"})
    if errors:
        raise HTTPError(422, "Validation Failed", errors=errors)
    if any(p["head"] == head and p["state"] == "open" for p in r.pulls.values()):
        exists = f"A pull request already exists for {owner}:{head}."
        error = {"resource": "PullRequest", "code": "custom", "message": exists}
        raise HTTPError(422, "Validation Failed", errors=[error])
    number = max([0, *r.issues]) + 1
    pull = f.add_pull(
        r.full_name,
        number,
        head_ref=head,
        base=base,
        title=b["title"],
        user=f.bot_login,
        draft=bool(b.get("draft", False)),
    )
    pull["body"] = b.get("body") or ""
    return 201, f._pull_json(r, pull)


@route("GET", "{repo}/branches/(?P<branch>.+)")
def _get_branch(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, branch: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    sha = r.refs.get(f"refs/heads/{branch}")
    if sha is None:
        raise HTTPError(404, "Branch not found")
    return 200, {
        "name": branch,
        "commit": f._commit_json(r, sha),
        "protected": False,
        "_links": {"self": f"{f.url}/repos/{r.full_name}/branches/{branch}"},
    }


@route("GET", "{repo}/git/ref/(?P<ref>.+)")
def _get_ref(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    if f"refs/{ref}" not in r.refs:
        raise HTTPError(404, "Not Found")
    return 200, f._ref_json(r, f"refs/{ref}")


@route("POST", "{repo}/git/refs")
def _create_ref(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    ref, sha = b.get("ref", ""), b.get("sha", "")
    if not ref.startswith("refs/") or ref.count("/") < 2:
        raise HTTPError(422, "Reference name must start with 'refs/' and have at least two slashes.")
    if ref in r.refs:
        raise HTTPError(422, "Reference already exists")
    if f.objects.get(sha, ("",))[0] != "commit":
        raise HTTPError(422, "Object does not exist")
    r.refs[ref] = sha
    return 201, f._ref_json(r, ref)


def _is_ancestor(f: FakeGitHub, old: str, new: str) -> bool:
    todo, seen = [new], set()
    while todo:
        sha = todo.pop()
        if sha == old:
            return True
        if sha not in seen:
            seen.add(sha)
            todo += f.objects[sha][1]["parents"]
    return False


@route("PATCH", "{repo}/git/refs/(?P<ref>.+)")
def _update_ref(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    full = f"refs/{ref}"
    if full not in r.refs:
        raise HTTPError(422, "Reference does not exist")
    sha = b.get("sha", "")
    if f.objects.get(sha, ("",))[0] != "commit":
        raise HTTPError(422, "Object does not exist")
    if not b.get("force") and not _is_ancestor(f, r.refs[full], sha):
        raise HTTPError(422, "Update is not a fast forward")
    r.refs[full] = sha
    return 200, f._ref_json(r, full)


@route("DELETE", "{repo}/git/refs/(?P<ref>.+)")
def _delete_ref(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    if r.refs.pop(f"refs/{ref}", None) is None:
        raise HTTPError(422, "Reference does not exist")
    return 204, None


@route("POST", "{repo}/git/blobs")
def _create_blob(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    content, encoding = b.get("content"), b.get("encoding", "utf-8")
    if not isinstance(content, str) or encoding not in ("utf-8", "base64"):
        raise HTTPError(422, "Validation Failed")
    sha = f._put_blob(base64.b64decode(content) if encoding == "base64" else content.encode())
    return 201, {"sha": sha, "url": f"{f.url}/repos/{r.full_name}/git/blobs/{sha}"}


@route("GET", "{repo}/git/blobs/(?P<sha>[0-9a-f]{40})")
def _get_blob(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, sha: str) -> tuple[int, Any]:
    r, data = f._repo(owner, name), f._object(sha, "blob")
    return 200, {
        "sha": sha,
        "size": len(data),
        "encoding": "base64",
        "content": base64.b64encode(data).decode(),
        "url": f"{f.url}/repos/{r.full_name}/git/blobs/{sha}",
    }


def _tree_json(f: FakeGitHub, r: Repo, sha: str) -> dict[str, Any]:
    entries = f._object(sha, "tree")
    api = f"{f.url}/repos/{r.full_name}"
    return {
        "sha": sha,
        "url": f"{api}/git/trees/{sha}",
        "truncated": False,
        "tree": [
            {
                "path": p,
                "mode": "100644",
                "type": "blob",
                "sha": s,
                "size": len(f.objects[s][1]),
                "url": f"{api}/git/blobs/{s}",
            }
            for p, s in sorted(entries.items())
        ],
    }


@route("POST", "{repo}/git/trees")
def _create_tree(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    """Trees are kept flat (full path -> blob); enough for the contents of a patch."""
    r = f._repo(owner, name)
    entries = dict(f._object(b["base_tree"], "tree")) if b.get("base_tree") else {}
    for e in b.get("tree", []):
        if e.get("type") != "blob" or e.get("mode") not in ("100644", "100755"):
            raise HTTPError(422, "Validation Failed", errors=[{"field": "tree", "code": "invalid"}])
        if "content" in e:
            entries[e["path"]] = f._put_blob(e["content"].encode())
        elif e.get("sha") is None:
            entries.pop(e["path"], None)
        elif f.objects.get(e["sha"], ("",))[0] == "blob":
            entries[e["path"]] = e["sha"]
        else:
            raise HTTPError(422, "Validation Failed", errors=[{"field": "tree.sha", "code": "invalid"}])
    return 201, _tree_json(f, r, f._put_tree(entries))


@route("GET", "{repo}/git/trees/(?P<sha>[0-9a-f]{40})")
def _get_tree(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, sha: str) -> tuple[int, Any]:
    return 200, _tree_json(f, f._repo(owner, name), sha)


@route("POST", "{repo}/git/commits")
def _create_commit(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    if f.objects.get(b.get("tree", ""), ("",))[0] != "tree" or not isinstance(b.get("message"), str):
        raise HTTPError(422, "Validation Failed", errors=[{"field": "tree", "code": "invalid"}])
    if any(f.objects.get(p, ("",))[0] != "commit" for p in b.get("parents", [])):
        raise HTTPError(422, "Validation Failed", errors=[{"field": "parents", "code": "invalid"}])
    sha = f._put_commit(b["message"], b["tree"], list(b.get("parents", [])))
    return 201, f._commit_json(r, sha, git=True)


@route("GET", "{repo}/git/commits/(?P<sha>[0-9a-f]{40})")
def _get_git_commit(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, sha: str) -> tuple[int, Any]:
    return 200, f._commit_json(f._repo(owner, name), sha, git=True)


@route("GET", "{repo}/commits/(?P<ref>[^/]+)")
def _get_commit(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    return 200, f._commit_json(r, f._resolve(r, ref))


@route("GET", "{repo}/contents/(?P<path>.+)")
def _get_contents(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, path: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    sha = f._resolve(r, q.get("ref", r.default_branch))
    entries = f._object(f._object(sha, "commit")["tree"], "tree")
    api = f"{f.url}/repos/{r.full_name}"

    def item(p: str) -> dict[str, Any]:
        data = f.objects[entries[p]][1]
        return {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": p.rsplit("/", 1)[-1],
            "path": p,
            "content": base64.b64encode(data).decode(),
            "sha": entries[p],
            "url": f"{api}/contents/{quote(p)}?ref={sha}",
            "git_url": f"{api}/git/blobs/{entries[p]}",
            "html_url": f"{f.url}/{r.full_name}/blob/{sha}/{p}",
            "download_url": None,
        }

    if path in entries:
        return 200, item(path)
    folder = path.rstrip("/") + "/"
    below = sorted(p for p in entries if p.startswith(folder) and "/" not in p[len(folder) :])
    if below:
        return 200, [item(p) for p in below]
    raise HTTPError(404, "Not Found")


@route("POST", "{repo}/statuses/(?P<sha>[^/]+)")
def _create_status(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, sha: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    if f.objects.get(sha, ("",))[0] != "commit":
        raise HTTPError(422, f"No commit found for SHA: {sha}")
    if b.get("state") not in STATUS_STATES:
        raise HTTPError(422, "Validation Failed", errors=[{"field": "state", "code": "invalid"}])
    if len(b.get("description") or "") > 140:
        raise HTTPError(422, "Validation Failed", errors=[{"field": "description", "code": "custom"}])
    sid = next(f._ids)
    status = {
        "id": sid,
        "node_id": f"S_{sid}",
        "sha": sha,
        "state": b["state"],
        "description": b.get("description"),
        "context": b.get("context", "default"),
        "target_url": b.get("target_url"),
        "created_at": NOW,
        "updated_at": NOW,
        "creator": f._user(f.bot_login),
        "url": f"{f.url}/repos/{r.full_name}/statuses/{sha}",
    }
    r.statuses.append(status)
    return 201, {k: v for k, v in status.items() if k != "sha"}


@route("GET", "{repo}/commits/(?P<ref>[^/]+)/statuses")
def _list_statuses(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    sha = f._resolve(r, ref)
    items = [{k: v for k, v in s.items() if k != "sha"} for s in reversed(r.statuses) if s["sha"] == sha]
    return 200, f._page(items, q, f"/repos/{r.full_name}/commits/{ref}/statuses")


@route("GET", "{repo}/commits/(?P<ref>[^/]+)/status")
def _combined_status(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    sha = f._resolve(r, ref)
    latest: dict[str, dict[str, Any]] = {}
    for s in r.statuses:
        if s["sha"] == sha:
            latest[s["context"]] = s
    states = {s["state"] for s in latest.values()}
    state = (
        "failure" if states & {"failure", "error"} else "pending" if "pending" in states or not states else "success"
    )
    return 200, {
        "state": state,
        "sha": sha,
        "total_count": len(latest),
        "statuses": [{k: v for k, v in s.items() if k != "sha"} for s in latest.values()],
        "repository": f._repo_json(r),
        "url": f"{f.url}/repos/{r.full_name}/commits/{sha}/status",
    }


def _check_json(f: FakeGitHub, r: Repo, c: dict[str, Any]) -> dict[str, Any]:
    return {
        **c,
        "node_id": f"CR_{c['id']}",
        "url": f"{f.url}/repos/{r.full_name}/check-runs/{c['id']}",
        "html_url": f"{f.url}/{r.full_name}/runs/{c['id']}",
    }


@route("POST", "{repo}/check-runs")
def _create_check_run(f: FakeGitHub, q: dict, b: Any, owner: str, name: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    if not b.get("name") or f.objects.get(b.get("head_sha", ""), ("",))[0] != "commit":
        raise HTTPError(422, "Validation Failed", errors=[{"field": "head_sha", "code": "invalid"}])
    cid = next(f._ids)
    run = {
        "id": cid,
        "name": b["name"],
        "head_sha": b["head_sha"],
        "status": b.get("status", "queued"),
        "conclusion": b.get("conclusion"),
        "output": b.get("output") or {},
        "details_url": b.get("details_url"),
        "external_id": b.get("external_id"),
        "started_at": b.get("started_at"),
        "completed_at": b.get("completed_at"),
    }
    if run["conclusion"] is not None:
        run["status"] = "completed"
    r.check_runs[cid] = run
    return 201, _check_json(f, r, run)


@route("PATCH", "{repo}/check-runs/(?P<cid>\\d+)")
def _update_check_run(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, cid: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    run = r.check_runs.get(int(cid))
    if run is None:
        raise HTTPError(404, "Not Found")
    run.update({k: v for k, v in b.items() if k in run})
    if run["conclusion"] is not None:
        run["status"] = "completed"
    return 200, _check_json(f, r, run)


@route("GET", "{repo}/commits/(?P<ref>[^/]+)/check-runs")
def _list_check_runs(f: FakeGitHub, q: dict, b: Any, owner: str, name: str, ref: str) -> tuple[int, Any]:
    r = f._repo(owner, name)
    sha = f._resolve(r, ref)
    runs = [_check_json(f, r, c) for c in r.check_runs.values() if c["head_sha"] == sha]
    return 200, {"total_count": len(runs), "check_runs": runs}

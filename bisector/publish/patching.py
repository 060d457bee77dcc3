"""Apply a verified patch to a few files with real `git apply`, without a checkout of the upstream.

The draft-PR sender fetches only the files a patch touches (at the patch's base commit), lets
git apply the patch to them in a scratch repository, and uploads the results. Using git itself
keeps every corner of the diff format (renames, new and deleted files, binary-safe bytes) right.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from bisector.errors import BadInput, PublishError


def _strip_prefix(raw: str) -> str | None:
    raw = raw.split("\t", 1)[0].strip()
    if raw.startswith('"') and raw.endswith('"'):
        raw = raw[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode()
    if raw == "/dev/null":
        return None
    if raw[:2] in ("a/", "b/"):
        raw = raw[2:]
    return raw


def touched_paths(patch: str) -> tuple[str, ...]:
    """Every path a git-format patch reads or writes, in order, from its file headers only."""
    paths: list[str] = []
    in_header = False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            in_header = True
            continue
        if line.startswith("@@"):
            in_header = False
            continue
        if not in_header:
            continue
        for prefix in ("--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to "):
            if line.startswith(prefix):
                path = _strip_prefix(line[len(prefix) :]) if prefix in ("--- ", "+++ ") else line[len(prefix) :]
                if path is not None and path not in paths:
                    paths.append(path)
    for path in paths:
        p = PurePosixPath(path)
        if p.is_absolute() or ".." in p.parts or not path:
            raise BadInput(f"patch: unsafe path {path!r}")
    if not paths:
        raise BadInput("patch: names no files (expected a git-format diff with 'diff --git' headers)")
    return tuple(paths)


def apply_patch(originals: Mapping[str, bytes | None], patch: str) -> dict[str, bytes | None]:
    """New content of every touched path (None = the patch deletes it or it does not exist)."""
    with tempfile.TemporaryDirectory(prefix="bisector-patch-") as tmp:
        root = Path(tmp)
        _git(root, "init", "-q")
        for path, content in originals.items():
            if content is not None:
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        (root / ".bisector.patch").write_text(patch if patch.endswith("\n") else patch + "\n")
        _git(root, "apply", "--whitespace=nowarn", ".bisector.patch")
        out: dict[str, bytes | None] = {}
        for path in originals:
            target = root / path
            out[path] = target.read_bytes() if target.is_file() else None
        return out


def _git(cwd: Path, *args: str) -> None:
    cmd = ["git", "-c", "core.autocrlf=false", *args]
    # A minimal environment: nothing of ours (least of all a token) reaches the subprocess.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")

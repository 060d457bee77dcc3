"""A small real git history whose LLVM pin moves between files the way FlyDSL's did in
cf1db2fe..4521c8cb (our own minimal files, not FlyDSL's): a pin in thirdparty/llvm-hash.txt, then
(like #945) that file deleted and the pin moved to thirdparty/llvm-build-info.json with a new LLVM
and a changed build script, then (like #989) an LLVM patch added that the script applies."""

from __future__ import annotations

import json
from pathlib import Path

from tests.gitfixtures import commit_file, git


def script(version: int) -> str:
    return f"#!/bin/bash\n# build llvm, version {version}\necho building\n"


def pin_history(repo: Path) -> dict[str, list[str]]:
    """Commits by era: "txt" (pin A in llvm-hash.txt), "json" (pin B in llvm-build-info.json),
    "patch" (pin B + the LLVM patch); every era has commits that touch only lib.py."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    commit_file(repo, "thirdparty/other-tools.json", '{"llvm_ref": "not the pin"}\n', "tools", 1)
    commit_file(repo, "scripts/build_llvm.sh", script(1), "llvm script", 1)
    eras: dict[str, list[str]] = {"txt": [], "json": [], "patch": []}
    eras["txt"].append(commit_file(repo, "thirdparty/llvm-hash.txt", "7f77ca0d\n", "pin llvm (#900)", 2))
    for k in range(2):
        eras["txt"].append(commit_file(repo, "lib.py", f"v = {k}\n", f"kernel {k} (#{901 + k})", 3 + k))
    # Like #945: the pin file is deleted and the pin moves into a JSON file, the script changes.
    git(repo, "rm", "-q", "thirdparty/llvm-hash.txt")
    (repo / "scripts" / "build_llvm.sh").write_text(script(2))
    git(repo, "add", "scripts/build_llvm.sh")
    info = {"upstream": {"repository": "https://example.invalid/llvm.git", "llvm_hash": "e2a39f50"}}
    eras["json"].append(
        commit_file(repo, "thirdparty/llvm-build-info.json", json.dumps(info, indent=2) + "\n", "bump llvm (#945)", 6)
    )
    eras["json"].append(commit_file(repo, "lib.py", "v = 10\n", "kernel 10 (#950)", 7))
    # Like #989: a patch the script applies to LLVM.
    (repo / "scripts" / "build_llvm.sh").write_text(script(3))
    git(repo, "add", "scripts/build_llvm.sh")
    eras["patch"].append(
        commit_file(repo, "thirdparty/llvm-rocdl-lld-argv0.patch", "--- a/x\n+++ b/x\n", "patch llvm (#989)", 8)
    )
    for k in range(2):
        eras["patch"].append(commit_file(repo, "lib.py", f"v = {20 + k}\n", f"kernel {20 + k} (#{990 + k})", 9 + k))
    return eras

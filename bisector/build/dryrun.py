"""How many times each build step of a range will run, read from each commit's files, building nothing.

A keyed step (one with `key_files`) runs once per distinct key: the LLVM of a FlyDSL range costs one
build per pin. A commit whose key files match nothing would fail that step, so it is listed as
missing before hours of builds find it. A step without key files runs once per distinct tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import git

from bisector.config import Build
from bisector.config.keyfiles import key_from_commit


@dataclass(frozen=True)
class StepBuilds:
    step: int  # 1-based, as in build logs ("step 1: ...")
    run: str
    keyed: bool
    distinct_keys: int  # builds of this step the range needs (per distinct tree when not keyed)
    missing: tuple[str, ...]  # commits whose key files match nothing: the step would fail there

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "run": self.run,
            "keyed": self.keyed,
            "distinct_keys": self.distinct_keys,
            "missing": list(self.missing),
        }


def step_builds(repo: git.Repo, shas: Sequence[str], build: Build) -> tuple[StepBuilds, ...]:
    """One entry per command step; none for the `none` and `pip` recipes (they have no steps)."""
    if build.recipe != "command":
        return ()
    trees = len({repo.commit(sha).tree.hexsha for sha in shas})
    out = []
    for i, step in enumerate(build.steps, start=1):
        if not step.key_files:
            out.append(StepBuilds(i, step.run, False, trees, ()))
            continue
        keys, missing = set(), []
        for sha in shas:
            key = key_from_commit(repo, sha, step.key_files)
            if key.ok:
                keys.add(key.files)
            else:
                missing.append(sha)
        out.append(StepBuilds(i, step.run, True, len(keys), tuple(missing)))
    return tuple(out)

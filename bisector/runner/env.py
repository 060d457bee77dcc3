"""The trial's environment: secrets scrubbed, one device pinned, a JIT cache of the commit's own."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from benches.allocator import DEFAULTS as MALLOC_DEFAULTS
from bisector.isolation.safe_fs import SafeDir
from bisector.trust.filter import is_secret, scrub

# The one secret filter lives in bisector.trust.filter; these names stay importable from here.
__all__ = ["is_secret", "scrub", "pin_device", "pin_allocator", "jit_dir", "prepare_jit", "FIXED_MALLOC"]


def pin_device(env: dict[str, str], device: str, index: int) -> None:
    """One device per trial. ROCm honours HIP_VISIBLE_DEVICES; a CUDA_VISIBLE_DEVICES set as well
    would filter a second time (index 0 of the remaining list), so it is removed there. An index
    counts among the devices `env` already shows (a runner that sees GPUs 2,3: index 1 is GPU 3)."""

    def physical(var: str) -> str:
        visible = [v.strip() for v in env.get(var, "").split(",") if v.strip()]
        return visible[index] if index < len(visible) else str(index)

    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = physical("CUDA_VISIBLE_DEVICES")
    elif device == "rocm":
        env["HIP_VISIBLE_DEVICES"] = physical("HIP_VISIBLE_DEVICES")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.pop("ROCR_VISIBLE_DEVICES", None)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["HIP_VISIBLE_DEVICES"] = ""


# glibc's malloc serves large blocks from fresh mmaps (page faults on every use) until a first free
# raises its threshold, at a moment that depends on the process's history. On the CPU that gave one
# demo kernel one of two speeds ~10% apart per process, and once a whole commit the slow one (an
# import had moved the moment): a "+19%" step that no code made. With the thresholds fixed its ratio
# CV fell from 3.8-5.6% to 1.6-2.4% (studies/results/cpu-demo-noise.txt); other shapes were unchanged.
# The values are benches/allocator.py's, which the trial sets again itself after its imports.
FIXED_MALLOC = {name: str(value) for name, value in MALLOC_DEFAULTS.items()}


def pin_allocator(env: dict[str, str], device: str) -> None:
    """CPU trials: fixed glibc malloc thresholds, over whatever the bot's environment holds (a
    config's own choice, `protocol.env`, is applied after). Inherited values are not a choice:
    dask's Nanny writes MALLOC_TRIM_THRESHOLD_=65536 into the os.environ of the process that starts
    it (`distributed.nanny.pre-spawn-environ`), so a bot that had run a LocalCluster, and every dask
    worker, passed a 64 KiB trim threshold on to its CPU trials: the heap trimmed between calls, a
    build's kernel faulting thousands of pages a call (studies/results/cpu-slow-builds.txt, part 10)."""
    if device == "cpu":
        env.update(FIXED_MALLOC)


def jit_dir(work: Path, sha: str, patch_hash: str | None = None) -> Path:
    """<work>/jit/<sha>[-<patch_hash>]: never shared between commits (or patches)."""
    return Path(work) / "jit" / (f"{sha}-{patch_hash}" if patch_hash else sha)


def prepare_jit(work: Path, sha: str, patch_hash: str | None, names: tuple[str, ...], first: bool) -> dict[str, str]:
    """Env vars pointing each JIT cache variable to its own dir under the commit's JIT dir; the
    whole dir is emptied before the commit's first trial, so that trial's compile is cold.

    Every trial may write `<work>/jit` (they share one sandbox), so the bot makes these dirs from
    its own fd of it and follows no link there (bisector/isolation/safe_fs.py): a link a trial put
    at another commit's name is removed, not written through.

    Trials of one commit are set up at once (held trials; dask workers in other processes), first
    trials too: one's emptying removed the dir under another's mkdir (FileNotFoundError) or met
    its new files (OSError, directory not empty) and failed that setup. So the old dir is renamed
    away in one step before it is removed, and a dir whose parent another setup renamed away
    meanwhile is made again. No lock: the JIT dirs are writable by the trials, and a lock file a
    trial can open is one it can hold, stalling the bot's setups."""
    root = jit_dir(work, sha, patch_hash)
    with SafeDir.open(Path(work), "jit", create=True) as jit:
        if first:
            aside = f"{root.name}.emptied-{os.getpid()}-{time.monotonic_ns()}"
            if jit.rename(root.name, aside):  # nothing there yet, or another first trial's setup moved it
                jit.remove(aside)  # a trial still writing there may leave some behind
        out = {}
        for name in names:
            _make_dir(jit, root.name, name.lower())
            out[name] = str(root / name.lower())
    return out


def _make_dir(jit: SafeDir, commit: str, var: str, tries: int = 20) -> None:
    """jit/<commit>/<var>, made where missing, again where another setup renamed the commit's dir
    away between its making and the var dir's."""
    for attempt in range(tries):
        try:
            with jit.sub(commit, create=True, clear_other=True) as root, root.sub(var, create=True, clear_other=True):
                return
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EEXIST) or attempt == tries - 1:
                raise

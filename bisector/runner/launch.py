"""Run one trial in a fresh subprocess and turn whatever it left into TrialRecords.

A crash, hang, OOM or illegal memory access in the subject is a recorded failure with the log
tail, never an exception here: the bot lives on. The full log stays on disk next to the spec.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bisector.config import Config
from bisector.errors import TrialError
from bisector.model import BuildResult, Shape, TrialRecord, TrialStatus
from bisector.runner import lock
from bisector.runner.env import pin_allocator, pin_device, prepare_jit, scrub
from bisector.runner.spec import benches_root, build_spec

TAIL_CHARS = 4000
_STATUS = {"ok": TrialStatus.OK, "wrong": TrialStatus.WRONG, "crash": TrialStatus.CRASH,
           "unavailable": TrialStatus.UNAVAILABLE, "timeout": TrialStatus.TIMEOUT}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def log_tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - chars))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def trial_env(config: Config, build: BuildResult, work: Path, device_index: int, first: bool,
              environ: Mapping[str, str]) -> dict[str, str]:
    env = scrub(environ, config.publish.token_env)
    pin_device(env, config.device, device_index)
    env.update(prepare_jit(work, build.sha, build.patch_hash, config.protocol.jit_cache_env, first))
    env.update(config.protocol.env)
    pin_allocator(env, config.device)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (benches_root(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _record(sha: str, raw: Mapping[str, Any], out: Mapping[str, Any], common: Mapping[str, Any]) -> TrialRecord:
    status = _STATUS.get(str(raw.get("status")), TrialStatus.CRASH)

    def num(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    extra = {k: raw[k] for k in ("flops", "seed", "control_first_s", "mismatched", "tolerance") if k in raw}
    return TrialRecord(
        sha=sha, shape=str(raw["shape"]), status=status,
        subject_ms=tuple(raw.get("subject_ms") or ()), control_ms=tuple(raw.get("control_ms") or ()),
        subject_tflops=num("subject_tflops"), control_tflops=num("control_tflops"), ratio=num("ratio"),
        compile_s=num("compile_s"), max_abs_err=num("max_abs_err"), max_rel_err=num("max_rel_err"),
        error=str(raw.get("error", "")),
        log_tail="" if status == TrialStatus.OK else (raw.get("traceback") or common["tail"]),
        telemetry=dict(out.get("telemetry") or {}), machine=dict(out.get("machine") or {}),
        protocol={**(out.get("protocol") or {}), **extra, "log_path": common["log"],
                  "trial_wall_s": round(common["seconds"], 3)},
        patch_hash=common["patch_hash"], started_at=common["started"], finished_at=common["finished"])


def cpu_pinning(config: Config, index: int) -> Callable[[], None] | None:
    """On the CPU with several `devices`, each is a core: pin the trial there so two run side by side."""
    if config.device != "cpu" or len(config.devices) < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    core = index % (os.cpu_count() or 1)
    return lambda: os.sched_setaffinity(0, {core})


def run_trial(config: Config, build: BuildResult, suite: str | None, *, work: str | Path, trial_index: int = 0,
              first: bool = False, device_index: int | None = None, timeout_s: float | None = None,
              shapes: Sequence[Shape] | None = None, seed: int | None = None,
              environ: Mapping[str, str] | None = None) -> tuple[TrialRecord, ...]:
    """One trial process of `suite` (None: every suite of `shapes`) on `build`: one TrialRecord per shape.

    `first` empties the commit's JIT cache dir first (the caller knows which trial is first);
    `trial_index` picks the input seed (config seed + index, unless `seed` is given) and, by
    default, the device."""
    work = Path(work).resolve()
    seed = config.protocol.seed + trial_index if seed is None else seed
    spec = build_spec(config, build, suite, seed=seed, shapes=tuple(shapes) if shapes is not None else None)
    tag = build.sha[:12] + (f"-{build.patch_hash}" if build.patch_hash else "")
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
    tdir = work / "trials" / tag / f"{suite or 'all'}-{trial_index:03d}-{stamp}"
    tdir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = tdir / "spec.json", tdir / "out.json", tdir / "log.txt"
    spec_path.write_text(json.dumps(spec, indent=1))
    index = config.devices[trial_index % len(config.devices)] if device_index is None else device_index
    env = trial_env(config, build, work, index, first, os.environ if environ is None else environ)
    limit = config.protocol.timeout_s if timeout_s is None else timeout_s

    started, t0, timed_out = _now(), time.monotonic(), False
    with lock.gpu_lock(config.device, [index]), open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen([sys.executable, "-m", "benches.trial", str(spec_path), str(out_path)],
                                    cwd=tdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=cpu_pinning(config, index))
        except OSError as exc:
            raise TrialError(f"cannot start trial process {sys.executable}: {exc}") from exc
        try:
            code: int | None = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            code = proc.wait()
        finally:
            # Interrupted (Ctrl-C), or the trial left children behind (compile workers): the
            # process group is the trial's own session, so nothing else is touched.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if proc.poll() is None:
                proc.wait()
    seconds = time.monotonic() - t0

    try:
        out = json.loads(out_path.read_text())
    except (OSError, ValueError):
        out = {}
    common = {"tail": log_tail(log_path), "log": str(log_path), "patch_hash": build.patch_hash,
              "started": started, "finished": _now(), "seconds": seconds}
    done = {str(r.get("shape")): r for r in out.get("results", []) if isinstance(r, dict) and "shape" in r}
    records = []
    for shape in spec["shapes"]:
        raw = done.get(shape["key"])
        if raw is None:
            if timed_out:
                raw = {"shape": shape["key"], "status": "timeout",
                       "error": f"trial timed out after {limit:g} s (killed); shape not measured"}
            else:
                raw = {"shape": shape["key"], "status": "crash",
                       "error": f"trial process ended ({_exit_text(code)}) before measuring this shape"}
        records.append(_record(build.sha, raw, out, common))
    return tuple(records)


class Launcher:
    """run_trial bound to a config and a work dir: the `TrialRunner` that bisector.probe expects.

    Trials go to the config's devices in turn."""

    def __init__(self, config: Config, work: str | Path, *, timeout_s: float | None = None) -> None:
        self.config, self.work, self.timeout_s, self.count = config, Path(work), timeout_s, 0
        self._count_lock = threading.Lock()

    def __call__(self, build: BuildResult, suite: str | None, shapes: Sequence[Shape], *, first: bool,
                 seed: int) -> tuple[TrialRecord, ...]:
        with self._count_lock:  # the probe launches trials from several threads, one per device
            index = self.count
            self.count += 1
        return run_trial(self.config, build, suite, work=self.work, trial_index=index, first=first,
                         shapes=shapes, seed=seed, timeout_s=self.timeout_s)

"""Trials of one config: their environment, their files, and what their processes leave, as TrialRecords.

A crash, hang, OOM or illegal memory access in the subject is a recorded failure with the log
tail, never an exception here: the bot lives on. The full log stays on disk next to the spec.

The environment has two parts. The worker's (fixed for the config, given when its process
starts, before `import torch`): secrets scrubbed, the protocol's variables, the CPU allocator's
thresholds, a read-only copy of `benches` alone on the path (bisector/isolation/instrument.py: the
bot's own package is never importable there). The trial's (given with the trial): its device and its JIT
cache dirs, which CUDA and Triton read when first used.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import signal
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from bisector import portable
from bisector.config import AUTOTUNE_CACHE, Config
from bisector.isolation import sandbox
from bisector.isolation.cgroups import Limits
from bisector.isolation.instrument import snapshot, without_bot
from bisector.isolation.memwatch import limit_bytes
from bisector.isolation.safe_fs import Refused, SafeDir
from bisector.isolation.sandbox import sandbox_env
from bisector.model import CALL_KEYS, BuildResult, Shape, TrialRecord, TrialStatus
from bisector.runner.env import pin_allocator, pin_device, prepare_jit, scrub
from bisector.runner.executor import Executor, Prelude, Prepared, TrialJob
from bisector.runner.spec import build_spec
from bisector.runner.workers import SOURCES, WorkerSource, make_source

TAIL_CHARS = 4000
LOG, SPEC, OUT = "log.txt", "spec.json", "out.json"  # in each trial's own dir
SHM = "/dev/shm"  # a sandbox's own tmpfs: the trial's scratch there (`TrialFiles._scratch`)
TMP_VARS = ("TMPDIR", "TEMP", "TMP")
_STATUS = {
    "ok": TrialStatus.OK,
    "wrong": TrialStatus.WRONG,
    "crash": TrialStatus.CRASH,
    "unavailable": TrialStatus.UNAVAILABLE,
    "timeout": TrialStatus.TIMEOUT,
}


def _iso(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds") if t else ""


def log_tail(trial_dir: SafeDir | None, chars: int = TAIL_CHARS) -> str:
    """The end of the trial's `log.txt`, read from the trial's dir as the bot made and opened it:
    a log the trial replaced by a link (to an ancestor's environ, say), a FIFO or a hard link is
    not read, and the tail says so."""
    if trial_dir is None:
        return ""
    try:
        return trial_dir.tail(LOG, chars).decode("utf-8", "replace")
    except Refused as exc:
        return f"(log not read: {exc.strerror})"
    except OSError:
        return ""


def worker_env(config: Config, environ: Mapping[str, str], work: Path) -> dict[str, str]:
    """What every trial process of `config` starts with, before it imports anything."""
    env = scrub(environ, config.publish.token_env)
    pin_allocator(env, config.device)
    env.update(config.protocol.env)  # a config's explicit choice wins
    path = (str(snapshot()), without_bot(env.get("PYTHONPATH", "")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    env = sandbox_env(env, work / "scratch")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def trial_env(
    config: Config, build: BuildResult, work: Path, device_index: int, first: bool, base: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The variables one trial sets on top of its worker's (and those it unsets): device, JIT dirs."""
    jit = prepare_jit(work, build.sha, build.patch_hash, config.protocol.jit_cache_env, first)
    if config.keeps_autotune:  # the choices' key holds the kernel's source: a patched build's tunes again
        jit[AUTOTUNE_CACHE] = "1"
    return device_env(config, device_index, base, jit)


def device_env(
    config: Config, device_index: int, base: Mapping[str, str], jit: Mapping[str, str] | None = None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """What every trial on `device_index` sets (and unsets) on top of `base`, plus a build's `jit`
    dirs when given (`trial_env`). Without them, what an idle worker opens the device with before
    its trial is known (`Prelude`)."""
    env = dict(base)
    pin_device(env, config.device, device_index)
    env.update(jit or {})
    env.update(config.protocol.env)  # a config's explicit choice wins
    changed = {k: v for k, v in env.items() if base.get(k) != v}
    return changed, tuple(k for k in base if k not in env)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0 or code >= 128:
        n = -code if code < 0 else code - 128
        try:
            return f"killed by {signal.Signals(n).name}"
        except ValueError:
            return f"killed by signal {n}"
    return f"exit code {code}"


# What a shape's result says beside its timings, kept as it came in the record's protocol.
_PROTOCOL_EXTRAS = (
    "flops",
    "seed",
    "control_first_s",
    "mismatched",
    "tolerance",
    "bytes",
    "subject_gbps",
    "control_gbps",
    "peak_gbps",
    "control_impl",
    "benchmark",
    "latency_calls",
    "latency_start",
    "env_imports",
    "kernel_fallback",
    "control_status",
    "control_error",
    "check",
    "precompile",
    "precompile_s",
    "timed_faults",
    "input_page_offsets",
    "ratio_disturbed",
    "disturbed_reads",
    "warm_subject_ms",
    "warm_control_ms",
    "warm_ratio",
    "precompile_parts",
    "compile_parts",
)


def _record(sha: str, raw: Mapping[str, Any], out: Mapping[str, Any], common: Mapping[str, Any]) -> TrialRecord:
    status = _STATUS.get(str(raw.get("status")), TrialStatus.CRASH)

    def num(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    extra = {k: raw[k] for k in _PROTOCOL_EXTRAS if k in raw}
    return TrialRecord(
        sha=sha,
        shape=str(raw["shape"]),
        status=status,
        subject_ms=tuple(raw.get("subject_ms") or ()),
        control_ms=tuple(raw.get("control_ms") or ()),
        subject_tflops=num("subject_tflops"),
        control_tflops=num("control_tflops"),
        ratio=num("ratio"),
        compile_s=num("compile_s"),
        max_abs_err=num("max_abs_err"),
        max_rel_err=num("max_rel_err"),
        error=str(raw.get("error", "")),
        log_tail="" if status == TrialStatus.OK else (raw.get("traceback") or common["tail"]),
        telemetry=dict(out.get("telemetry") or {}),
        machine=dict(out.get("machine") or {}),
        protocol={
            **(out.get("protocol") or {}),
            **extra,
            "log_path": common["log"],
            "trial_wall_s": round(common["seconds"], 3),
            "timeline": common["timeline"],
            "worker": common["worker"],
            "isolation": common["isolation"],
            "phases": out.get("phases") or [],
            **(
                {"cold_compile": common["cold_compile"][raw["shape"]]}
                if raw["shape"] in common.get("cold_compile", {})
                else {}
            ),
        },
        patch_hash=common["patch_hash"],
        started_at=common["started"],
        finished_at=common["finished"],
        slot=common["slot"],
        kernel_method=str(raw.get("kernel_method") or ""),
        latency_ratio=num("latency_ratio"),
        **{k: tuple(raw.get(k) or ()) for k in CALL_KEYS},
    )


def records(
    job: TrialJob, prepared: Prepared, out: Mapping[str, Any], info: Mapping[str, Any]
) -> tuple[TrialRecord, ...]:
    """One TrialRecord per shape of the job, from the trial's output file and how its process ended;
    no path of this machine in them (bisector/portable.py): paths under the work dir relative to it."""
    recs = _records(job, prepared, out, info)
    work = prepared.cwd.parents[2]  # <work>/trials/<tag>/<slot-stamp>: TrialFiles.prepare
    where = portable.roots(work)
    return tuple(
        replace(
            r,
            protocol=portable.scrub_value(r.protocol, where, work),  # type: ignore[arg-type]
            log_tail=portable.scrub(r.log_tail, where),
            error=portable.scrub(r.error, where),
        )
        for r in recs
    )


def _uses_gpu(env: Mapping[str, str]) -> bool:
    """A trial pinned to a GPU (runner/env.pin_device leaves both empty for the CPU)."""
    return bool(env.get("CUDA_VISIBLE_DEVICES") or env.get("HIP_VISIBLE_DEVICES"))


def _records(
    job: TrialJob, prepared: Prepared, out: Mapping[str, Any], info: Mapping[str, Any]
) -> tuple[TrialRecord, ...]:
    timeline = info["timeline"]
    start = timeline.get("assigned") or timeline.get("submitted")
    end = timeline.get("ended") or start
    common = {
        "tail": log_tail(prepared.dir),
        "log": str(prepared.log_path),
        "patch_hash": job.build.patch_hash,
        "started": _iso(start),
        "finished": _iso(end),
        "seconds": (end or 0) - (start or 0),
        "timeline": timeline,
        "slot": job.slot,
        "worker": info.get("worker", {}),
        "isolation": sandbox.trial_isolation(_uses_gpu(prepared.env)),
        "cold_compile": dict(job.cold_compile or {}),
    }
    done = {str(r.get("shape")): r for r in out.get("results", []) if isinstance(r, dict) and "shape" in r}
    recs = []
    for shape in job.shapes:
        raw = done.get(shape.key)
        if raw is None:
            if info.get("breach"):
                raw = {"shape": shape.key, "status": "crash", "error": f"trial {info['breach']}; shape not measured"}
            elif info.get("timed_out"):
                raw = {
                    "shape": shape.key,
                    "status": "timeout",
                    "error": f"trial timed out after {info['timeout_s']:g} s (killed); shape not measured",
                }
            else:
                raw = {
                    "shape": shape.key,
                    "status": "crash",
                    "error": f"trial process ended ({_exit_text(info.get('exit_code'))}) before measuring this shape",
                }
        recs.append(_record(job.build.sha, raw, out, common))
    return tuple(recs)


def default_ahead(config: Config) -> int:
    """Workers kept ready per device: on a GPU host enough to hide imports behind device time,
    a few cores each; on the CPU none (the 'devices' are the cores the trials time on)."""
    if config.protocol.ahead is not None:
        return config.protocol.ahead
    if config.device == "cpu":
        return 0
    # Setup and precompile (off the device) take ~5 s a trial on the H200 demo, the device ~1 s:
    # about five trials must prepare at once to keep it fed.
    return max(1, min(6, (os.cpu_count() or 4) // (2 * len(config.devices))))


def memory_limit(config: Config) -> int:
    """Bytes a trial's process tree may hold: the config's, else half the machine shared by the devices."""
    return limit_bytes(config.protocol.memory_gb, len(config.devices))


def default_parallel(config: Config) -> int:
    """Prefetches at once: the config's, else a quarter of the host's cores on a GPU host and 0
    (off) on the CPU, whose cores are the devices. With dask only as standbys (the trials held on
    the workers, `DaskExecutor.submit`): a precompile would run on the bot's host, not where the
    trials run. 0 where there is no JIT cache dir to keep warm."""
    if not config.protocol.jit_cache_env or (config.executor.kind != "local" and not config.protocol.standby):
        return 0
    if config.protocol.prefetch is not None:
        return config.protocol.prefetch
    return 0 if config.device == "cpu" else max(1, (os.cpu_count() or 4) // 4)


def held_room(config: Config) -> int:
    """Trials the warmer may hold set up at once, standbys and spares: 2 x `parallel` each."""
    return 4 * default_parallel(config)


def default_preload(config: Config) -> tuple[str, ...]:
    if config.protocol.preload is not None:
        return config.protocol.preload
    adapters = {s.adapter for s in config.subjects.values()}
    # Triton for its adapter, and on a GPU for a library called through its own Python (`callable`):
    # most such libraries are Triton kernels, and each trial process otherwise imports Triton and
    # hashes its compiler (`triton_key`, 0.3-0.4 s) in its first call; a library without Triton
    # only gives the zygote an import it does not use.
    gpu_callable = "callable" in adapters and config.device != "cpu"
    extra: tuple[str, ...] = ("triton",) if "triton" in adapters or gpu_callable else ()
    if "pytest" in adapters:  # the upstream's pytest session: pytest and its plugins (benches/pytest_preload.py)
        extra += ("benches.pytest_preload",)
    return ("torch", "benches.trial", *extra)


class TrialFiles:
    """Where one config's trials keep their spec, output and log, and how each is turned into records."""

    def __init__(self, config: Config, work: Path, base_env: Mapping[str, str], pin_cpu: bool | None = None) -> None:
        self.config, self.work, self.base_env = config, Path(work).resolve(), dict(base_env)
        # CPU trials on several cores each take their own core (a dask worker owns one core, and pins too).
        self.pin_cpu = config.device == "cpu" and (len(config.devices) > 1 if pin_cpu is None else pin_cpu)
        self._count = 0
        self._lock = threading.Lock()

    def prepare(self, job: TrialJob, device: int, precompile_only: bool = False) -> Prepared:
        """A fresh dir for the trial, made and opened by the bot below its own work dir without
        following a link (other trials may write `trials/`: one could have planted a link at this
        commit's name), its spec and empty log made there, and its environment. `precompile_only`:
        a prefetch's trial (bisector/measure/warmer.py), which compiles and never times."""
        with self._lock:
            self._count += 1
            n = self._count
        tag = job.build.sha[:12] + (f"-{job.build.patch_hash}" if job.build.patch_hash else "")
        stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
        name = f"{job.slot:03d}-{stamp}-{os.getpid()}-{n}"
        spec = build_spec(self.config, job.build, None, seed=job.seed, shapes=job.shapes)
        if precompile_only:
            spec["precompile_only"] = True
        else:
            spec["checked_path"] = str(self.checked_path(job))
        with SafeDir.open(self.work, "trials", create=True) as trials, trials.sub(tag, True, True) as commit:
            tdir = commit.fresh(name)
        try:
            tdir.create(SPEC, json.dumps(spec, indent=1).encode())
            tdir.create(LOG)
            env, unset = trial_env(self.config, job.build, self.work, device, job.first, self.base_env)
            scratch_in, ended = self._scratch(name, env)
        except BaseException:
            tdir.close()
            raise
        cpu = device % (os.cpu_count() or 1) if self.pin_cpu else None
        path = self.work / "trials" / tag / name
        return Prepared(
            path / SPEC,
            path / OUT,
            path / LOG,
            path,
            env,
            unset,
            cpu,
            spec=spec,
            dir=tdir,
            scratch_in=scratch_in,
            ended=ended,
        )

    def _scratch(self, name: str, env: dict[str, str]) -> tuple[str, Callable[[], None] | None]:
        """The trial's temp dir, its own and gone when it ends. In the sandbox: a dir the worker makes
        in the sandbox's private /dev/shm, a tmpfs of SHM_MB (bisector/isolation/sandbox.py) whose pages
        count against the trial's memory limit, removed by the worker, or by its zygote when the
        worker was killed, and gone with the sandbox. Elsewhere: `<work>/scratch/<trial>`, made and
        removed by the bot through its own fd of `scratch/` (what the trial left there is deleted
        without following a link); no quota there but the disk's."""
        if sandbox.applies(self.config.device != "cpu"):
            return SHM, None
        with SafeDir.open(self.work, "scratch", create=True) as scratch:
            scratch.fresh(name).close()
        for var in TMP_VARS:
            env[var] = str(self.work / "scratch" / name)

        def remove() -> None:
            with SafeDir.open(self.work, "scratch", create=True) as scratch:
                scratch.remove(name)

        return "", remove

    def prelude(self, device: int) -> Prelude:
        """The device environment an idle worker opens its device in (benches.worker.open_device)."""
        env, unset = device_env(self.config, device, self.base_env)
        return Prelude(self.config.device, env, unset)

    def checked_path(self, job: TrialJob) -> Path:
        """The file naming the shapes whose output at this build passed the correctness check, with
        their tolerance: written by the bot as it stores each trial, read by the later trials of the
        build with the device held, which then skip the check (once per commit and shape). Outside
        the dirs a trial may write."""
        tag = job.build.sha + (f"-{job.build.patch_hash}" if job.build.patch_hash else "")
        return self.work / "checked" / f"{tag}.json"

    def records(
        self, job: TrialJob, prepared: Prepared, out: Mapping[str, Any], info: Mapping[str, Any]
    ) -> tuple[TrialRecord, ...]:
        """`records`, and the shapes this trial checked and passed noted for the build's later trials."""
        recs = records(job, prepared, out, info)
        passed = {
            r.shape: list(cast("Iterable[Any]", r.protocol.get("tolerance") or ()))
            for r in recs
            if r.status is TrialStatus.OK and r.max_abs_err is not None and r.protocol.get("tolerance")
        }
        if passed:
            path = self.checked_path(job)
            with self._lock:
                try:
                    known = json.loads(path.read_text())
                except (OSError, ValueError):
                    known = {}
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps({**known, **passed}, indent=1))
                os.replace(tmp, path)
        return recs


@dataclass(frozen=True)
class SourceArgs:
    """Everything a config's worker source is made from: two equal ones make the same workers."""

    kind: str
    env: tuple[tuple[str, str], ...]
    preload: tuple[str, ...]
    work: Path
    gpu: bool
    limits: Limits

    @property
    def writable(self) -> list[Path]:
        return [self.work / "trials", self.work / "jit", self.work / "scratch"]  # all the sandbox lets a trial write

    def make(self) -> WorkerSource:
        for path in self.writable:
            path.mkdir(parents=True, exist_ok=True)
        return make_source(
            self.kind,
            dict(self.env),
            self.preload,
            self.work / "workers",
            self.writable,
            gpu=self.gpu,
            limits=self.limits,
        )


def source_args(
    config: Config, work: str | Path, environ: Mapping[str, str] | None = None, source: str | None = None
) -> SourceArgs:
    work = Path(work).resolve()
    kind = source or config.protocol.workers
    if kind not in SOURCES:
        raise ValueError(f"unknown worker source {kind!r} (known: {', '.join(SOURCES)})")
    base = worker_env(config, os.environ if environ is None else environ, work)
    return SourceArgs(
        kind,
        tuple(sorted(base.items())),
        tuple(default_preload(config)),
        work,
        config.device != "cpu",
        Limits(memory_limit(config), config.protocol.max_tasks),
    )  # each trial's cgroup, where there are any


_EARLY: dict[SourceArgs, WorkerSource] = {}


def start_workers(config: Config, work: str | Path) -> None:
    """Start the worker source `make_executor` will make for `config` and `work` now, before the
    command imports the rest of the bot (the search, the report): its zygote's imports (torch,
    Triton: ~7 s on a fresh H200 host) then overlap the bot's own. Started from the executor, the
    zygote began 2.8 s into the 389-commit range on that host and 4 s into `bisector run` on a busy
    2-core VM. A source no executor takes is closed at exit."""
    if config.executor.kind != "local":
        return
    args = source_args(config, work)
    if args not in _EARLY:
        _EARLY[args] = args.make()


@atexit.register
def _close_early() -> None:
    while _EARLY:
        _EARLY.popitem()[1].close()


def make_executor(
    config: Config,
    work: str | Path,
    *,
    environ: Mapping[str, str] | None = None,
    source: str | None = None,
    ahead: int | None = None,
    timeout_s: float | None = None,
    lock_devices: bool = True,
    pin_cpu: bool | None = None,
) -> Executor:
    """The executor of one config's trials, with its worker source (the one `start_workers` started
    for them, if any) and limits."""
    args = source_args(config, work, environ, source)
    work = args.work
    files = TrialFiles(config, work, dict(args.env), pin_cpu)
    workers = _EARLY.pop(args, None) or args.make()
    return Executor(
        workers,
        config.devices,
        config.device,
        files.prepare,
        files.records,
        ahead=default_ahead(config) if ahead is None else ahead,
        timeout_s=config.protocol.timeout_s if timeout_s is None else timeout_s,
        memory_bytes=memory_limit(config),
        lock_devices=lock_devices,
        prelude=files.prelude,
        learn_imports=config.protocol.learn_imports,
    )


def run_trial(
    config: Config,
    build: BuildResult,
    suite: str | None,
    *,
    work: str | Path,
    trial_index: int = 0,
    first: bool = False,
    timeout_s: float | None = None,
    shapes: Sequence[Shape] | None = None,
    seed: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[TrialRecord, ...]:
    """One trial process of `suite` (None: every suite of `shapes`) on `build`, on its own: one record per shape.

    `first` empties the commit's JIT cache dir first; `trial_index` picks the input seed (config
    seed + index, unless `seed` is given)."""
    chosen = tuple(s for s in (shapes if shapes is not None else config.shapes) if suite in (None, s.suite))
    build_spec(config, build, suite, seed=0, shapes=chosen)  # a bad suite is bad input, before any process
    seed = config.protocol.seed + trial_index if seed is None else seed
    with make_executor(config, work, environ=environ, source="spawn", ahead=0, timeout_s=timeout_s) as executor:
        (outcome,) = executor.run([TrialJob(build, chosen, seed, slot=trial_index, first=first)])
    return outcome.records


__all__ = [
    "SourceArgs",
    "TrialFiles",
    "device_env",
    "make_executor",
    "records",
    "run_trial",
    "source_args",
    "start_workers",
    "trial_env",
    "worker_env",
]

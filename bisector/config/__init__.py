"""TOML -> validated, frozen Config. Every problem is reported as `file: key: problem`."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benches import control_limits
from bisector.config import subjects as config_suites
from bisector.config.keyfiles import pattern_problem
from bisector.config.reader import Section as _Section
from bisector.config.reader import show as _show
from bisector.config.subjects import Subject, SuiteModule
from bisector.config.warm_cache_key import parse_caches
from bisector.errors import ConfigError
from bisector.model import Shape, for_shape, min_step_for
from bisector.paths import absolute
from bisector.trust.filter import DEFAULT_TOKEN_ENV
from bisector.userfile import UserFileError, read_text

SUITES = ("fa", "gemm")
RECIPES = ("none", "pip", "command")
DEVICES = ("cpu", "cuda", "rocm")
CONTROLS = ("torch", "torch_cuda", "aiter", "none")
SUBJECT_ADAPTERS = config_suites.SUBJECT_ADAPTERS
DTYPES = ("bf16", "fp16", "fp32", "fp8")
WORKER_SOURCES = ("fork", "spawn")
CPU_CLOCKS = ("cpu", "wall")  # benches.timing.CPU_CLOCKS
DEFAULT_SHARED_ENV = "BISECTOR_SHARED_DIR"


@dataclass(frozen=True)
class Upstream:
    repo: str  # git URL or local path
    branch: str = "main"
    source_dir: str = "."  # inside the checkout: what the trial imports from


@dataclass(frozen=True)
class BuildStep:
    run: str
    timeout_s: float = 3600.0
    env: Mapping[str, str] = field(default_factory=dict)
    # Files whose content keys this step's output on its own (e.g. an LLVM pin), so that a range
    # with one pin change costs two builds of the heavy dependency, not one per commit. The last
    # part of an entry may hold wildcards; each entry must match a file (bisector/config/keyfiles.py).
    key_files: tuple[str, ...] = ()
    shared_dir: str | None = None  # env var name that receives the shared output dir


@dataclass(frozen=True)
class Build:
    recipe: str = "none"
    pip_args: tuple[str, ...] = ("--no-deps",)
    steps: tuple[BuildStep, ...] = ()
    import_check: str | None = None  # module imported after the build; failure = SKIP
    cache_dir: str | None = None
    cache_max_gb: float = 50.0
    parallel: int = 1  # background prefetch builds at once
    # Patched builds of a culprit's parent the hunk search may make; for a compiled upstream each is
    # a full build of the project (its LLVM stays cached), so a 40-hunk refactor is bounded.
    max_hunk_builds: int = 12
    max_hunk_trials: int = 64  # trial processes the hunk search of one culprit may run (subsets and parent)
    memory_gb: float = 0.0  # a build step's process tree is killed above this (0: half the RAM)
    max_tasks: int = 8192  # processes and threads of one build step (its cgroup's pids.max, where there is one)
    # Build steps share the host's network (to download); else their own namespace, loopback only.
    network: bool = False


# The decisions' defaults (issue #59); replays of the committed stores decide every planted step as
# before with them (python -m studies.store_replay); the CPU demo's config turns two off (it says why).
DECISION_TRIALS = 6
DRIFT_ANCHOR_S = 20.0


@dataclass(frozen=True)
class Protocol:
    """The cold protocol: one process per trial, fresh JIT cache per commit, flush per rep."""

    trials: int = 3  # first trials per commit; the search doubles up to max_trials
    max_trials: int = 24
    # Trials a commit gets first once the run's trial noise is known: a step of many noise widths
    # is then decided with one trial a side (bisector/search/__init__.py).
    first_look: int = 1
    reps: int = 20  # timed repetitions per trial, subject and control alternating
    warmup: int = 3
    # GPU: replays of the timing graph that are read (benches/kernel_time.graph_times): 1 (the first
    # only warms the clock) or 2 (half the repetitions a replay, half the device time), per suite or
    # shape like `min_step_pct`: `graph_reads = { default = 1, gemm = 2 }`.
    graph_reads: int = 1
    graph_reads_by: Mapping[str, int] = field(default_factory=dict)
    # GPU, where one replay is read: ms of untimed subject/control calls the timing graph starts with,
    # replayed once, instead of a whole unread first replay (benches/kernel_time.graph_times' heater);
    # 0 keeps the unread replay. Per suite or shape like `graph_reads`.
    graph_heat_ms: float = 0.0
    graph_heat_ms_by: Mapping[str, float] = field(default_factory=dict)
    # GPU: ms since the device's last timed work before a shape's timed repetitions (the device left
    # idle for what is left of it; such shapes are timed first in a trial), per suite or shape like
    # `graph_reads`. A short kernel timed right after heavy ones runs in the clock dip their power cap
    # left (H200: 1300-1450 MHz, back to 1980 within 100-200 ms; the demo's decode GEMM read 32 us
    # after the big shapes and 25 us alone: studies/results/h200-clock-settle.txt).
    settle_ms: float = 0.0
    settle_ms_by: Mapping[str, float] = field(default_factory=dict)
    flush_mb: int = 0  # 0 = sized from the device (>= 2x last-level cache)
    # CPU trials: "cpu" times a single-threaded trial by its process's CPU time, which other
    # processes sharing its core do not inflate (benches/timing.py); "wall" by wall time.
    cpu_clock: str = "cpu"
    timeout_s: float = 600.0
    jit_cache_env: tuple[str, ...] = ("TRITON_CACHE_DIR",)
    env: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    # How trial processes come to be (bisector/runner/workers.py): "fork" from a zygote that
    # imported torch once, or "spawn" one interpreter per trial. Each process runs one trial.
    workers: str = "fork"
    ahead: int | None = None  # workers kept ready per device (None: from the CPU count; 0 on CPU)
    preload: tuple[str, ...] | None = None  # modules a worker imports before its trial (None: torch, triton)
    # On a GPU the modules trials import from the environment are imported once by the zygote
    # (benches/env_preload.py); false: each trial imports them itself, as before.
    learn_imports: bool = True
    # On a GPU, Triton's autotune choices are kept in the commit's own JIT cache dir
    # (TRITON_CACHE_AUTOTUNING=1, with TRITON_CACHE_DIR in `jit_cache_env`): a commit's first trial
    # tunes cold, its later trials reuse the choice, so their first call needs no benchmark runs under
    # the lock and can be captured in the setup. Triton keeps nothing by default: fla opts in itself
    # (its first trials tuned 6.95 s under the lock, its later ones 0.002 s), flash-attention's Triton
    # layer norm and Liger's DyT do not. false: every trial tunes again, unless the library opts in.
    keep_autotune: bool = True
    memory_gb: float = 0.0  # a trial's process tree is killed above this (0: half the RAM over the devices)
    max_tasks: int = 8192  # processes and threads of one trial (its cgroup's pids.max, where there is one)
    # New commits the search may need next, built and compiled cold at once while it measures
    # (bisector/measure/warmer.py). None: a quarter of the cores on a GPU host, off on the CPU; 0: off.
    prefetch: int | None = None
    # ... as held first trials of the run's own executor (set up to the device's gate, unheld when
    # the search asks: bisector/measure/warmer.py); false: precompile-only trials, their compile kept.
    standby: bool = True
    # A commit the search splits a part at is measured on the shapes that moved, or may have, between
    # the part's ends; false: on every shape (bisector/search/__init__.py, SearchSettings.split_on_moved).
    split_on_moved: bool = True
    # A verification's fresh trials measure the step's shapes and those its pair has not shown the
    # same; false: every shape (SearchSettings.verify_on_open).
    verify_on_open: bool = True
    # Trials a side one pair's decision may reach where its question is near the threshold (0:
    # max_trials): a pair still unclear there is reported undecided with its interval, not doubled on
    # (SearchSettings.decision_trials). On by default: studies/results/decisions-drift.txt.
    decision_trials: int = DECISION_TRIALS
    # Seconds of trial time between re-measurements of GOOD that tell drift with time from steps,
    # each shape then decided on the view that does not drift (SearchSettings.anchor_s); 0: none.
    drift_anchor_s: float = DRIFT_ANCHOR_S


METRICS = ("ratio", "speed")
LATENCY_STEPS = ("never", "host-bound")
TIMINGS = ("kernel", "latency")


@dataclass(frozen=True)
class Thresholds:
    min_step_pct: float = 1.0
    # A suite's or a shape's own minimum step, over `min_step_pct`:
    # `min_step_pct = { default = 3.0, "gemm/decode" = 5.0 }` (model.min_step_for says why).
    min_steps: Mapping[str, float] = field(default_factory=dict)
    alpha: float = 0.01
    # What the search compares per trial. "ratio": the subject/control ratio, which cancels drift.
    # "speed": the subject's own speed at full clock (1 / its full-clock time), for when the
    # subject's power draw slows the control run right after it (seen on the H200: a dropped L2
    # remap slowed SDPA by the same 5%, hiding the step in the ratio).
    # One metric for every suite, or a table per suite (`metric = { fa = "speed", gemm = "ratio" }`):
    # on the H200 the ratio hid the attention steps while a power-throttled GEMM's own speed varied
    # by 4% from trial to trial and its ratio by 1% (measured on one H200).
    metric: str = "ratio"
    metrics: Mapping[str, str] = field(default_factory=dict)  # suite -> metric, over `metric`
    # Per-suite tolerances of the correctness check, as (atol, rtol).
    tolerances: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # Which time per call the metric is taken from (benches/kernel_time.py). "kernel": the kernels'
    # own time, cold cache, the host out of the loop (a CUDA graph, else the profiler): what an
    # inference engine running its decode step in a CUDA graph sees. "latency": back-to-back eager
    # calls, the host's dispatch included. Both are stored and reported; on the CPU they are one.
    # One for every suite or a table per suite, as `metric` (`timing = { gemm = "latency" }`).
    timing: str = "kernel"
    timings: Mapping[str, str] = field(default_factory=dict)
    # Steps of at least the minimum step are found, changes under half of it are not steps, and a
    # pair between is reported as a small change with its interval (SearchSettings.zone).
    indifference_zone: bool = True
    # Where call latency is a shape of its own, tested for steps beside the kernel time:
    # "host-bound" (where the trial measured latency because the call is not device-bound), "never".
    latency_steps: str = "host-bound"

    def min_step(self, shape: str) -> float:
        """The minimum step of `shape` ("suite/name"), in percent."""
        return min_step_for(shape, self.min_step_pct, self.min_steps)

    def metric_of(self, suite: str) -> str:
        return self.metrics.get(suite, self.metric)

    def timing_of(self, suite: str) -> str:
        return self.timings.get(suite, self.timing)

    def decision_of(self, suite: str) -> str:
        """The metric on the timing: "ratio", "speed", "latency_ratio" or "latency_speed"."""
        metric = self.metric_of(suite)
        return f"latency_{metric}" if self.timing_of(suite) == "latency" else metric


@dataclass(frozen=True)
class Publish:
    repo: str | None = None  # owner/name
    token_env: str = DEFAULT_TOKEN_ENV  # the one name, in the workflows too (tests/test_workflows.py)
    base_url: str = "https://api.github.com"
    comment_on_culprit: bool = True
    comment_on_requester: bool = True
    draft_pr: bool = False
    commit_status: bool = True
    # Whose comments `upsert` may edit when the token cannot read its own login (an Actions or app
    # installation token); a personal token's login is asked from GitHub.
    bot_login: str = "github-actions[bot]"


@dataclass(frozen=True)
class Triggers:
    """How `/perf` and `/bisect` comments are served (bisector/triggers/)."""

    # Measure a fork's code on a host that gives it no sandbox (GPU trials run unsandboxed): off
    # unless the config says so by name (bisector/triggers/fork_policy.py).
    allow_unsandboxed_forks: bool = False


@dataclass(frozen=True)
class Sandbox:
    """The sandbox around code under test (bisector/isolation/sandbox.py)."""

    # True: a run of this config stops (one line, exit 3) where the host gives code under test no
    # sandbox; False: it runs unsandboxed there, fork code included; None (unset): required for a
    # fork's code (`/perf`, `/bisect`) unless `[triggers] allow_unsandboxed_forks`, not otherwise.
    require: bool | None = None


EXECUTORS = ("local", "dask")


@dataclass(frozen=True)
class Executor:
    """Where trials run (bisector/runner/choose.py): `local`, this host's devices; `dask`, the
    GPU workers of a dask.distributed scheduler at `address` ("local": a cluster started on this
    host, one worker per visible device)."""

    kind: str = "local"
    address: str | None = None
    # Commits the search probes at once; None: the devices the executor has (1 for an offline replay
    # of a dask run, whose workers are not asked: give the run's width to replay it as it ran).
    width: int | None = None


def executor_problem(kind: str, address: str | None) -> str:
    """Why (kind, address) cannot be used, or "" (shared by the config and `--executor`)."""
    if kind not in EXECUTORS:
        return f"must be one of {', '.join(EXECUTORS)}, got {_show(kind)}"
    if address is None:
        return ""
    if kind == "local":
        return "only a dask executor has an address"
    if address == "local":
        return ""
    m = re.fullmatch(r"(?:(tcp|tls|ucx)://)?(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", address)
    if not m or not 0 < int(m.group(3)) < 65536:
        return f'must be "local" or a scheduler address such as tcp://host:8786, got {_show(address)}'
    return ""


AUTOTUNE_CACHE = "TRITON_CACHE_AUTOTUNING"  # Triton's autotuner: its choices kept in TRITON_CACHE_DIR


@dataclass(frozen=True)
class Config:
    name: str
    path: str
    upstream: Upstream
    build: Build
    device: str
    devices: tuple[int, ...]
    control: str
    subjects: Mapping[str, Subject]  # suite -> subject
    shapes: tuple[Shape, ...]
    protocol: Protocol
    thresholds: Thresholds
    publish: Publish
    report_dir: str = "reports"
    store: str | None = None  # SQLite path; None = user cache dir
    description: str = ""
    suite_modules: Mapping[str, SuiteModule] = field(default_factory=dict)  # suites the user brings
    caches: Mapping[str, str] = field(default_factory=dict)  # suite -> "warm" (config/warm_cache_key.py); else cold
    executor: Executor = Executor()
    triggers: Triggers = Triggers()
    sandbox: Sandbox = Sandbox()

    @property
    def keeps_autotune(self) -> bool:
        """Whether the bot has Triton keep autotune choices in each commit's JIT cache dir
        (`Protocol.keep_autotune`): on a GPU, where TRITON_CACHE_DIR is one of its JIT variables."""
        return (
            self.protocol.keep_autotune and self.device != "cpu" and "TRITON_CACHE_DIR" in self.protocol.jit_cache_env
        )

    def shape(self, key: str) -> Shape:
        for s in self.shapes:
            if s.key == key:
                return s
        raise KeyError(key)


def select_shapes(config: Config, only: Sequence[str]) -> Config:
    """Keep the shapes named by key ("fa/s4096"), short name ("s4096") or suite ("fa"). Here, not in
    the pipeline, so a command checks `--shapes` before it starts workers or writes anything."""
    if not only:
        return config
    keep = tuple(s for s in config.shapes if s.key in only or s.name in only or s.suite in only)
    unknown = [o for o in only if not any(o in (s.key, s.name, s.suite) for s in config.shapes)]
    if unknown or not keep:
        raise ConfigError(
            config.path,
            "",
            f"no shape or suite named {', '.join(unknown or only)} (have: {', '.join(s.key for s in config.shapes)})",
        )
    return replace(config, shapes=keep)


def load(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = read_text(path)
    except UserFileError as exc:
        raise ConfigError(path, "", exc.problem) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, "", f"invalid TOML: {exc}") from None
    return parse(data, path)


def _upstream(top: _Section, path: Path) -> Upstream:
    up = top.section("upstream", ("repo", "branch", "source_dir"), required=True)
    upstream = Upstream(
        repo=up.get("repo", str), branch=up.get("branch", str, "main"), source_dir=up.get("source_dir", str, ".")
    )
    if Path(upstream.source_dir).is_absolute() or ".." in Path(upstream.source_dir).parts:
        raise ConfigError(path, "upstream.source_dir", "must be a relative path inside the checkout")
    return upstream


def _device(top: _Section, path: Path) -> tuple[str, list[int]]:
    """The device kind and the indices of the devices trials may use."""
    dev = top.section("device", ("kind", "visible"), required=True)
    device: str = dev.get("kind", str, choices=DEVICES)
    visible = dev.get("visible", list, [0])
    if (
        not isinstance(visible, list)
        or not visible
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in visible)
    ):
        raise ConfigError(path, "device.visible", "must be a non-empty list of device indices")
    return device, visible


# The keys each section may hold: any other is refused by name (a misspelt key is not ignored).
_TOP_KEYS = (
    "name",
    "description",
    "upstream",
    "build",
    "device",
    "control",
    "subject",
    "suites",
    "protocol",
    "thresholds",
    "publish",
    "report",
    "store",
    "executor",
    "triggers",
    "sandbox",
)
_BUILD_KEYS = (
    "recipe",
    "pip_args",
    "steps",
    "import_check",
    "cache_dir",
    "cache_max_gb",
    "parallel",
    "max_hunk_builds",
    "max_hunk_trials",
    "memory_gb",
    "max_tasks",
    "network",
)
_PROTOCOL_KEYS = (
    "trials",
    "max_trials",
    "first_look",
    "reps",
    "warmup",
    "graph_reads",
    "graph_heat_ms",
    "settle_ms",
    "flush_mb",
    "cpu_clock",
    "timeout_s",
    "jit_cache_env",
    "env",
    "seed",
    "workers",
    "ahead",
    "preload",
    "memory_gb",
    "max_tasks",
    "prefetch",
    "standby",
    "learn_imports",
    "keep_autotune",
    "split_on_moved",
    "verify_on_open",
    "decision_trials",
    "drift_anchor_s",
)
_THRESHOLD_KEYS = ("min_step_pct", "alpha", "tolerances", "metric", "timing", "indifference_zone", "latency_steps")
_PUBLISH_KEYS = (
    "repo",
    "token_env",
    "base_url",
    "comment_on_culprit",
    "comment_on_requester",
    "draft_pr",
    "commit_status",
    "bot_login",
)


def parse(data: Mapping[str, Any], path: Path) -> Config:
    top = _Section(path, data, "", _TOP_KEYS)
    upstream = _upstream(top, path)
    device, visible = _device(top, path)
    ctl = top.section("control", ("backend",), required=True)
    control = ctl.get("backend", str, choices=CONTROLS)

    names = config_suites.suite_names(top)
    subjects = config_suites.parse_subjects(top, names)
    modules = config_suites.parse_suite_modules(top, names, subjects)
    shapes = config_suites.parse_shapes(top, names, subjects, modules)
    _check_limits(path, control, subjects, shapes)
    allow_forks = top.section("triggers", ("allow_unsandboxed_forks",)).get("allow_unsandboxed_forks", bool, False)
    suites, keys = (*config_suites.BUILTIN, *names), tuple(shape.key for shape in shapes)
    return Config(
        name=top.get("name", str, path.stem),
        description=top.get("description", str, ""),
        path=str(path),
        upstream=upstream,
        build=_build(top.section("build", _BUILD_KEYS)),
        device=device,
        devices=tuple(visible),
        control=control,
        subjects=subjects,
        shapes=shapes,
        suite_modules=modules,
        caches=parse_caches(top, names, subjects),
        protocol=_protocol(top.section("protocol", _PROTOCOL_KEYS), suites, keys),
        thresholds=_thresholds(
            top.section("thresholds", _THRESHOLD_KEYS),
            suites,
            config_suites.forced_metrics(subjects, modules),
            tuple(n for n, sub in subjects.items() if sub.adapter == "pytest"),
            keys,
        ),
        publish=_publish(top.section("publish", _PUBLISH_KEYS)),
        report_dir=top.section("report", ("dir",)).path_value("dir") or absolute("reports"),
        store=top.path_value("store"),
        executor=_executor(top.section("executor", ("kind", "address", "width"))),
        triggers=Triggers(allow_unsandboxed_forks=allow_forks),
        sandbox=_sandbox(top.section("sandbox", ("require",)), allow_forks),
    )


def _sandbox(sec: _Section, allow_forks: bool) -> Sandbox:
    require = sec.get("require", bool, None)
    if require is True and allow_forks:
        raise ConfigError(
            sec.path, sec.name("require"), "true contradicts [triggers] allow_unsandboxed_forks = true: drop one"
        )
    return Sandbox(require=require)


def _check_limits(path: Path, control: str, subjects: Mapping[str, Any], shapes: Sequence[Shape]) -> None:
    """A shape the control cannot run, or the subject's adapter would refuse at every trial, is the
    config's error, not a trial's (benches/control_limits.py, the same rules the trial applies)."""
    seen: dict[str, int] = {}
    for shape in shapes:
        index = seen[shape.suite] = seen.get(shape.suite, -1) + 1
        params = shape.as_dict()
        adapter = subjects[shape.suite].adapter if shape.suite in subjects else ""
        for who, refused in (
            (f"control {control}", control_limits.refusal(control, shape.suite, params)),
            (f"subject adapter {adapter}", control_limits.subject_refusal(adapter, shape.suite, params)),
        ):
            if refused:
                key, why = refused
                raise ConfigError(path, f"suites.{shape.suite}.shapes[{index}].{key}", f"{who}: {why}")


def _executor(sec: _Section) -> Executor:
    kind = sec.get("kind", str, "local", choices=EXECUTORS)
    address = sec.get("address", str, None)
    problem = executor_problem(kind, address)
    if problem:
        raise ConfigError(sec.path, sec.name("address"), problem)
    width = sec.get("width", int, None)
    if width is not None and width < 1:
        raise ConfigError(sec.path, sec.name("width"), f"must be >= 1, got {width!r}")
    return Executor(kind=kind, address=address, width=width)


def _build(sec: _Section) -> Build:
    steps = []
    shared_by: dict[str, str] = {}  # env var -> the step that fills it
    for i, raw in enumerate(sec.get("steps", list, [])):
        step = _Section(
            sec.path, raw, f"{sec.name('steps')}[{i}]", ("run", "timeout_s", "env", "key_files", "shared_dir")
        )
        key_files = step.strings("key_files")
        for j, pattern in enumerate(key_files):
            problem = pattern_problem(pattern)
            if problem:
                raise ConfigError(sec.path, f"{step.name('key_files')}[{j}]", f"{problem}, got {pattern!r}")
        shared_dir = step.get("shared_dir", str, None)
        if shared_dir is not None and not key_files:
            raise ConfigError(sec.path, step.name("shared_dir"), "only a step with key_files has a shared dir")
        if shared_dir is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", shared_dir):
            raise ConfigError(
                sec.path, step.name("shared_dir"), f"must be an environment variable name, got {shared_dir!r}"
            )
        if key_files:
            var = shared_dir or DEFAULT_SHARED_ENV
            if var in shared_by:
                # The later step would point the variable at its own, empty dir for every step after it.
                raise ConfigError(
                    sec.path,
                    step.name("shared_dir"),
                    f"{var} is already the shared dir of {shared_by[var]}: give each keyed step its own",
                )
            shared_by[var] = step.prefix
        steps.append(
            BuildStep(
                run=step.get("run", str),
                timeout_s=step.positive("timeout_s", float, 3600.0),
                env=step.str_map("env"),
                key_files=key_files,
                shared_dir=shared_dir,
            )
        )
    recipe = sec.get("recipe", str, "none", choices=RECIPES)
    if recipe == "command" and not steps:
        raise ConfigError(sec.path, sec.name("steps"), "the command recipe needs at least one step")
    return Build(
        recipe=recipe,
        pip_args=sec.strings("pip_args", ("--no-deps",)),
        steps=tuple(steps),
        import_check=sec.get("import_check", str, None),
        cache_dir=sec.path_value("cache_dir"),
        cache_max_gb=sec.positive("cache_max_gb", float, 50.0),
        parallel=sec.positive("parallel", int, 1),
        max_hunk_builds=sec.positive("max_hunk_builds", int, 12),
        max_hunk_trials=sec.positive("max_hunk_trials", int, 64),
        memory_gb=sec.non_negative("memory_gb", float, 0.0),
        max_tasks=_max_tasks(sec),
        network=sec.get("network", bool, False),
    )


def _protocol(sec: _Section, suites: tuple[str, ...], shape_keys: tuple[str, ...]) -> Protocol:
    trials = sec.positive("trials", int, 3)
    max_trials = sec.positive("max_trials", int, 24)
    if max_trials < trials:
        raise ConfigError(sec.path, sec.name("max_trials"), f"must be >= trials ({trials})")
    first_look = sec.positive("first_look", int, 1)
    if first_look > trials:
        raise ConfigError(sec.path, sec.name("first_look"), f"must be <= trials ({trials})")
    return Protocol(
        trials=trials,
        max_trials=max_trials,
        first_look=first_look,
        reps=sec.positive("reps", int, 20),
        warmup=sec.non_negative("warmup", int, 3),
        **_graph_reads(sec, suites, shape_keys),
        **_settle(sec, suites, shape_keys),
        flush_mb=sec.non_negative("flush_mb", int, 0),
        cpu_clock=sec.get("cpu_clock", str, "cpu", choices=CPU_CLOCKS),
        timeout_s=sec.positive("timeout_s", float, 600.0),
        jit_cache_env=sec.strings("jit_cache_env", ("TRITON_CACHE_DIR",)),
        env=sec.str_map("env"),
        seed=sec.get("seed", int, 0),
        workers=sec.get("workers", str, "fork", choices=WORKER_SOURCES),
        ahead=sec.non_negative("ahead", int, None),
        preload=sec.strings("preload") if "preload" in sec.data else None,
        memory_gb=sec.non_negative("memory_gb", float, 0.0),
        max_tasks=_max_tasks(sec),
        prefetch=sec.non_negative("prefetch", int, None),
        standby=sec.get("standby", bool, True),
        learn_imports=sec.get("learn_imports", bool, True),
        keep_autotune=sec.get("keep_autotune", bool, True),
        split_on_moved=sec.get("split_on_moved", bool, True),
        verify_on_open=sec.get("verify_on_open", bool, True),
        decision_trials=sec.non_negative("decision_trials", int, DECISION_TRIALS),
        drift_anchor_s=sec.non_negative("drift_anchor_s", float, DRIFT_ANCHOR_S),
    )


def _graph_reads(sec: _Section, suites: tuple[str, ...], shape_keys: tuple[str, ...]) -> dict[str, Any]:
    """`graph_reads`: 1 or 2, or a table of `default` and suites or shapes -> 1 or 2; `graph_heat_ms`:
    ms >= 0 the same way, where one replay is read (a heater replaces the unread replay)."""
    default, by = _shape_table(sec, "graph_reads", 1, suites, shape_keys, lambda v: v in (1, 2), "1 or 2")
    heat, heat_by = _shape_table(sec, "graph_heat_ms", 0.0, suites, shape_keys, lambda v: v >= 0, "a number >= 0")
    for key in ("default", *suites, *shape_keys):
        if for_shape(key, heat, heat_by) > 0 and for_shape(key, default, by) != 1:
            raise ConfigError(
                sec.path, sec.name("graph_heat_ms"), f"a heater needs graph_reads = 1, and {key} reads 2 replays"
            )
    return {
        "graph_reads": int(default),
        "graph_reads_by": {k: int(v) for k, v in by.items()},
        "graph_heat_ms": float(heat),
        "graph_heat_ms_by": {k: float(v) for k, v in heat_by.items()},
    }


def _settle(sec: _Section, suites: tuple[str, ...], shape_keys: tuple[str, ...]) -> dict[str, Any]:
    """`settle_ms`: ms >= 0, or a table of `default` and suites or shapes -> ms."""
    settle, by = _shape_table(sec, "settle_ms", 0.0, suites, shape_keys, lambda v: v >= 0, "a number >= 0")
    return {"settle_ms": float(settle), "settle_ms_by": {k: float(v) for k, v in by.items()}}


def _max_tasks(sec: _Section) -> int:
    """A cgroup's task limit: below a few dozen, Python and torch cannot even start their threads."""
    value: int = sec.positive("max_tasks", int, 8192)
    if value < 64:
        raise ConfigError(sec.path, sec.name("max_tasks"), f"must be >= 64 (processes and threads), got {value}")
    return value


def _per_suite(
    sec: _Section, key: str, choices: tuple[str, ...], default: str, suites: tuple[str, ...]
) -> tuple[str, dict[str, str]]:
    """A key given once for every suite or as a table per suite: (the overall value, suite -> value)."""
    raw = sec.get(key, (str, dict), default)
    per = raw if isinstance(raw, dict) else {}
    for suite, value in per.items():
        if suite not in suites:
            raise ConfigError(sec.path, f"{sec.name(key)}.{suite}", f"unknown suite (known: {', '.join(suites)})")
        if value not in choices:
            raise ConfigError(
                sec.path, f"{sec.name(key)}.{suite}", f"must be one of {', '.join(choices)}, got {_show(value)}"
            )
    if isinstance(raw, str) and raw not in choices:
        raise ConfigError(sec.path, sec.name(key), f"must be one of {', '.join(choices)}, got {_show(raw)}")
    return (raw if isinstance(raw, str) else default), dict(per)


def _shape_table(
    sec: _Section,
    key: str,
    default: float,
    suites: tuple[str, ...],
    shape_keys: tuple[str, ...],
    valid: Callable[[Any], bool],
    must: str,
) -> tuple[float, dict[str, float]]:
    """`key`: one value, or a table of `default` and suites or shapes ("suite/name") -> value
    (model.for_shape reads it): (default, {suite or shape: value})."""
    raw = sec.get(key, (float, dict), default)
    table = dict(raw) if isinstance(raw, dict) else {"default": raw}
    out: dict[str, float] = {}
    for name, value in table.items():
        where = sec.name(key) + ("" if not isinstance(raw, dict) else f".{name}")
        if name != "default" and name not in suites and name not in shape_keys:
            raise ConfigError(sec.path, where, f"unknown suite or shape (known: {', '.join((*suites, *shape_keys))})")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not valid(value)
        ):
            raise ConfigError(sec.path, where, f"must be {must}, got {_show(value)}")
        out[name] = value
    return out.pop("default", default), out


def _min_steps(sec: _Section, suites: tuple[str, ...], shape_keys: tuple[str, ...]) -> tuple[float, dict[str, float]]:
    """`min_step_pct`: one number, or a table of `default` and suites or shapes ("suite/name") -> percent."""
    default, by = _shape_table(sec, "min_step_pct", 1.0, suites, shape_keys, lambda v: v > 0, "a number > 0")
    return float(default), {k: float(v) for k, v in by.items()}


def _thresholds(
    sec: _Section,
    suites: tuple[str, ...] = SUITES,
    forced: Mapping[str, str] | None = None,
    pytest_suites: tuple[str, ...] = (),
    shape_keys: tuple[str, ...] = (),
) -> Thresholds:
    """`forced`: suites with no control (a pytest subject, a brought suite without `control`), which
    compare the subject's own speed whatever the config's overall metric says."""
    alpha = sec.get("alpha", float, 0.01)
    if not 0 < alpha < 0.5:
        raise ConfigError(sec.path, sec.name("alpha"), f"must be in (0, 0.5), got {alpha}")
    suites = tuple(dict.fromkeys(suites))
    tolerances = _tolerances(sec, suites)
    raw = sec.get("metric", (str, dict), "ratio")
    metrics = raw if isinstance(raw, dict) else {}
    for suite, metric in metrics.items():
        key = f"{sec.name('metric')}.{suite}"
        if suite not in suites:
            raise ConfigError(sec.path, key, f"unknown suite (known: {', '.join(suites)})")
        if metric not in METRICS:
            raise ConfigError(sec.path, key, f"must be one of {', '.join(METRICS)}, got {_show(metric)}")
        if (forced or {}).get(suite) == "speed" and metric == "ratio":
            raise ConfigError(sec.path, key, f"suite {suite} has no control to take a ratio to: only speed")
    if isinstance(raw, str) and raw not in METRICS:
        raise ConfigError(sec.path, sec.name("metric"), f"must be one of {', '.join(METRICS)}, got {_show(raw)}")
    timing, timings = _per_suite(sec, "timing", TIMINGS, "kernel", suites)
    for suite in pytest_suites:
        if timings.get(suite, timing) == "latency":
            key = f"{sec.name('timing')}.{suite}" if suite in timings else sec.name("timing")
            raise ConfigError(
                sec.path,
                key,
                f"suite {suite} is timed by pytest-benchmark, which has no latency "
                "apart from its own time: only kernel",
            )
    min_step, min_steps = _min_steps(sec, suites, shape_keys)
    return Thresholds(
        min_step_pct=min_step,
        min_steps=min_steps,
        alpha=alpha,
        tolerances=tolerances,
        metric=raw if isinstance(raw, str) else "ratio",
        metrics={**(forced or {}), **metrics},
        timing=timing,
        timings=timings,
        indifference_zone=sec.get("indifference_zone", bool, True),
        latency_steps=sec.get("latency_steps", str, "host-bound", choices=LATENCY_STEPS),
    )


def _tolerances(sec: _Section, suites: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """`[thresholds] tolerances`: (atol, rtol) per suite, each a known suite."""
    tolerances = {}
    for suite, value in sec.get("tolerances", dict, {}).items():
        key = f"{sec.name('tolerances')}.{suite}"
        if suite not in suites:
            raise ConfigError(sec.path, key, f"unknown suite (known: {', '.join(suites)})")
        numbers = (
            isinstance(value, list)
            and len(value) == 2
            and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in value
            )
        )
        if not numbers:
            raise ConfigError(sec.path, key, f"must be [atol, rtol], two numbers >= 0, got {_show(value)}")
        tolerances[suite] = (float(value[0]), float(value[1]))
    return tolerances


def _publish(sec: _Section) -> Publish:
    repo = sec.get("repo", str, None)
    if repo is not None and repo.count("/") != 1:
        raise ConfigError(sec.path, sec.name("repo"), f"must be 'owner/name', got {_show(repo)}")
    return Publish(
        repo=repo,
        token_env=sec.get("token_env", str, DEFAULT_TOKEN_ENV),
        base_url=sec.get("base_url", str, "https://api.github.com"),
        comment_on_culprit=sec.get("comment_on_culprit", bool, True),
        comment_on_requester=sec.get("comment_on_requester", bool, True),
        draft_pr=sec.get("draft_pr", bool, False),
        commit_status=sec.get("commit_status", bool, True),
        bot_login=sec.get("bot_login", str, "github-actions[bot]"),
    )

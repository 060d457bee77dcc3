"""The demo upstream's history as data: which knob each squash-merged PR turns. Pure, no I/O.

Every commit is a full set of knobs; the templates render them into files, so a planted change
is a small, real diff in the generated repository. The expectations below are what the planted
steps do on each flavour's shapes (`configs/cpu-demo.toml`, `configs/h200-demo.toml`): the shapes
a step moves, and the size measured for it (H200: /work/shared/H200-NOTES.md; CPU:
`python -m studies.demo_plants`). None means "moves, size not measured there".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

AUTHORS = (
    ("Ada Kernel", "ada@demolib.example"),
    ("Bo Tiles", "bo@demolib.example"),
    ("Cy Warp", "cy@demolib.example"),
)
START_EPOCH = 1782900000  # 2026-07-01T10:00:00Z: fixed dates make the SHAs reproducible
STEP_S = 6 * 3600 + 17 * 60

INITIAL: dict[str, Any] = {
    # planted
    "fa_remap": True,
    "fastmath": True,
    "group_m": 8,
    "num_stages": 3,
    "k_mask_bug": False,
    "gemm_tuned": False,
    "utils_import": False,
    "utils_file": False,
    "decode_tile": False,
    "dispatch_split_k": False,
    "fa_window": False,
    # neutral
    "version": "0.1.0",
    "gemm_refactor": False,
    "fa_comment": False,
    "gemm_comment": False,
    "validate_inputs": False,
    "doc_install": False,
    "doc_bench": False,
    "doc_layout": False,
    "doc_cpu": False,
    "doc_tuning": False,
    "doc_typo": "",
    "test_fa_short": False,
    "test_gemm_tall": False,
    "test_odd_sizes": False,
}


def derived(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Knobs the templates read that follow from others (the GEMM tile before/after tuning)."""
    tuned, window = knobs["gemm_tuned"], knobs["fa_window"]
    return {
        **knobs,
        "tri_block_n": 256 if tuned else 128,
        "tri_block_k": 64 if tuned else 128,
        "cpu_block_k": 4 if tuned else 2,
        "cpu_decode_block_k": 64 if knobs["decode_tile"] else 16,
        # the sliding-window argument, threaded through every attention caller (empty before it)
        "fa_window_param": ", window: int | None = None" if window else "",
        "fa_window_arg": ", window" if window else "",
        "fa_window_kwarg": ", window=window" if window else "",
        "fa_window_kernel_param": " WINDOW," if window else "",
        "fa_window_launch_arg": " window or 0," if window else "",
    }


@dataclass(frozen=True)
class CommitSpec:
    pr: int
    subject: str
    changes: Mapping[str, Any]
    role: str | None = None  # set on planted commits
    body: str = ""


@dataclass(frozen=True)
class Expectation:
    """What a planted commit does: kind, and per device the shapes it moves (percent, if known)."""

    kind: str  # regression | improvement | wrong | fix | broken | broken_fix
    moves: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)  # device -> shape -> %
    # The time the step shows on (config `thresholds.timing`): None for both, "kernel" for a kernel
    # step hidden behind a host-bound call's latency, "latency" for a host-side step only.
    timing: str | None = None


# The order is the merge order (PR numbers need not increase). The broken commit and a commit of
# the wrong-result window sit at the search's first interior probes (1/2 and 3/4 of the range),
# so the e2e test can assert on them; no step lies inside the wrong-result window.
COMMITS: tuple[CommitSpec, ...] = (
    CommitSpec(
        101,
        "Add flash-attention forward and GEMM kernels",
        {},
        "good",
        "Triton kernels for NVIDIA GPUs and torch kernels for the CPU, with the same structure.",
    ),
    CommitSpec(103, "docs: installation and usage", {"doc_install": True}),
    CommitSpec(104, "tests: short attention sequences", {"test_fa_short": True}),
    CommitSpec(106, "chore: release 0.1.1", {"version": "0.1.1"}),
    CommitSpec(
        108,
        "GEMM: retune the tile to 128x256x64",
        {"gemm_tuned": True},
        "improvement",
        "128x128x128 -> 128x256x64 on the GPU (623 -> 699 TFLOP/s at 8192^3 on an H200);\n"
        "the CPU flavour's K step goes from 2 to 4 columns per stage.",
    ),
    CommitSpec(109, "docs: benchmark table for the new GEMM tile", {"doc_bench": True}),
    CommitSpec(111, "FA: comment the online-softmax update", {"fa_comment": True}),
    CommitSpec(112, "tests: tall GEMM shapes", {"test_gemm_tall": True}),
    CommitSpec(114, "docs: tensor layouts", {"doc_layout": True}),
    CommitSpec(
        115,
        "FA: simplify the program-id mapping",
        {"fa_remap": False},
        "fa_remap_dropped",
        "Map program ids block-major; the head-major remap looked redundant.",
    ),
    CommitSpec(117, "chore: release 0.2.0", {"version": "0.2.0"}),
    CommitSpec(118, "FA: validate input shapes", {"validate_inputs": True}),
    CommitSpec(120, "docs: notes on the CPU flavour", {"doc_cpu": True}),
    CommitSpec(
        122,
        "Route kernel launches through a launch helper",
        {"fastmath": False},
        "fastmath_dropped",
        "One helper for every launch. (It does not pass the fast-math flag on.)",
    ),
    CommitSpec(124, "docs: fix a typo in the README", {"doc_typo": "."}),
    CommitSpec(125, "refactor: split GEMM row panels into a helper", {"gemm_refactor": True}),
    CommitSpec(130, "docs: tuning guide", {"doc_tuning": True}),
    CommitSpec(131, "GEMM: GROUP_M 8 -> 1 for better load balance", {"group_m": 1}, "gemm_group_m"),
    CommitSpec(133, "chore: release 0.3.0", {"version": "0.3.0"}),
    CommitSpec(134, "GEMM: comment the grouped program order", {"gemm_comment": True}),
    CommitSpec(
        127,
        "Share launcher helpers in demolib.utils",
        {"utils_import": True},
        "broken_import",
        "demolib/__init__.py imports demolib.utils (the new module was left out of the PR).",
    ),
    CommitSpec(128, "Add the missing demolib/utils.py", {"utils_file": True}, "broken_import_fixed"),
    CommitSpec(
        165,
        "GEMM: decode tiles sized to fill the SMs",
        {"decode_tile": True},
        "decode_kernel",
        "The small-M dispatch scored tiles by program count, which picked the large-GEMM tile\n"
        "(28 programs at 64x7168x2048 on 132 SMs); it now scores the waves that stream B.",
    ),
    CommitSpec(
        166,
        "dispatch: score split-K tiles too",
        {"dispatch_split_k": True},
        "dispatch_cost",
        "Ahead of a split-K kernel, the small-M dispatch scores split-K tiles as well (none is chosen yet):\n"
        "twice the configs searched on every call, the kernel unchanged.",
    ),
    CommitSpec(
        136,
        "GEMM: mask the ragged last K tile of A",
        {"k_mask_bug": True},
        "wrong_result",
        "The A-tile mask of the last K step is off by one: that tile is only partly loaded.",
    ),
    CommitSpec(137, "docs: changelog wording", {}),
    CommitSpec(139, "tests: odd GEMM sizes", {"test_odd_sizes": True}),
    CommitSpec(142, "chore: release 0.4.0", {"version": "0.4.0"}),
    CommitSpec(143, "docs: changelog for 0.4.0", {}),
    CommitSpec(146, "docs: mention the shared-memory budget", {}),
    CommitSpec(148, "chore: release 0.4.1", {"version": "0.4.1"}),
    CommitSpec(149, "docs: contributor notes", {}),
    CommitSpec(151, "ci: cache the torch wheel", {}),
    CommitSpec(140, "GEMM: fix the off-by-one in the A-tile mask", {"k_mask_bug": False}, "wrong_result_fixed"),
    CommitSpec(152, "chore: release 0.4.2", {"version": "0.4.2"}),
    CommitSpec(145, "GEMM: num_stages 3 -> 2 to save shared memory", {"num_stages": 2}, "gemm_stages"),
    CommitSpec(154, "docs: roadmap", {}),
    CommitSpec(
        155,
        "FA: thread a sliding-window argument through every caller",
        {"fa_window": True},
        "fa_window",
        "flash_attn(..., window=None) down to both kernels; keys are walked in smaller blocks\n"
        "so that a window's edge wastes less of the last one.",
    ),
    CommitSpec(157, "chore: release 0.5.0", {"version": "0.5.0"}),
    CommitSpec(158, "docs: release notes for 0.5.0", {}),
    CommitSpec(160, "chore: release 0.5.1", {"version": "0.5.1"}),
    CommitSpec(161, "docs: point to the benchmark dashboards", {}, "bad"),
)

_FA_CPU = ("fa/s512", "fa/s1024")
_FA_CUDA = ("fa/s4096", "fa/s16384", "fa/s32768")

EXPECTATIONS: dict[str, Expectation] = {
    "improvement": Expectation(
        "improvement",
        {"cpu": {"gemm/square": 84.0, "gemm/tall": 55.0}, "cuda": {"gemm/m8192": 12.0, "gemm/m54560": None}},
    ),
    "fa_remap_dropped": Expectation(
        "regression", {"cpu": {"fa/s1024": -40.0}, "cuda": {"fa/s16384": -11.0, "fa/s32768": -15.0}}
    ),
    # On the GPU the dropped flag sends the softmax's exp2 to double precision (the CPU twin's precise
    # path, which also keeps P in double for its product with V: a cost no CPU vectorizes away);
    # as `enable_fp_fusion=False` alone it cost 0.6-0.9% on an H200, under the 2% floor.
    "fastmath_dropped": Expectation(
        "regression",
        {
            "cpu": {"fa/s512": -50.0, "fa/s1024": -44.0},
            "cuda": {"fa/s4096": None, "fa/s16384": None, "fa/s32768": None},
        },
    ),
    # On the H200 the demo's GEMM (K=2048) loses its L2 grouping at M=8192, not at M=54560 (the
    # tutorial kernel's 8192x8192 shape lost 6.5% there: H200-NOTES): in the ratio to cuBLAS about
    # -5 to -7% on gemm/m8192 and under 1% on gemm/m54560 in the recorded H200 demos.
    "gemm_group_m": Expectation("regression", {"cpu": {"gemm/tall": -59.0}, "cuda": {"gemm/m8192": -6.0}}),
    "gemm_stages": Expectation(
        "regression",
        {"cpu": {"gemm/square": -33.0, "gemm/tall": -30.0}, "cuda": {"gemm/m8192": -30.0, "gemm/m54560": None}},
    ),
    # One commit threads the new argument through every caller (plumbing) and shrinks the key block
    # (BLOCK_N 256 -> 32 on the CPU, 64 -> 16 in Triton): the cause, among a dozen hunks.
    "fa_window": Expectation(
        "regression", {"cpu": {"fa/s1024": -63.0}, "cuda": {"fa/s4096": None, "fa/s16384": None, "fa/s32768": None}}
    ),
    "wrong_result": Expectation(
        "wrong",
        {
            "cpu": {"gemm/square": None, "gemm/tall": None},
            "cuda": {"gemm/m8192": None, "gemm/m54560": None, "gemm/decode": None},
        },
    ),
    # Behind demolib's small-M dispatch (~100 us of Python a call) the decode GEMM is host-bound:
    # its kernel step shows on kernel time only, the dispatch's on call latency only. Sizes not yet
    # measured on an H200 (studies/kernel_time.py measures the shape); no CPU demo shape takes this path.
    "decode_kernel": Expectation("improvement", {"cuda": {"gemm/decode": None}}, timing="kernel"),
    "dispatch_cost": Expectation("regression", {"cuda": {"gemm/decode": None}}, timing="latency"),
    "wrong_result_fixed": Expectation("fix"),
    "broken_import": Expectation("broken"),
    "broken_import_fixed": Expectation("broken_fix"),
}

SHAPES: dict[str, tuple[str, ...]] = {
    "cpu": (*_FA_CPU, "gemm/square", "gemm/tall"),
    "cuda": (*_FA_CUDA, "gemm/m8192", "gemm/m54560", "gemm/decode"),
}


def states() -> list[dict[str, Any]]:
    """The knobs of every commit, oldest first."""
    knobs = dict(INITIAL)
    out = []
    for spec in COMMITS:
        unknown = set(spec.changes) - set(knobs)
        if unknown:
            raise KeyError(f"PR #{spec.pr} changes unknown knobs {sorted(unknown)}")
        knobs.update(spec.changes)
        out.append(derived(knobs))
    return out

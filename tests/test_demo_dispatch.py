"""The demo's decode GEMM plants (issue 26): the small-M dispatch's kernel step changes the tile it
picks and nothing else; its dispatch step doubles the configs searched on every call and keeps the
tile. Rendered from the templates at each commit of the history; the CPU decode path stays right."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

from bisector.demo.history import COMMITS, EXPECTATIONS, states
from bisector.demo.templating import render

TEMPLATES = Path(__file__).resolve().parents[1] / "bisector" / "demo" / "templates" / "demolib"


def _module(name: str, knobs: dict) -> types.ModuleType:
    module = types.ModuleType(f"demolib.{name}")
    exec(compile(render((TEMPLATES / f"{name}.py.tmpl").read_text(), knobs), name, "exec"), module.__dict__)
    return module


def _at(role: str) -> tuple[dict, dict]:
    i = next(i for i, c in enumerate(COMMITS) if c.role == role)
    return states()[i - 1], states()[i]


def test_kernel_step_changes_the_tile_and_dispatch_step_only_the_search() -> None:
    a, b = torch.empty(64, 2048, dtype=torch.bfloat16), torch.empty(2048, 7168, dtype=torch.bfloat16)
    before, after = (_module("dispatch", k) for k in _at("decode_kernel"))
    assert len(before.table()) == len(after.table())  # the same search: the dispatch costs the same
    old, new = before.pick(a, b), after.pick(a, b)
    assert (old["BLOCK_M"], old["BLOCK_N"]) == (128, 256) and (new["BLOCK_M"], new["BLOCK_N"]) == (64, 64)
    before, after = (_module("dispatch", k) for k in _at("dispatch_cost"))
    assert len(after.table()) == 2 * len(before.table()) and after.pick(a, b) == before.pick(a, b)
    assert EXPECTATIONS["decode_kernel"].timing == "kernel" and EXPECTATIONS["dispatch_cost"].timing == "latency"


def test_cpu_decode_path_is_right_at_every_dispatch_state() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(16, 300), torch.randn(300, 96) / 300**0.5
    seen = set()
    for knobs in states():
        key = (knobs["decode_tile"], knobs["dispatch_split_k"])
        if key in seen:
            continue
        seen.add(key)
        package = types.ModuleType("demolib")
        package.dispatch = _module("dispatch", knobs)  # type: ignore[attr-defined]
        saved = {k: sys.modules.get(k) for k in ("demolib", "demolib.dispatch")}
        sys.modules.update({"demolib": package, "demolib.dispatch": package.dispatch})  # type: ignore[attr-defined]
        try:
            gemm = _module("cpu_gemm", {**knobs, "k_mask_bug": False})
            assert (gemm.matmul(a, b) - a @ b).abs().max().item() < 1e-4, key
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
    assert len(seen) == 3  # before both plants, after the kernel step, after the dispatch step

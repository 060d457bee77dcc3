"""The demo upstream's kernels compute attention and GEMM right (except where planted wrong).

CPU kernels: every distinct version in the history, in this process. Triton kernels: at GOOD, BAD
and the wrong-result commit, under Triton's interpreter (TRITON_INTERPRET=1, set before triton is
imported: a subprocess) at small fp16 shapes; bf16 is not trustworthy under the interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from bisector.demo import DemoManifest
from bisector.demo.repo import export_commit


def _blob(demo: DemoManifest, sha: str, path: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", f"{sha}:{path}"], cwd=demo.path, check=True, capture_output=True, text=True
    ).stdout.strip()


def _load_blob(demo: DemoManifest, blob: str, name: str, tmp: Path) -> ModuleType:
    path = tmp / f"{name}_{blob[:12]}.py"
    if not path.exists():
        path.write_bytes(
            subprocess.run(["git", "cat-file", "blob", blob], cwd=demo.path, check=True, capture_output=True).stdout
        )
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fa_errors(module: ModuleType) -> list[float]:
    """Both code paths of the CPU kernel: one pass (S <= 512) and blocked, with ragged blocks."""
    errs = []
    for b, h, s, d in ((2, 2, 128, 32), (1, 2, 700, 32)):
        torch.manual_seed(s)
        q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(d))
        errs.append((module.flash_attn(q, k, v, False, 1 / math.sqrt(d)) - ref).abs().max().item())
    return errs


def _gemm_errors(module: ModuleType) -> list[float]:
    """A square problem and a tall one (M >= 4N: the GROUP_M panel path), K ragged."""
    errs = []
    for m, n, k in ((96, 80, 200), (600, 64, 200)):
        torch.manual_seed(m)
        a, b = torch.randn(m, k), torch.randn(k, n) / math.sqrt(k)
        errs.append((module.matmul(a, b) - a @ b).abs().max().item())
    return errs


def test_cpu_kernels_match_torch_at_every_commit_except_the_wrong_ones(demo: DemoManifest, tmp_path: Path) -> None:
    wrong = set(demo.wrong_commits())
    fa_seen: dict[str, list[float]] = {}
    gemm_seen: dict[str, list[float]] = {}
    for sha in demo.commits:
        fa_blob = _blob(demo, sha, "demolib/cpu_fa.py")
        gemm_blob = _blob(demo, sha, "demolib/cpu_gemm.py")
        if fa_blob not in fa_seen:
            fa_seen[fa_blob] = _fa_errors(_load_blob(demo, fa_blob, "cpu_fa", tmp_path))
        if gemm_blob not in gemm_seen:
            gemm_seen[gemm_blob] = _gemm_errors(_load_blob(demo, gemm_blob, "cpu_gemm", tmp_path))
        assert max(fa_seen[fa_blob]) < 1e-4, (sha[:7], fa_seen[fa_blob])
        if sha in wrong:
            assert min(gemm_seen[gemm_blob]) > 1e-2, (sha[:7], gemm_seen[gemm_blob])
        else:
            assert max(gemm_seen[gemm_blob]) < 1e-4, (sha[:7], gemm_seen[gemm_blob])
    # the planted steps really change the kernels: several versions of each
    assert len(fa_seen) >= 3 and len(gemm_seen) >= 4


INTERPRETED = r"""
import json, math, sys
sys.path.insert(0, sys.argv[1])
import torch
from demolib.triton_fa import flash_attn
from demolib.triton_gemm import matmul
torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 200, 64, dtype=torch.float16) for _ in range(3))
ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.125)
fa = (flash_attn(q, k, v, False, 0.125).float() - ref).abs().max().item()
a = torch.randn(192, 200, dtype=torch.float16)
b = (torch.randn(200, 160) / math.sqrt(200)).to(torch.float16)
gemm = (matmul(a, b).float() - a.float() @ b.float()).abs().max().item()
print(json.dumps({"fa": fa, "gemm": gemm}))
"""


@pytest.mark.parametrize("role", ["good", "bad", "wrong_result"])
def test_triton_kernels_under_the_interpreter(demo: DemoManifest, exports: Path, role: str) -> None:
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    sha = {"good": demo.good, "bad": demo.bad}.get(role) or demo.sha(role)
    source = export_commit(demo.path, sha, exports)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", INTERPRETED, str(source)],
        capture_output=True,
        text=True,
        env=env,
        cwd=exports,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    errs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert errs["fa"] < 5e-3, errs
    if role == "wrong_result":
        assert errs["gemm"] > 5e-2, errs
    else:
        assert errs["gemm"] < 5e-3, errs

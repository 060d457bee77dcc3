"""The demo upstream's git history: shape, reproducibility, roles, and the broken / wrong commits."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bisector.demo import DemoDirError, DemoManifest, write_demo_repo
from bisector.demo.repo import export_commit
from bisector.errors import EXIT_BAD_INPUT

PR = re.compile(r" \(#(\d+)\)$")
ORDER = (
    "good",
    "improvement",
    "fa_remap_dropped",
    "fastmath_dropped",
    "gemm_group_m",
    "broken_import",
    "broken_import_fixed",
    "decode_kernel",
    "dispatch_cost",
    "wrong_result",
    "wrong_result_fixed",
    "gemm_stages",
    "fa_window",
)


def git(repo: str | Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def test_about_forty_first_parent_commits_with_squash_pr_subjects(demo: DemoManifest) -> None:
    log = git(demo.path, "log", "--first-parent", "--reverse", "--format=%H%x00%s", demo.branch).splitlines()
    shas = tuple(line.split("\x00")[0] for line in log)
    subjects = [line.split("\x00")[1] for line in log]
    assert 35 <= len(shas) <= 45
    assert shas == demo.commits
    prs = [int(PR.search(s).group(1)) for s in subjects]  # type: ignore[union-attr]
    assert tuple(prs) == demo.prs and len(set(prs)) == len(prs)
    assert git(demo.path, "rev-list", "--max-parents=0", demo.branch).split() == [demo.good]
    assert git(demo.path, "rev-parse", "HEAD").strip() == demo.bad
    assert git(demo.path, "status", "--porcelain") == ""


def test_shas_are_reproducible(demo: DemoManifest, tmp_path: Path) -> None:
    again = write_demo_repo(tmp_path / "again")
    assert again.commits == demo.commits
    assert again.plants == demo.plants


def test_planted_commits_are_first_parent_ancestors_in_order(demo: DemoManifest) -> None:
    shas = [demo.good if r == "good" else demo.sha(r) for r in ORDER]
    indices = [demo.commits.index(s) for s in shas]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)
    # the search's interior points (search.py: lo + round((hi - lo) * q / 4)): the broken commit at the
    # middle one, the third inside the wrong-result window (the e2e test asserts on both)
    hi = len(demo.commits) - 1
    assert round(hi / 2) == demo.index("broken_import")
    assert demo.index("wrong_result") <= round(hi * 3 / 4) < demo.index("wrong_result_fixed")
    for sha in shas:
        subprocess.run(["git", "merge-base", "--is-ancestor", sha, demo.bad], cwd=demo.path, check=True)
    for role, plant in demo.plants.items():
        subject = git(demo.path, "log", "-1", "--format=%s", plant.sha).strip()
        assert int(PR.search(subject).group(1)) == plant.pr, role  # type: ignore[union-attr]
    assert demo.index("broken_import_fixed") == demo.index("broken_import") + 1
    assert demo.skipped_commits() == (demo.sha("broken_import"),)
    assert 2 <= len(demo.wrong_commits()) <= 10 and demo.wrong_commits()[0] == demo.sha("wrong_result")


def test_expected_shapes_name_config_shapes(demo: DemoManifest) -> None:
    from bisector.config import load

    root = Path(__file__).resolve().parents[1]
    for device, name in (("cpu", "cpu-demo.toml"), ("cuda", "h200-demo.toml")):
        keys = {s.key for s in load(root / "configs" / name).shapes}
        assert keys == set(demo.shape_keys[device])
        for plant in demo.plants.values():
            assert set(plant.shapes(device)) <= keys
        decode = {"cpu": [], "cuda": ["decode_kernel"]}[device]  # no CPU demo shape takes the decode path
        assert [p.role for p in demo.steps(device)] == [
            "improvement",
            "fa_remap_dropped",
            "fastmath_dropped",
            "gemm_group_m",
            *decode,
            "gemm_stages",
            "fa_window",
        ]
        dispatch = {"cpu": [], "cuda": ["dispatch_cost"]}[device]  # a host-side step: call latency only
        assert [p.role for p in demo.steps(device, "latency")] == [
            "improvement",
            "fa_remap_dropped",
            "fastmath_dropped",
            "gemm_group_m",
            *dispatch,
            "gemm_stages",
            "fa_window",
        ]
    # the planted shape selectivity: some shapes stay put for each of these steps
    assert demo.plants["fa_remap_dropped"].shapes("cpu") == ("fa/s1024",)
    assert demo.plants["gemm_group_m"].shapes("cuda") == ("gemm/m8192",)


def test_rewriting_the_same_dir_reuses_the_repository(demo: DemoManifest) -> None:
    again = write_demo_repo(Path(demo.path))
    assert again == demo
    assert git(demo.path, "rev-parse", "HEAD").strip() == demo.bad


def test_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    with pytest.raises(DemoDirError, match="neither empty nor the demo repository") as info:
        write_demo_repo(tmp_path)
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert (tmp_path / "x").read_text() == "keep me"


def _imports(source: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; sys.path.insert(0, sys.argv[1]); import demolib; print(demolib.__version__)"
    return subprocess.run([sys.executable, "-c", code, str(source)], capture_output=True, text=True, cwd=source.parent)


def test_broken_commit_does_not_import_and_its_fix_does(demo: DemoManifest, exports: Path) -> None:
    broken = _imports(export_commit(demo.path, demo.sha("broken_import"), exports))
    assert broken.returncode != 0
    assert "demolib.utils" in broken.stderr
    idx = demo.index("broken_import")
    for sha in (demo.commits[idx - 1], demo.sha("broken_import_fixed"), demo.bad):
        ok = _imports(export_commit(demo.path, sha, exports))
        assert ok.returncode == 0, ok.stderr


def _load(path: Path, name: str):  # noqa: ANN202 - a module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wrong_result_commit_gives_wrong_gemm_on_cpu(demo: DemoManifest, exports: Path) -> None:
    torch.manual_seed(0)
    a = torch.randn(300, 200)
    b = torch.randn(200, 70) / math.sqrt(200)
    ref = a @ b
    idx = demo.index("wrong_result")
    cases = {
        demo.commits[idx - 1]: False,
        demo.sha("wrong_result"): True,
        demo.commits[idx + 1]: True,
        demo.sha("wrong_result_fixed"): False,
        demo.bad: False,
    }
    for sha, wrong in cases.items():
        module = _load(export_commit(demo.path, sha, exports) / "demolib" / "cpu_gemm.py", f"gemm_{sha[:12]}")
        err = (module.matmul(a, b) - ref).abs().max().item()
        assert (err > 1e-2) == wrong, (sha[:7], err)
    assert git(demo.path, "rev-parse", "HEAD").strip() == demo.bad


PICK = (
    "import sys; from bisector.demo.demo_config import gpu_visible, pick_device; "
    "print(gpu_visible(), pick_device('auto'), 'torch' in sys.modules)"
)


def test_the_demo_picks_its_device_without_importing_torch_in_the_bot() -> None:
    """The bot imports no torch to pick the demo's device (3.4 s ahead of everything on the H200
    host); here, a CPU build of torch: the CPU, and `--device cuda` refused in one line."""
    from bisector.demo import DemoDeviceError, pick_device

    out = subprocess.run([sys.executable, "-c", PICK], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(torch.cuda.is_available()), "cuda" if torch.cuda.is_available() else "cpu", "False"]
    if not torch.cuda.is_available():
        with pytest.raises(DemoDeviceError, match="--device cuda: no CUDA GPU"):
            pick_device("cuda")


def test_a_cuda_torch_without_a_visible_gpu_is_not_a_gpu(tmp_path: Path) -> None:
    """A CUDA build of torch (as its version.py records it) and triton, but no device this process may
    see: the CPU, as torch.cuda.is_available() would say."""
    for name, text in (("torch", "cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n"), ("triton", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the bot must not import this')\n")
        (tmp_path / name / "version.py").write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "-1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PICK], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["False", "cpu", "False"]


def test_demo_config_points_at_the_written_repo(demo: DemoManifest) -> None:
    from bisector.demo import DemoDeviceError, demo_config, pick_device

    for device in ("cpu", "cuda"):
        config = demo_config(device, Path(demo.path))
        assert config.upstream.repo == demo.path and config.device == device
    assert pick_device("cpu") == "cpu"
    with pytest.raises(DemoDeviceError, match="--device"):
        pick_device("tpu")

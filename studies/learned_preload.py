"""What the zygote's learned preload (benches/env_preload.py) saves a real library's trial processes.

    python -m studies.real_repos --out .wt/real/repos
    python -m studies.learned_preload --repo .wt/real/repos/liger.git --src src \
        --module liger_kernel.ops.layer_norm --trials 6 [--device cpu]

Exports the repository's tip, puts a subject beside it that imports `--module` (as the real
suites' first calls do), and runs `--trials` trial processes through the executor the bot uses
(forked from one zygote, one after another), twice: with `learn_imports` off and on. Prints per
trial its subject load (the library's import, in `subjects_load`), the modules the first trial
reported (`env_imports`) and what the zygote loaded of them. A benchmark, not a test.

On the CPU, where the executor does not learn by default, it is turned on for the study: the
mechanism and its saving on a real import chain; the GPU's figures come from the real ranges.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bisector.config import Config, parse
from bisector.model import BuildResult, BuildStatus
from bisector.runner import make_executor
from bisector.runner.executor import TrialJob

SUBJECT = "import importlib\n\nimportlib.import_module({module!r})\n\n\ndef mm(a, b):\n    return a @ b\n"


def _config(root: Path, device: str, learn: bool) -> Config:
    return parse(
        {
            "name": "learned-preload",
            "upstream": {"repo": str(root)},
            "device": {"kind": device, "visible": [0]},
            "control": {"backend": "torch_cuda" if device == "cuda" else "torch"},
            "subject": {"gemm": {"entry": "bisector_subject:mm", "adapter": "torch"}},
            "suites": {"gemm": {"shapes": [{"name": "a", "M": 96, "N": 64, "K": 64, "dtype": "fp32"}]}},
            "protocol": {"reps": 3, "warmup": 1, "flush_mb": 1, "jit_cache_env": [], "learn_imports": learn},
        },
        root / "x.toml",
    )


def _phase(record: object, name: str) -> float:
    spans = [(a, b) for n, _, a, b in getattr(record, "protocol", {}).get("phases", []) if n == name]
    return sum(b - a for a, b in spans)


def run(src: Path, device: str, learn: bool, trials: int, work: Path) -> list[dict[str, object]]:
    """`trials` trial processes in turn; per trial its subject load and what it reported."""
    config = _config(src, device, learn)
    out: list[dict[str, object]] = []
    with make_executor(config, work, source="fork", ahead=0, lock_devices=False) as executor:
        executor.learn_imports = learn
        for slot in range(trials):
            (outcome,) = executor.run(
                [TrialJob(BuildResult("a" * 40, BuildStatus.OK, str(src)), config.shapes, slot, slot)]
            )
            rec = outcome.records[0]
            out.append(
                {
                    "slot": slot,
                    "status": rec.status.value,
                    "subjects_load_s": round(_phase(rec, "subjects_load"), 3),
                    "env_imports": list(rec.protocol.get("env_imports") or []),
                }
            )
            if learn and slot == 0:  # the zygote's answer, before the next fork
                deadline = time.monotonic() + 120
                while not executor.source.preloaded and time.monotonic() < deadline:
                    time.sleep(0.05)
        if learn and executor.source.preloaded:
            out.append({"zygote": executor.source.preloaded[0]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="a (bare) git repository of the library")
    ap.add_argument("--src", default=".", help="the package root inside it (Liger-Kernel: src)")
    ap.add_argument("--module", required=True, help="what the subject imports, as a first call would")
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args(argv)
    if not (args.repo / "HEAD").is_file() and not (args.repo / ".git").exists():
        print(f"error: {args.repo}: not a git repository", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="learned-preload-") as tmp:
        root = Path(tmp)
        tree = subprocess.run(
            ["git", "--git-dir", str(args.repo), "archive", "HEAD", args.src], capture_output=True, check=False
        )
        if tree.returncode != 0:
            print(f"error: {args.repo}: git archive HEAD {args.src}: {tree.stderr.decode()[-300:]}", file=sys.stderr)
            return 2
        with tarfile.open(fileobj=io.BytesIO(tree.stdout)) as tar:
            tar.extractall(root / "lib", filter="data")
        src = root / "lib" / args.src
        (src / "bisector_subject.py").write_text(SUBJECT.format(module=args.module))
        for learn in (False, True):
            rows = run(src, args.device, learn, args.trials, root / f"work-{learn}")
            loads = [float(r["subjects_load_s"]) for r in rows if "slot" in r]
            print(f"learn_imports = {str(learn).lower()}: subjects_load per trial (s): {loads}")
            print(f"  first {loads[0]:.3f} s, later median {statistics.median(loads[1:]):.3f} s")
            first = next(r for r in rows if r.get("slot") == 0)
            print(
                f"  the first trial's env_imports: {len(first['env_imports'])} names, e.g. {first['env_imports'][:6]}"
            )
            for r in rows:
                if "zygote" in r:
                    z = r["zygote"]
                    print(f"  the zygote loaded {len(z['loaded'])} in {z['s']} s; refused: {z['rejected'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

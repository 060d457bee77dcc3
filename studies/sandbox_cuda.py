"""Which part of the trial sandbox stops CUDA from initializing (error 304 on the H200, issue 22).

    python -m studies.sandbox_cuda [--out FILE]

Runs `torch.cuda` initialization (a device count, an allocation, a kernel) in a fresh process under
growing parts of the sandbox: plain; a user namespace; + a mount namespace; + a PID namespace with
its own /proc; then sandbox_init.py's steps one at a time (read-only mounts, a private /dev/shm,
capabilities dropped) and all of them. Each line: the variant, ok or the first line of the error.
Stdlib only here; the probe process imports torch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bisector.isolation import sandbox

PROBE = (
    "import torch; n = torch.cuda.device_count(); x = torch.randn(1024, device='cuda'); "
    "torch.cuda.synchronize(); print('ok', n, float((x * 2).sum()) != 0.0)"
)
# Runs sandbox_init's steps by name, then execs the probe (sandbox_init itself runs all or none).
STEPS = r"""
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("sandbox_init", sys.argv[1])
init = importlib.util.module_from_spec(spec); spec.loader.exec_module(init)
steps = sys.argv[2].split(",")
if "ro" in steps: init.set_readonly("/", True, recursive=True)
for p in [s[3:] for s in steps if s.startswith("rw:")]:  # one path made writable again after "ro"
    if os.path.isdir(p):
        init.mount(p, p, None, init.MS_BIND | init.MS_REC); init.set_readonly(p, False, recursive=True)
if "rw" in steps:
    for p in sys.argv[3].split(":"):
        init.mount(p, p, None, init.MS_BIND | init.MS_REC); init.set_readonly(p, False, recursive=True)
if "shm" in steps: init.mount("tmpfs", "/dev/shm", "tmpfs", init.MS_NOSUID | init.MS_NODEV, "size=1024m,mode=1777")
if "caps" in steps: init.drop_capabilities()
os.execv(sys.executable, [sys.executable, "-c", sys.argv[4]])
"""
USERNS = ["unshare", "--user", "--map-root-user"]
ALL_NS = list(("unshare", *sandbox.UNSHARE_FLAGS))


def variants(scratch: str) -> list[tuple[str, list[str]]]:
    py = sys.executable
    steps = [py, "-I", "-S", "-c", STEPS, sandbox.INIT]
    return [
        ("plain", [py, "-c", PROBE]),
        ("user ns", [*USERNS, py, "-c", PROBE]),
        ("user+mount ns", [*USERNS, "--mount", py, "-c", PROBE]),
        ("user+pid ns (own /proc)", [*USERNS, "--mount", "--pid", "--fork", "--mount-proc", py, "-c", PROBE]),
        ("pid ns alone, no user ns", ["unshare", "--mount", "--pid", "--fork", "--mount-proc", py, "-c", PROBE]),
        ("all ns, no steps", [*ALL_NS, *steps, "none", scratch, PROBE]),
        ("all ns + read-only mounts", [*ALL_NS, *steps, "ro", scratch, PROBE]),
        ("all ns + private /dev/shm", [*ALL_NS, *steps, "shm", scratch, PROBE]),
        ("all ns + capabilities dropped", [*ALL_NS, *steps, "caps", scratch, PROBE]),
        ("all ns + every step", [*ALL_NS, *steps, "ro,rw,shm,caps", scratch, PROBE]),
        *[
            (f"all ns + read-only but {p}", [*ALL_NS, *steps, f"ro,rw:{p}", scratch, PROBE])
            for p in ("/dev", "/proc", "/sys", "/tmp", "/run", "/var", os.path.expanduser("~"))
        ],
        (
            "sandbox_init.py as the bot runs it",
            [*ALL_NS, py, "-I", "-S", sandbox.INIT, "--rw", scratch, "--shm-mb", "1024", "--", py, "-c", PROBE],
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="run only the variants whose name contains this")
    args = parser.parse_args(argv)
    scratch = os.path.abspath("scratch-sandbox-cuda")
    os.makedirs(scratch, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    lines = [
        f"# {time.strftime('%Y-%m-%d %H:%M')}, uid {os.getuid()}, kernel {os.uname().release}",
        f"# {'variant':38s} result",
    ]
    for name, cmd in [v for v in variants(scratch) if args.only in v[0]]:
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        out = (proc.stdout.strip().splitlines() or [""])[-1]
        err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        result = (
            out
            if proc.returncode == 0 and out.startswith("ok")
            else f"rc {proc.returncode}: {(err[-1] if err else out)[:220]}"
        )
        lines.append(f"{name:40s} {result}  ({time.time() - t0:.1f} s)")
        print(lines[-1], flush=True)
        if proc.returncode != 0 and err:
            print("   " + "\n   ".join(err[-6:]), file=sys.stderr, flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A culprit shaped like a real one (written for these tests): it adds a required `kv_stride`
argument to a launch-parameter class, threads it through its `__slots__`, its constructor and ten
entry points (eight pass it by name, two as an expression), and uses it in a rewritten address
helper, beside an unrelated change to the kernel's `do_not_specialize` list. Only the helper's
statements change what `lib.api.run()` returns."""

from __future__ import annotations

from pathlib import Path

from tests.gitfixtures import git

ENTRIES = ("prefill", "decode", "varlen", "paged", "chunked", "sliding", "alibi", "softcap", "fp8", "splitk")


def _pad(tag: str) -> str:
    return "".join(f"_{tag}_PAD_{i} = {i}\n" for i in range(7))


META = {
    False: '''"""Launch parameters, one object per call."""


class LaunchMeta:
    __slots__ = ("q_stride", "block", "causal")

    def __init__(self, q_stride, block, causal):
        self.q_stride = q_stride
        self.block = block
        self.causal = causal
''',
    True: '''"""Launch parameters, one object per call."""


class LaunchMeta:
    __slots__ = ("q_stride", "kv_stride", "block", "causal")

    def __init__(self, q_stride, kv_stride, block, causal):
        self.q_stride = q_stride
        self.kv_stride = kv_stride
        self.block = block
        self.causal = causal
''',
}

_JIT = '''"""The kernel and its address helper (`jit` stands in for @triton.jit)."""


def jit(fn=None, do_not_specialize=()):
    return fn if fn is not None else (lambda f: f)
'''

KERNEL = {
    False: _JIT
    + f"""

def _kv_offsets(n, stride, block):
    rows = [i // block for i in range(n)]
    cols = [i % block for i in range(n)]
    return [r * stride + c for r, c in zip(rows, cols)]


{_pad("K")}

@jit(do_not_specialize=["n"])
def _fwd(q, k, n, meta):
    offs = _kv_offsets(n, meta.q_stride, meta.block)
    return sum(q[i % len(q)] * k[o % len(k)] for i, o in enumerate(offs))
""",
    True: _JIT
    + f"""

def _kv_offsets(n, stride, block, kv_stride):
    rows = [i // block for i in range(n)]
    cols = [i % block for i in range(n)]
    pages = [r * kv_stride for r in rows]
    return [p + c for p, c in zip(pages, cols)]


{_pad("K")}

@jit(do_not_specialize=["n", "kv_stride"])
def _fwd(q, k, n, meta):
    offs = _kv_offsets(n, meta.q_stride, meta.block, meta.kv_stride)
    return sum(q[i % len(q)] * k[o % len(k)] for i, o in enumerate(offs))
""",
}


def api(after: bool) -> str:
    out = [
        '"""Entry points: each builds its launch parameters and calls the kernel."""\n\n'
        "from lib.kernel import _fwd\nfrom lib.meta import LaunchMeta\n\n\n"
        "def kv_stride_of(k):\n    return len(k) // 2 + 1\n\n\n"
    ]
    for j, name in enumerate(ENTRIES):
        inline = j >= 8
        args = (
            "len(q), 4, True"
            if not after
            else "len(q), kv_stride_of(k), 4, True"
            if inline
            else "len(q), kv_stride, 4, True"
        )
        pre = "    kv_stride = kv_stride_of(k)\n" if after and not inline else ""
        out.append(
            f"def {name}(q, k):\n{pre}    meta = LaunchMeta({args})\n    return _fwd(q, k, {j + 5}, meta)\n\n\n"
            + _pad(name.upper())
            + "\n\n"
        )
    out.append(
        "def run():\n    q, k = [1.0, 2.0, 3.0], [float(i) for i in range(11)]\n"
        f"    return round(sum(f(q, k) for f in ({', '.join(ENTRIES)},)), 6)\n"
    )
    return "".join(out)


def files(after: bool) -> dict[str, str]:
    return {"lib/__init__.py": "", "lib/meta.py": META[after], "lib/kernel.py": KERNEL[after], "lib/api.py": api(after)}


def write(root: Path, extra_before: dict[str, str] | None = None, extra_after: dict[str, str] | None = None) -> str:
    """A repository of two commits, the parent and the culprit (plus `extra_*` files); the culprit's sha."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for after, extra, day in ((False, extra_before, 1), (True, extra_after, 2)):
        for path, text in {**files(after), **(extra or {})}.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        git(root, "add", "-A")
        git(
            root,
            "commit",
            "-q",
            "-m",
            "thread kv_stride through (#7)" if after else "attention (#1)",
            date=f"2026-08-{day:02d}T12:00:00+00:00",
        )
    return git(root, "rev-parse", "HEAD")

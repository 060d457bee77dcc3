"""Hunk search through plumbing, on a real git history: a culprit threads a new kernel argument
through a slots tuple, a constructor, call sites and two kernel signatures, and in the same commit
makes the kernel do twice the work. Grouping ties most hunks into one group; the plumbing is
recognised with `ast`, applied as a base, and the search over the rest names the statement that
doubles the work. Every subset is applied with real `git apply` and run in a real Python process,
which reports the work it did: that is the probe (a subset carries the step when it does the
culprit's work), so the search is driven by the code, not by a script of answers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import git
import pytest

from bisector import gitrepo
from bisector.why import hunk_checks, hunk_groups, hunk_plumbing, hunks
from tests.gitfixtures import commit_file

FILLER = "".join(f"FILLER_{i} = {i}\n" for i in range(8))

KERN_BEFORE = f'''"""Kernels (the decorator stands in for @triton.jit); WORK counts what they do."""

WORK = [0]


def jit(fn):
    return fn


@jit
def _attn_kernel(q, k, scale,
                 BLOCK_M):
    out = []
    for i in range(min(len(q), BLOCK_M)):
        WORK[0] += 1
        out.append(q[i] * scale + k[i])
    return out


{FILLER}

@jit
def _norm_kernel(x, eps):
    return [v / (abs(v) + eps) for v in x]
'''

KERN_AFTER = f'''"""Kernels (the decorator stands in for @triton.jit); WORK counts what they do."""

WORK = [0]


def jit(fn):
    return fn


@jit
def _attn_kernel(q, k, scale, page_stride,
                 BLOCK_M):
    out = []
    for i in range(min(len(q), BLOCK_M)):
        WORK[0] += 2
        out.append(q[i] * scale + k[(i * page_stride) % len(k)])
    return out


{FILLER}

@jit
def _norm_kernel(x, eps, page_stride):
    return [v / (abs(v) + eps) for v in x]
'''

STATE_BEFORE = """class State:
    __slots__ = ("block",)

    def __init__(self, block):
        self.block = block
"""

STATE_AFTER = """class State:
    __slots__ = ("block", "page_stride")

    def __init__(self, block, page_stride=1):
        self.block = block
        self.page_stride = page_stride
"""

API_BEFORE = f"""from lib.kern import WORK, _attn_kernel, _norm_kernel
from lib.state import State


def attn(s):
    return _attn_kernel([1.0, 2.0, 3.0], [3.0, 4.0, 5.0], 0.5,
                        BLOCK_M=s.block)


{FILLER}

def norm(s):
    return _norm_kernel([1.0, -2.0], 1e-6)


{FILLER}

def run():
    s = State(4)
    attn(s), norm(s), attn(s)
    return WORK[0]
"""

API_AFTER = f"""from lib.kern import WORK, _attn_kernel, _norm_kernel
from lib.state import State


def attn(s):
    return _attn_kernel([1.0, 2.0, 3.0], [3.0, 4.0, 5.0], 0.5, s.page_stride,
                        BLOCK_M=s.block)


{FILLER}

def norm(s):
    return _norm_kernel([1.0, -2.0], 1e-6, s.page_stride)


{FILLER}

def run():
    s = State(4, page_stride=1)
    attn(s), norm(s), attn(s)
    return WORK[0]
"""


@pytest.fixture()
def culprit(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "up"
    git.Repo.init(root, initial_branch="main", mkdir=True)
    parent = {"lib/__init__.py": "", "lib/kern.py": KERN_BEFORE, "lib/state.py": STATE_BEFORE, "lib/api.py": API_BEFORE}
    for n, (path, text) in enumerate(parent.items(), 1):
        commit_file(root, path, text, f"{path} (#{n})", n)
    for path, text in {"lib/kern.py": KERN_AFTER, "lib/state.py": STATE_AFTER}.items():
        (root / path).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    sha = commit_file(root, "lib/api.py", API_AFTER, "paged K: thread page_stride through (#5)", 5)
    return root, sha


def sources(root: Path, sha: str):
    repo = git.Repo(root)
    return (lambda p: gitrepo.file_at(repo, f"{sha}^", p)), (lambda p: gitrepo.file_at(repo, sha, p))


def parts_and_plan(root: Path, sha: str):
    parts = hunks.split(gitrepo.commit_diff(git.Repo(root), sha))
    old, new = sources(root, sha)
    groups = hunk_groups.group(parts, old, new)
    return parts, groups, hunk_checks.plan(parts, max(len(g.members) for g in groups), old, new)


class Probe:
    """The parent with a patch applied in a real worktree, run in a fresh process: its WORK."""

    def __init__(self, root: Path, sha: str, tree: Path) -> None:
        self.root, self.sha, self.tree = root, sha, tree
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), f"{sha}^"], cwd=root, check=True)
        self.runs = 0

    def work(self, patch: str, ref: str | None = None) -> int | None:
        subprocess.run(["git", "checkout", "-q", "--force", ref or f"{self.sha}^"], cwd=self.tree, check=True)
        if patch:
            (self.tree / ".p.diff").write_text(patch)
            subprocess.run(["git", "apply", ".p.diff"], cwd=self.tree, check=True, capture_output=True)
            (self.tree / ".p.diff").unlink()
        self.runs += 1
        proc = subprocess.run(
            [sys.executable, "-c", "import lib.api; print(lib.api.run())"],
            cwd=self.tree,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return int(proc.stdout) if proc.returncode == 0 else None


def test_plumbing_is_told_from_the_change(culprit) -> None:
    root, sha = culprit
    parts, groups, plan = parts_and_plan(root, sha)
    assert len(parts) == 6
    # Grouping alone ties every hunk that names page_stride or a widened kernel: most of the commit.
    assert max(len(g.members) for g in groups) > len(parts) / 2
    assert plan is not None
    # Only the attention kernel's hunk changes behaviour; within it, the signature line is plumbing
    # and the work count and the address arithmetic are two behaviour-changing statements.
    (kernel,) = plan.behaviour_hunks
    assert parts[kernel].path == "lib/kern.py" and "WORK[0] += 2" in parts[kernel].body
    assert [p.label.split(" lines ")[1] for p in plan.pieces] == ["+15", "+16"]
    assert {parts[i].path for i in plan.plumbing_hunks} == {"lib/kern.py", "lib/state.py", "lib/api.py"}
    assert len(plan.plumbing_hunks) == 5
    base_in_kernel = [p for p in plan.base if p.hunk == kernel]
    assert len(base_in_kernel) == 1 and "page_stride," in "".join(
        parts[kernel].body.splitlines(keepends=True)[i] for i in base_in_kernel[0].keep
    )


def test_the_search_names_the_statement_not_the_plumbing(culprit, tmp_path: Path) -> None:
    root, sha = culprit
    parts, _, plan = parts_and_plan(root, sha)
    assert plan is not None
    probe = Probe(root, sha, tmp_path / "tree")
    before, after = probe.work(""), probe.work("", ref=sha)
    assert (before, after) == (6, 12)
    # The plumbing base alone runs and does the parent's work: the step is not in the plumbing.
    assert probe.work(plan.patch(())) == before
    # Split hunk by hunk the base does not even run: a signature without its call sites.
    assert any(probe.work(hunks.patch_of([parts[i]])) is None for i in plan.plumbing_hunks)

    def carries(subsets):
        out = []
        for subset in subsets:
            assert not plan.compile_error(subset, sources(root, sha)[0])
            got = probe.work(plan.patch(subset))
            out.append(None if got is None else got == after)
        return out

    found = hunks.search(len(plan.pieces), carries)
    assert found.alone and plan.pieces[found.found[0]].label.endswith("lines +15")
    assert "WORK[0] += 2" in plan.patch(found.found) and "% len(k)" not in plan.patch(found.found)
    # The base and the found statement, applied to the parent with git, reproduce the culprit's work.
    assert probe.work(plan.patch(found.found)) == after
    assert probe.runs <= 8


def test_a_commit_without_plumbing_or_one_group_keeps_the_group_search(culprit, tmp_path: Path) -> None:
    root, sha = culprit
    parts = hunks.split(gitrepo.commit_diff(git.Repo(root), sha))
    old, new = sources(root, sha)
    assert hunk_checks.plan(parts, 1, old, new) is None  # no group holds most hunks
    # Only behaviour: a one-file commit changing two statements, nothing threaded through.
    plain = tmp_path / "plain"
    plain.mkdir()
    git.Repo.init(plain, initial_branch="main")
    commit_file(plain, "k.py", "a = 1\n" + FILLER + "b = 2\n" + FILLER + "c = 3\n", "base (#1)", 1)
    sha2 = commit_file(plain, "k.py", "a = 2\n" + FILLER + "b = 3\n" + FILLER + "c = 4\n", "three (#2)", 2)
    p2 = hunks.split(gitrepo.commit_diff(git.Repo(plain), sha2))
    o2, n2 = sources(plain, sha2)
    assert len(p2) == 3 and hunk_checks.plan(p2, 3, o2, n2) is None
    assert not any(p.plumbing for p in hunk_plumbing.pieces_of(p2, o2, n2))


def test_what_counts_as_plumbing() -> None:
    names = frozenset({"page_stride", "helper"})
    plumb = lambda a, b, callees=frozenset(): hunk_plumbing.is_plumbing(a, b, names, callees)  # noqa: E731
    assert plumb("def f(a, b=2):\n    return a\n", "def f(a, page_stride=1, b=2):\n    return a\n")
    assert plumb("f(x)\n", "f(x, page_stride=s)\n") and plumb("f(x)\n", "f(x, s.page_stride)\n")
    assert plumb("k[g](x)\n", "k[g](x, y.stride(2))\n", frozenset({"k"}))  # a widened kernel's launch
    assert not plumb("k[g](x)\n", "k[g](x, y.stride(2))\n")  # an unknown callee given a new value
    assert plumb("class S:\n    __slots__ = ('a',)\n", "class S:\n    __slots__ = ('a', 'page_stride')\n")
    assert plumb("x = 1\n", "x = 1\nself.page_stride = page_stride\n")
    assert plumb("x = 1\n", "from m import helper\nx = 1\n")
    assert plumb("def f():\n    '''old'''\n", "def f():\n    '''new words'''\n")  # docstrings only
    # behaviour: the new name used in arithmetic, a cast, kept out of specialization, a value changed
    assert not plumb("y = i * s\n", "y = i * page_stride\n")
    assert not plumb("y = i * s\n", "y = i.to(int64) * s\n")
    assert not plumb(
        "@jit(do_not_specialize=['a'])\ndef f(a):\n    pass\n",
        "@jit(do_not_specialize=['a', 'page_stride'])\ndef f(a):\n    pass\n",
    )
    assert not plumb("x = 1\n", "x = 2\n") and not plumb("f(x, b)\n", "f(x)\n")
    assert not plumb("x = 1\n", "x = (\n")  # does not parse: never plumbing


def test_a_multi_statement_hunk_is_cut_into_statements_that_apply_and_compile(tmp_path: Path) -> None:
    """A hunk of three changed statements, one an added `if` with its body: three pieces, the `if`
    kept with its body; every combination applies with `git apply` and compiles."""
    root = tmp_path / "m"
    root.mkdir()
    git.Repo.init(root, initial_branch="main")
    before = "def f(x, n):\n    a = x + 1\n    b = a * 2\n    c = b - 3\n    return c\n"
    after = "def f(x, n):\n    a = x + 2\n    b = a * 2\n    if n:\n        b = b * n\n    c = b - 4\n    return c\n"
    commit_file(root, "k.py", before, "base (#1)", 1)
    sha = commit_file(root, "k.py", after, "three changes (#2)", 2)
    (h,) = hunks.split(gitrepo.commit_diff(git.Repo(root), sha))
    old, _new = sources(root, sha)
    cut = hunk_plumbing.statement_pieces(h, hunk_plumbing._parse(before), hunk_plumbing._parse(after))
    assert len(cut) == 3
    pieces = tuple(hunk_plumbing.Piece(0, k, f"p{i}") for i, k in enumerate(cut))
    plan = hunk_plumbing.Plan((h,), (), pieces)
    tree = tmp_path / "t"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), f"{sha}^"], cwd=root, check=True)
    results = {}
    for subset in [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]:
        assert plan.compile_error(subset, old) == ""
        subprocess.run(["git", "checkout", "-q", "--force", f"{sha}^"], cwd=tree, check=True)
        if subset:
            (tree / "p.diff").write_text(plan.patch(subset))
            subprocess.run(["git", "apply", "p.diff"], cwd=tree, check=True, capture_output=True)
        text = (tree / "k.py").read_text()
        assert text == hunk_plumbing.apply_text(before, plan.hunks_of(subset))
        scope: dict = {}
        exec(compile(text, "k.py", "exec"), scope)
        results[subset] = scope["f"](1, 3)
    assert results[()] == 1 and results[(0, 1, 2)] == 14 and results[(1,)] == 0 and results[(2,)] == 9
    # The `if` without its body would not compile: such a cut is refused, and the check says why.
    header_only = [i for i, ln in enumerate(h.body.splitlines()) if ln.startswith("+    if n:")]
    broken = hunk_plumbing.Plan((h,), (), (hunk_plumbing.Piece(0, tuple(header_only), "if"),))
    assert "does not compile: k.py:" in broken.compile_error((0,), old)


def test_the_report_says_which_hunks_were_plumbing_and_which_lines_carry_the_step() -> None:
    from bisector.model import Commit
    from bisector.report import markdown
    from bisector.why.culprit_hunks import HunkFinding, HunkTry
    from tests.report_fixtures import one_commit_report

    sha = "a" * 40
    plumbing = tuple(f"lib/api.py @@ -{10 * i},7 +{10 * i},7 @@" for i in range(1, 10))
    finding = HunkFinding(
        sha,
        12,
        ("lib/kern.py @@ -12,7 +12,8 @@ lines +15",),
        True,
        (
            HunkTry(("plumbing base",), False, {"fa/s1024": 0.4}, trials=3),
            HunkTry(("plumbing base", "lib/kern.py @@ -12,7 +12,8 @@ lines +15"), True, {"fa/s1024": -50.0}, trials=3),
        ),
        "/r/hunk-aaaaaaa.patch",
        "+    WORK[0] += 2\n",
        plumbing=plumbing,
        n_plumbing=9,
        n_behaviour=3,
        n_pieces=4,
        found_hunks=1,
        pieces_in_found=2,
        base_patch_path="/r/hunk-aaaaaaa-plumbing.patch",
    )
    assert finding.summary == (
        "1 of 3 behaviour-changing hunks carries the step alone, on top of 9 plumbing hunks "
        "applied as a base; within it, 1 of 2 statements"
    )
    c = Commit(sha, "2026-08-06", "Ada", "paged K", 6)
    data = one_commit_report(c, device="cpu", hunks=(finding,))
    section = markdown.render(data).split("## The hunks that carry each step", 1)[1]
    assert finding.summary in section and "[hunk-aaaaaaa-plumbing.patch](hunk-aaaaaaa-plumbing.patch)" in section
    # the plumbing named compactly (the file once, each hunk by its old first line), the base alone first
    assert "`lib/api.py` @@-10; @@-20; @@-30; @@-40; @@-50; @@-60; @@-70; @@-80; @@-90" in section
    assert "  - parent + the base alone: s1024 +0.4%" in section
    assert "  - the lines that carry it: `lib/kern.py` @@-12 +15" in section
    carried = HunkFinding(sha, 12, plumbing, False, (), n_plumbing=9, n_behaviour=3, base_carries=True)
    assert carried.summary.startswith("the plumbing base alone (9 hunks")


def test_the_demo_plants_a_cause_among_plumbing(demo) -> None:
    """The demo's sliding-window commit: grouping ties all its hunks into one; the plan keeps the
    plumbing apart and leaves the key-block change (CPU and Triton) among what is searched."""
    repo = git.Repo(demo.path)
    sha = demo.sha("fa_window")
    parts = hunks.split(gitrepo.commit_diff(repo, sha))
    old = lambda p: gitrepo.file_at(repo, f"{sha}^", p)  # noqa: E731
    new = lambda p: gitrepo.file_at(repo, sha, p)  # noqa: E731
    groups = hunk_groups.group(parts, old, new)
    assert [g.members for g in groups] == [tuple(range(len(parts)))]
    plan = hunk_checks.plan(parts, len(parts), old, new)
    assert plan is not None and len(plan.plumbing_hunks) == 8 and len(plan.behaviour_hunks) == 4
    searched = {p.label.split(" lines ")[0]: parts[p.hunk].body for p in plan.pieces}
    assert any("+BLOCK_N = 32" in body for label, body in searched.items() if label.startswith("demolib/cpu_fa.py"))
    assert any("+BLOCK_N = 16" in body for label, body in searched.items() if label.startswith("demolib/triton_fa"))
    assert all("window" in parts[i].body or "WINDOW" in parts[i].body for i in plan.plumbing_hunks)


@pytest.mark.slow
@pytest.mark.demo_e2e
def test_the_cpu_demo_names_the_key_block_not_the_plumbing(tmp_path: Path) -> None:
    """The demo's sliding-window commit against its parent, for real: `bisector run` with the CPU
    demo config on fa/s1024, trial processes timing demolib, the culprit-hunk stage on real patched
    builds. Opt-in with the other demo end-to-end test (a few minutes on 2 busy cores)."""
    import json
    import re

    from bisector.demo import write_demo_repo

    manifest = write_demo_repo(tmp_path / "upstream")
    sha = manifest.sha("fa_window")
    root = Path(__file__).resolve().parents[1]
    config = (root / "configs" / "cpu-demo.toml").read_text()
    config = re.sub(r'(?m)^repo = "demo"$', f'repo = "{manifest.path}"', config)
    (tmp_path / "cpu-demo.toml").write_text(config)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisector",
            "run",
            "--config",
            str(tmp_path / "cpu-demo.toml"),
            "--good",
            f"{sha}^",
            "--bad",
            sha,
            "--store",
            str(tmp_path / "s.sqlite"),
            "--work-dir",
            str(tmp_path / "work"),
            "--report-dir",
            str(tmp_path / "report"),
            "--shapes",
            "fa/s1024",
            "--no-fixes",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert [s["commit"] for s in result["steps"]] == [sha]
    (h,) = result["hunks"]
    assert h["commit"] == sha and h["of"] == 12 and h["alone"], h
    assert h["hunks"] == ["demolib/cpu_fa.py @@ -12,7 +12,7 @@"], h
    # the CPU trials never import the Triton kernel: its hunks are set aside, the rest planned as before
    assert h["aside"] == ["demolib/triton_fa.py"], h
    assert len(h["plumbing"]) == 5 and h["behaviour_hunks"] == 2 and not h["plumbing_carries"], h
    assert h["summary"].startswith("1 of 2 behaviour-changing hunks carries the step alone, on top of 5 plumbing")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "plumbing (only threads a new name through" in report and "BLOCK_N = 32" in report


def test_a_real_culprits_finding_leads_with_its_lines_and_groups_the_reasons_subsets_did_not_run() -> None:
    """Liger-Kernel's 6a2c491 as the search left it: 25 statement pieces, ~100 subsets, most refused
    for the same few reasons. The section opens with what was found, the lines named compactly, the
    rest and why it stopped; each reason is said once with its count; every subset tried is kept,
    folded into <details>; no line outside it is a wall of labels."""
    from bisector.model import Commit
    from bisector.report import markdown
    from tests.hunk_fixtures import BLOCK_SIZE, FILE, N_BLOCK_SIZE, liger_like_finding
    from tests.report_fixtures import one_commit_report

    finding = liger_like_finding()
    c = Commit(finding.step_commit, "2025-08-01", "Ada", "Layernorm enhancement", 815)
    lines = markdown.hunks_section(one_commit_report(c, device="cuda", hunks=(finding,)))
    opened, closed = lines.index(next(ln for ln in lines if ln.startswith("<details>"))), lines.index("</details>")
    fence = next(i for i, ln in enumerate(lines) if ln.startswith("```diff"))
    outside = lines[:opened] + lines[closed + 1 : fence]
    lead = next(i for i, ln in enumerate(outside) if ln.startswith("- `6a2c491`"))
    assert outside[lead].startswith(
        "- `6a2c491` (#815): the step is within 14 of the 25 behaviour-changing statements of 6 hunks"
    )
    assert outside[lead + 1] == (
        f"  - the lines that carry it: `{FILE}` @@-43 +51; @@-81 -84-85, -87, -89, +109-164, -101, -102, -106; "
        "@@-176 +235-238; @@-212 +264-265, +272-287, -234-235, -237, -239"
    )
    assert outside[lead + 2].startswith("  - the rest: threading: 0 hunks, applied as base; not loaded by any trial:")
    assert outside[lead + 3].startswith("  - why it stopped: its budget of patched builds (`build.max_hunk_builds`)")
    assert all(len(ln) <= 400 for ln in outside), max(outside, key=len)
    # identical reasons once, with their count; the crash that cost a build comes before the refusals
    said = "\n".join(outside)
    grouped = f"{N_BLOCK_SIZE} subsets would not run: `{FILE}`: " + BLOCK_SIZE.split(f"{FILE}: ", 1)[1]
    assert [ln for ln in outside if "'BLOCK_SIZE'" in ln and ln.startswith("    - ")] == [f"    - {grouped}"]
    assert said.index("illegal memory access") < said.index(grouped)
    assert "  - tried: 63 subsets: 9 measured (8 reproduce the step, 1 does not), 54 unresolved (52 never built" in said
    # the full list keeps every subset, in order, each named in full
    full = [ln for ln in lines[opened:closed] if ln[:1].isdigit()]
    assert len(full) == len(finding.tries) == 63
    assert full[0].startswith("1. parent + the base alone: t16k_d4096 +3.9%")
    assert full[-1].startswith(f"63. parent + base + `{FILE}` @@-43 +51; @@-81 -84-85, -87, -89, +109-164,")


def test_pieces_are_named_with_their_file_once_and_reasons_split_only_between_files() -> None:
    from bisector.report.hunk_names import compact, reason, single_reasons
    from bisector.why.culprit_hunks import HunkTry
    from tests.hunk_fixtures import FILE, PIECES

    assert compact(PIECES[:5]) == f"`{FILE}` @@-1; @@-43 +45-83, +49-50, +51; @@-81 -84-85"
    assert compact(("a.py @@ -3 +3 @@", "docs/x.png (whole file)", "odd label")) == (
        "`a.py` @@-3 · `docs/x.png` (whole file) · `odd label`"
    )
    # a reason's own "; " (UnboundLocalError's note) is not where the next reason begins
    unbound = "local variable 'db_row' is read before it is bound (UnboundLocalError; in a @jit kernel, also after)"
    error = f"would not run: {FILE}: {unbound}; {FILE}: name 'n' is not defined (NameError)"
    assert reason(error) == f"would not run: `{FILE}`: {unbound}; name 'n' is not defined (NameError)"
    two_files = f"would not run: a.py: name 'x' is not defined (NameError); {FILE}: {unbound}"
    assert reason(two_files) == two_files  # files differ: each reason keeps its file
    tries = [HunkTry(("plumbing base", p), None, error=error) for p in PIECES[:3]]
    assert single_reasons(tries) == [(unbound, 3), ("name 'n' is not defined (NameError)", 3)]

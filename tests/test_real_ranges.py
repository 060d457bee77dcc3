"""The real ranges' CPU parts (benches/real/*/range.toml): each description is valid (a bad one is
one line naming the file and the key), and, where a copy of the upstream is here
(`$BISECTOR_REAL_MIRRORS`/<owner>+<name>/repo, default /work/.mirror), the range resolves to its
described length with every culprit on it, the culprit builds with the config's recipe (none) from
a small copy of the range (studies/real_repos.py) with the suite's entry file in the build, and its
diff splits into hunks that include the described files. A step that describes its hunk plan
(`loaded`, `searched`, `aside`) is planned as the bot plans it (culprit_hunks._planned, with the
trials' import trace the description gives): the described hunks are searched, the files no trial
loads are set aside, and what the search builds first parses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import git
import pytest

from benches.real.ranges import RANGES_DIR, DescriptionError, load, load_all
from bisector import config as config_mod
from bisector import gitrepo
from bisector.build.builder import Builder
from bisector.model import BuildStatus, TrialRecord, TrialStatus
from bisector.why import culprit_hunks, hunk_groups, hunks
from studies.real_repos import copy_range

MIRRORS = Path(os.environ.get("BISECTOR_REAL_MIRRORS", "/work/.mirror"))
DESCRIPTIONS = load_all(RANGES_DIR)


def test_every_library_has_a_valid_description_and_config():
    assert {d.lib for d in DESCRIPTIONS} >= {"liger", "flash_attn", "fla"}
    for d in DESCRIPTIONS:
        cfg = config_mod.load(d.config)
        shapes = {s.key for s in cfg.shapes}
        for step in d.steps:
            assert set(step.shapes) <= shapes, (d.path, step.culprit, set(step.shapes) - shapes)
        assert d.commits >= 300
    # the confirmed Liger steps describe the hunk plan the default tests check
    (liger,) = [d for d in DESCRIPTIONS if d.lib == "liger"]
    assert all(s.searched and s.loaded for s in liger.steps if s.status == "confirmed")


def mirror(desc):
    path = MIRRORS / desc.upstream.replace("/", "+") / "repo"
    if not path.is_dir():
        pytest.skip(f"no copy of {desc.upstream} at {path} (set BISECTOR_REAL_MIRRORS to a folder of mirrors)")
    return path


@pytest.mark.parametrize("desc", DESCRIPTIONS, ids=[d.lib for d in DESCRIPTIONS])
def test_range_resolves_builds_and_plans_hunks(desc, tmp_path):
    # the small copy the device run carries: the range's commits, the good one shallow
    copy = tmp_path / "up.git"
    copy_range(mirror(desc), copy, desc.good, desc.bad)
    cfg = config_mod.load(desc.config)
    repo = git.Repo(copy)
    shas = [c.sha for c in gitrepo.commit_range(repo, desc.good, desc.bad)]
    assert len(shas) == desc.commits and shas[0] == desc.good and shas[-1] == desc.bad
    assert set(desc.culprits) <= set(shas[1:])
    builder = Builder(repo, cfg.upstream, cfg.build, tmp_path / "cache")
    for step in desc.steps:  # every described step, candidates included: each is a screen entry
        for sha in (step.culprit, f"{step.culprit}^"):
            built = builder.build(gitrepo.resolve(repo, sha))
            assert built.status == BuildStatus.OK, built.log_tail
            for f in step.files:
                assert (Path(built.source_dir).parent / f).is_file() or (Path(built.source_dir) / f).is_file(), f
        parent = gitrepo.resolve(repo, f"{step.culprit}^")
        parts = hunks.split(gitrepo.commit_diff(repo, step.culprit))
        assert set(step.files) <= {h.path for h in parts}, (step.culprit, set(step.files) - {h.path for h in parts})
        groups = hunk_groups.group(
            parts,
            lambda p, parent=parent: gitrepo.file_at(repo, parent, p),
            lambda p, sha=step.culprit: gitrepo.file_at(repo, sha, p),
        )
        assert sorted(i for g in groups for i in g.members) == list(range(len(parts)))


def test_the_screen_plan_covers_each_library_and_each_step_with_its_parent():
    """benches/real/screen-plan.json is what the GPU screen times: every library's ends, and each
    candidate step beside its parent, within the budget of one device call (36 fresh processes)."""
    import json

    plan = json.loads((RANGES_DIR / "screen-plan.json").read_text())
    assert len(plan) <= 36
    labels = {(e["lib"], e["label"]) for e in plan}
    for d in DESCRIPTIONS:
        assert (d.lib, d.good[:8]) in labels and (d.lib, d.bad[:8]) in labels, d.lib
        for step in (s for s in d.steps if s.status == "candidate"):
            c = step.culprit[:8]
            assert {(d.lib, c), (d.lib, f"{c}^")} <= labels, (d.lib, c)


class _Trials:
    """The stored trials of a step's parent and culprit, as far as the plan reads them: their
    import trace (`protocol.imported`)."""

    def __init__(self, loaded: tuple[str, ...]) -> None:
        self.loaded = list(loaded)

    def stored(self, sha: str) -> list[TrialRecord]:
        return [TrialRecord(sha, "any", TrialStatus.OK, protocol={"imported": self.loaded})]


class _Session:
    def __init__(self, repo: git.Repo, loaded: tuple[str, ...]) -> None:
        self.repo, self.trials = repo, _Trials(loaded)

    def probe(self, **_: object) -> _Trials:
        return self.trials


class _At:
    def __init__(self, sha: str) -> None:
        self.commit, self.parent = sha, f"{sha}^"


PLANNED = [(d, s) for d in DESCRIPTIONS for s in d.steps if s.searched]


@pytest.mark.parametrize("desc,step", PLANNED, ids=[f"{d.lib}-{s.culprit[:8]}" for d, s in PLANNED])
def test_the_described_hunks_are_searched_and_the_unloaded_set_aside(desc, step):
    repo = git.Repo(mirror(desc))
    repo.git.update_environment(GIT_DIR=str(repo.git_dir))  # a mirror without a config reads as non-bare
    planned = culprit_hunks._planned(_Session(repo, step.loaded), _At(step.culprit))
    assert planned is not None
    assert tuple(h.label for h in planned.parts) == step.searched
    assert planned.aside.files == step.aside and set(step.files) <= {h.path for h in planned.parts}
    plan = planned.plumbed
    if plan is not None:  # the threading base (or, refused, the whole hunks) and the first halves parse
        for subset in [(), *hunks.chunks(range(len(plan.pieces)))]:
            assert "does not compile" not in plan.compile_error(subset, planned.old), subset


GOOD = (RANGES_DIR / "liger" / "range.toml").read_text()


@pytest.mark.parametrize(
    "edit,key,problem",
    [
        (('lib = "liger"\n', ""), "lib", "missing"),
        (('good = "cd6ec3289a938fcba1f09b2bb62e0cc3f4aed102"', 'good = "cd6ec32"'), "good", "full 40-hex"),
        (("commits = 341", 'commits = "341"'), "commits", "must be int"),
        (('config = "config.toml"', 'config = "nope.toml"'), "config", "no file"),
        (('kind = "regression"', 'kind = "faster"'), "steps[0].kind", "must be one of"),
        (('"ln/t16k_d4096" = 1.2', '"ln/t16k_d4096" = -1.2'), "steps[0].shapes.ln/t16k_d4096", "does not match kind"),
        (('status = "confirmed"', 'status = "maybe"'), "steps[0].status", "must be one of"),
        (("threaded = false", "threaded = false\nhunks = 3"), "steps[0].hunks", "unknown key"),
        (
            (
                'aside = ["benchmark/data/all_benchmark_data.csv", "test/transformers/test_layer_norm.py"]',
                'aside = "test/transformers/test_layer_norm.py"',
            ),
            "steps[0].aside",
            "must be a list",
        ),
        (('upstream = "linkedin/Liger-Kernel"', 'upstream = "Liger-Kernel"'), "upstream", "owner/name"),
    ],
)
def test_a_bad_description_names_file_and_key(tmp_path, edit, key, problem):
    assert edit[0] in GOOD
    (tmp_path / "config.toml").write_text((RANGES_DIR / "liger" / "config.toml").read_text())
    path = tmp_path / "range.toml"
    path.write_text(GOOD.replace(*edit, 1))
    with pytest.raises(DescriptionError) as err:
        load(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: {key}: ") and problem in msg, msg


def test_the_study_exits_2_with_the_one_line_on_a_bad_description(tmp_path):
    lib = tmp_path / "liger"
    lib.mkdir()
    (lib / "config.toml").write_text((RANGES_DIR / "liger" / "config.toml").read_text())
    (lib / "range.toml").write_text(GOOD.replace("commits = 341", "commits = -1"))
    proc = subprocess.run(
        [
            "python",
            "-c",
            f"import sys, studies.real_ranges as r; r.RANGES_DIR = __import__('pathlib')"
            f".Path({str(tmp_path)!r}); sys.exit(r.main(['--libs', 'liger']))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == f"error: {lib / 'range.toml'}: commits: must be at least 2, got -1"
    )


def test_the_table_shows_the_cause_line_from_the_json_causes():
    """`bisector run --json` puts each step's cause under `causes` (bisector/commands/run_job.py), its
    kernels' names under `kernels`: the table's column reads the first."""
    from studies.real_ranges import cause_line

    sha = "dc8fd708575a530bf773645efdc36b6bc6c53552"
    data = {
        "kernels": [{"commit": sha, "changed": ["rotary_kernel"] * 3, "note": ""}],
        "causes": [
            {
                "commit": sha,
                "cause": "`ROTARY_DIM` became a constexpr: 16-bit global loads 12 -> 0.",
                "kind": "constexpr",
            }
        ],
    }
    assert cause_line(data, sha[:7]) == "`ROTARY_DIM` became a constexpr: 16-bit global loads 12 -> 0."
    assert cause_line({"kernels": data["kernels"]}, sha).startswith("(no cause line) changed: rotary_kernel")


def test_the_tables_hunk_cell_says_the_finding_in_one_unit():
    """The table's hunk cell for a finding shaped like Liger's 6a2c491 (14 statement pieces of 6
    behaviour-changing hunks, in a commit of 11 hunks): what the report says, never the pieces over
    the commit's hunks ("14 of 11"), from today's `--json` and from a run.json made before its
    `named` and `lines` keys; whole-hunk findings read "4 of 5 hunks"."""
    from bisector.commands.run_job import hunk_json
    from studies.real_ranges import hunks_named
    from tests.hunk_fixtures import FILE, liger_like_finding

    finding = liger_like_finding()
    entry = hunk_json(finding)  # what `run --json` prints for it
    assert entry["of"] == 11 and len(entry["hunks"]) == 14  # as before: kept for older readers
    assert (entry["unit"], entry["found"], entry["searched"], entry["found_in_hunks"]) == ("statements", 14, 25, 4)
    lines = (
        f"`{FILE}` @@-43 +51; @@-81 -84-85, -87, -89, +109-164, -101, -102, -106; @@-176 +235-238; "
        "@@-212 +264-265, +272-287, -234-235, -237, -239"
    )
    cell = hunks_named({"hunks": [entry]}, finding.step_commit[:8])
    assert cell == (f"within 14 of the 25 behaviour-changing statements of 6 hunks; stopped early: builds: {lines}")
    assert "14 of 11" not in cell
    # a run.json from before `named` and `lines` (tonight's): the summary's words, the pieces named compactly
    old = {k: entry[k] for k in ("commit", "of", "hunks", "summary")}
    cell = hunks_named({"hunks": [old]}, finding.step_commit[:8])
    assert cell.startswith("the step is within 14 of the 25 behaviour-changing statements of 6 hunks")
    assert cell.endswith(lines) and "14 of 11" not in cell
    # a whole-hunk finding (the threading base would not run): hunks over hunks
    from bisector.why.culprit_hunks import HunkFinding

    whole = tuple(f"{FILE} @@ -{a},9 +{a},9 @@" for a in (1, 85, 228, 260))
    entry = hunk_json(HunkFinding("b" * 40, 5, whole, False, (), aside=("test/t.py",), n_aside=1))
    assert hunks_named({"hunks": [entry]}, "b" * 8) == f"4 of 5 hunks: `{FILE}` @@-1; @@-85; @@-228; @@-260"


def test_each_run_starts_in_an_emptied_dir(tmp_path):
    """A `--dir` used before: its store and worktrees are gone, so the run is cold again."""
    from studies.real_ranges import cold_dir

    old = tmp_path / "fla"
    (old / "work").mkdir(parents=True)
    (old / "results.sqlite").write_text("an earlier run's store")
    assert cold_dir(old) == old and old.is_dir() and not any(old.iterdir())


def test_an_unknown_library_is_one_line_and_exit_2(tmp_path, capsys):
    from studies import real_ranges

    assert real_ranges.main(["--libs", "liger,nosuch", "--out", str(tmp_path / "t.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nosuch" in err and "liger" in err and not (tmp_path / "t.txt").exists()

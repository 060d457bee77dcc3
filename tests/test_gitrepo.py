import json
import subprocess
import sys

import pytest

from bisector import gitrepo
from bisector.errors import BadInput, RefError
from tests.gitfixtures import git, merge_history, squash_history


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisector", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "message,expected",
    [
        ("fix the thing (#950)", 950),
        ("Merge pull request #974 from someone/branch\n\nbody", 974),
        ("no number here", None),
        ("refers to #12 in the middle", None),
        ("", None),
    ],
)
def test_pr_number(message, expected):
    assert gitrepo.pr_number(message) == expected


def test_squash_range_oldest_first_with_prs(tmp_path):
    shas = squash_history(tmp_path / "r", 6)
    repo = gitrepo.open_repo(str(tmp_path / "r"))
    commits = gitrepo.commit_range(repo, shas[0][:7], "main")
    assert [c.sha for c in commits] == shas
    assert [c.pr for c in commits] == [None, 901, 902, 903, 904, 905]
    assert commits[2].date.startswith("2026-08-03")
    assert commits[1].author == "Ada Kernel"


def test_merge_history_walks_first_parents(tmp_path):
    h = merge_history(tmp_path / "r")
    repo = gitrepo.open_repo(str(tmp_path / "r"))
    commits = gitrepo.commit_range(repo, h["base"], h["last"])
    assert [c.sha for c in commits] == [h["base"], h["main2"], h["merge"], h["last"]]
    assert [c.pr for c in commits] == [None, 949, 950, 951]
    assert h["side"] not in {c.sha for c in commits}


def test_range_errors(tmp_path):
    shas = squash_history(tmp_path / "r", 3)
    repo = gitrepo.open_repo(str(tmp_path / "r"))
    with pytest.raises(RefError, match="unknown ref 'nope'"):
        gitrepo.commit_range(repo, "nope", "main")
    with pytest.raises(RefError, match="not an ancestor"):
        gitrepo.commit_range(repo, shas[2], shas[0])
    with pytest.raises(RefError, match="empty range"):
        gitrepo.commit_range(repo, shas[1], shas[1])
    with pytest.raises(BadInput, match="not a git repository"):
        gitrepo.open_repo(str(tmp_path))
    h = merge_history(tmp_path / "m")
    with pytest.raises(RefError, match="first-parent"):
        gitrepo.commit_range(gitrepo.open_repo(str(tmp_path / "m")), h["side"], h["last"])


def test_url_is_cloned_into_cache(tmp_path):
    shas = squash_history(tmp_path / "origin", 3)
    url = (tmp_path / "origin").as_uri()
    repo = gitrepo.open_repo(url, cache_dir=tmp_path / "cache")
    assert str(tmp_path / "cache") in repo.git_dir
    assert [c.sha for c in gitrepo.commit_range(repo, shas[0], shas[2])] == shas
    # A new upstream commit is seen after the next open (fetch).
    git(tmp_path / "origin", "commit", "-q", "--allow-empty", "-m", "more (#999)")
    repo = gitrepo.open_repo(url, cache_dir=tmp_path / "cache")
    assert gitrepo.commit_range(repo, shas[0], "main")[-1].pr == 999


def test_cli_range_table_json_and_exit_codes(tmp_path):
    shas = squash_history(tmp_path / "r", 4)
    out = run_cli("range", shas[0][:8], "main", "--repo", str(tmp_path / "r"), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["sha"] for r in rows] == shas
    assert set(rows[0]) == {"sha", "date", "author", "pr", "subject"}
    assert rows[3]["pr"] == 903 and rows[0]["pr"] is None
    table = run_cli("range", shas[0], shas[3], "--repo", str(tmp_path / "r"))
    assert "#902" in table.stdout and shas[2][:7] in table.stdout
    for args, needle in [
        (("range", "nope", "main"), "unknown ref 'nope'"),
        (("range", shas[3], shas[0]), "not an ancestor"),
        (("range", shas[1], shas[1]), "empty range"),
    ]:
        bad = run_cli(*args, "--repo", str(tmp_path / "r"))
        assert bad.returncode == 2 and needle in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    bad = run_cli("range", "a", "b", "--repo", str(tmp_path))
    assert bad.returncode == 2 and "not a git repository" in bad.stderr

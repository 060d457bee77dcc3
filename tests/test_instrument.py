"""The trial's read-only copy of `benches` (bisector/isolation/instrument.py), made from several threads
at once as a fresh machine's first run makes it (the executor and the warmer open their workers
together): on an H200 two threads of one bot shared one temporary dir, and one deleted the other's
files mid-copy (FileNotFoundError on a .pyc), which stopped the run before its first trial."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor

from bisector.isolation import instrument


def test_threads_making_the_copy_at_once_share_one_complete_copy(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        roots = list(pool.map(lambda _: instrument.snapshot(tmp_path), range(8)))
    assert len(set(roots)) == 1
    root = roots[0]
    assert (root / ".complete").exists() and (root / "benches" / "trial.py").exists()
    assert [p.name for p in (tmp_path / "instrument").iterdir()] == [root.name]  # no temporary dir left
    mode = (root / "benches" / "trial.py").stat().st_mode
    assert not mode & stat.S_IWUSR and mode & stat.S_IROTH
    assert os.stat(root).st_mode & stat.S_IROTH and os.stat(root).st_mode & stat.S_IXOTH  # others may enter


def test_a_changed_copy_is_made_again(tmp_path):
    root = instrument.snapshot(tmp_path)
    victim = root / "benches" / "trial.py"
    os.chmod(victim, stat.S_IRUSR | stat.S_IWUSR)
    victim.write_text("# tampered\n")
    again = instrument.snapshot(tmp_path)
    assert again == root and "# tampered" not in (again / "benches" / "trial.py").read_text()

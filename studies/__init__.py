"""Studies: scripts that measure the bot itself (noise, throughput, search accuracy, replays),
run by hand on the host, with their recorded figures in studies/results/.

Unlike benches/ (the instrument inside the trial process), these may import `bisector`.
"""

from pathlib import Path
from typing import Sequence

from bisector.model import TrialRecord
from bisector.store import Store


def no_such_files(paths: Sequence[Path], what: str, prog: str) -> str | None:
    """The one-line error of a study given files that are not there (exit 2), else None."""
    missing = [str(p) for p in paths if not Path(p).is_file()]
    return f"{prog}: no such {what}: {', '.join(missing)}" if missing else None


def trial_processes(path: Path) -> dict[tuple[str, str | None, int | None], list[TrialRecord]]:
    """Every stored trial record of every campaign, grouped by the trial process that made it
    (commit, patch, slot): read through the store's own read-only opening, which leaves the file as it is."""
    out: dict[tuple[str, str | None, int | None], list[TrialRecord]] = {}
    with Store(path, readonly=True) as store:
        for campaign in store.info().campaigns:
            for r in store.trials(campaign.campaign):
                out.setdefault((r.sha, r.patch_hash, r.slot), []).append(r)
    return out

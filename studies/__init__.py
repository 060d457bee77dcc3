"""Studies: scripts that measure the bot itself (noise, throughput, search accuracy, replays),
run by hand on the host, with their recorded figures in studies/results/.

Unlike benches/ (the instrument inside the trial process), these may import `bisector`.
"""

from collections.abc import Sequence
from pathlib import Path


def no_such_files(paths: Sequence[Path], what: str, prog: str) -> str | None:
    """The one-line error of a study given files that are not there (exit 2), else None."""
    missing = [str(p) for p in paths if not Path(p).is_file()]
    return f"{prog}: no such {what}: {', '.join(missing)}" if missing else None

"""A run's stored trials, grouped by the trial process that made them, for the studies that read a store.

Its own module: studies/__init__.py stays free of bisector, which the trial side's studies
(studies/harness_noise.py) must not import (tests/test_backends.py).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bisector.errors import BadInput
from bisector.model import TrialRecord
from bisector.store import Store
from studies import no_such_files


def trial_processes(path: Path) -> dict[tuple[str, str | None, int | None], list[TrialRecord]]:
    """Every stored trial record of every campaign, grouped by the trial process that made it
    (commit, patch, slot): read through the store's own read-only opening, which leaves the file as it is."""
    out: dict[tuple[str, str | None, int | None], list[TrialRecord]] = {}
    with Store(path, readonly=True) as store:
        for campaign in store.info().campaigns:
            for r in store.trials(campaign.campaign):
                out.setdefault((r.sha, r.patch_hash, r.slot), []).append(r)
    return out


@contextmanager
def plain_store(path: Path) -> Iterator[Path]:
    """`path`, or for a gzipped store (studies/results keeps them so) its SQLite file unpacked into a
    temporary directory for as long as the block runs."""
    if path.suffix != ".gz":
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp, path.stem)
        with gzip.open(path) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        yield plain


def over_stores(
    prog: str,
    doc: str,
    argv: list[str] | None,
    options: Callable[[argparse.ArgumentParser], None],
    header: Callable[[argparse.Namespace], Sequence[str]],
    per_store: Callable[[Path, argparse.Namespace], str],
) -> int:
    """The `main` of a study that reads stores: STORE... and the study's `options`; a missing file or
    one that is not a store is a one-line error (exit 2); else the `header` lines and each store's."""
    parser = argparse.ArgumentParser(prog=f"python -m studies.{prog}", description=doc.split("\n\n")[0])
    parser.add_argument("stores", type=Path, nargs="+")
    options(parser)
    args = parser.parse_args(argv)
    error = no_such_files(args.stores, "store", prog)
    if error:
        print(error, file=sys.stderr)
        return 2
    for line in header(args):
        print(line)
    for store in args.stores:
        try:
            with plain_store(store) as plain:
                print(per_store(plain, args).replace(str(plain), str(store)), flush=True)
        except (BadInput, gzip.BadGzipFile) as exc:  # not a store of ours: a one-line error
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
    return 0

"""The documents a user reads link only to what is there, and `reports/` stays small.

A report once linked 21 times to a `kernels/` folder that was never committed, the README pointed at
reports that had been renamed, and `reports/` grew to 66 MB of re-runs of one demo."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MAX_REPORTS_BYTES = 15 * 1024 * 1024


def documents() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "reports").rglob("*.md"))]
    studies = ROOT / "studies" / "README.md"
    return found + ([studies] if studies.is_file() else [])


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6}\s+(.*?)\s*#*\s*$", text)}


def broken_links(path: Path) -> list[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))  # code blocks are not links
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        where, _, fragment = target.partition("#")
        resolved = (path.parent / unquote(where)).resolve() if where else path
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target} (no heading #{fragment})")
    return broken


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading) [web](https://example.com)\n"
        "`[code](gone.md)` ![plot](gone.png) [x](there.md#gone)\n"
    )
    assert broken_links(page) == ["gone.png (no such file)", "there.md#gone (no heading #gone)"]


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_reports_stay_small() -> None:
    size = sum(p.stat().st_size for p in (ROOT / "reports").rglob("*") if p.is_file())
    assert size < MAX_REPORTS_BYTES, f"reports/ holds {size / 2**20:.1f} MiB"

"""Golden files for every section of report.md and for the summary `run` prints, rendered from one
synthetic ReportData (tests/report_fixtures.py: full_report) and compared exactly.

To regenerate after an intended change of format, then read the diff before committing it:

    BISECTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_report_golden.py
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bisector.report import action_summary, markdown, summary
from bisector.report.data import ReportData
from tests.report_fixtures import full_report

GOLDEN = Path(__file__).parent / "golden"

SECTIONS: dict[str, Callable[[ReportData], list[str]]] = {
    "actions": action_summary.summary_lines,
    "header": markdown.header,
    "steps": markdown.steps_section,
    "unsure": markdown.unsure_section,
    "hunks": markdown.hunks_section,
    "fixes": markdown.fixes_section,
    "commits": markdown.commits_section,
    "wrong": markdown.wrong_section,
    "skipped": markdown.skipped_section,
    "files": lambda data: markdown.files_section(data, ["tflops-fa_s4096.png", "tflops-gemm_m8192.png"], "trials.csv"),
}


def check(name: str, text: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("BISECTOR_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs (see its docstring to regenerate)"


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_section_matches_golden(section: str) -> None:
    check(f"report_{section}.md", "\n".join(SECTIONS[section](full_report())) + "\n")


def test_the_report_is_its_sections_in_order() -> None:
    data = full_report()
    text = markdown.render(data, ["tflops-fa_s4096.png", "tflops-gemm_m8192.png"])
    at = 0
    assert text.startswith(f"# {data.title}\n\n")
    for section in ("actions", "header", "steps", "unsure", "hunks", "fixes", "commits", "wrong", "skipped", "files"):
        body = "\n".join(SECTIONS[section](data)).strip("\n")
        found = text.find(body, at)
        assert found >= at, section
        at = found + len(body)


def test_summary_matches_golden() -> None:
    check("report_summary.txt", "\n".join(summary.lines(full_report(), "reports/x/report.md")) + "\n")


def test_unsure_pairs_fold_when_many() -> None:
    from dataclasses import replace

    data = full_report()
    many = replace(data, unsure=data.unsure * 3)
    text = "\n".join(markdown.unsure_section(many))
    assert f"<details><summary>The {3 * len(data.unsure)} unsure pairs</summary>" in text
    assert text.rstrip().endswith("</details>")
    assert "<details>" not in "\n".join(markdown.unsure_section(data))

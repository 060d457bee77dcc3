"""Where a trial's inputs lie within a page: evidence for a build that reads differently in one run.

The CPU demo's tall GEMM read 28-42 ms by its input's address offset within a page alone, at the
kernel sizes of that time (studies/results/cpu-slow-builds.txt, part 1). In a trial process that
offset follows from everything allocated before the inputs. studies/layout_bias.py found it the same
for every trial and every build forked from one zygote (one run), different from run to run, and
without a measurable effect on the ratio at the demo's present sizes (studies/results/cpu-layout-bias.txt);
each result records it (`input_page_offsets`) so that a slow build can be checked against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PAGE = 4096


def page_offsets(inputs: Mapping[str, Any]) -> dict[str, int]:
    """Input name -> its data's address modulo the page size (tensors only)."""
    out = {}
    for name, value in inputs.items():
        ptr = getattr(value, "data_ptr", None)
        if callable(ptr):
            out[name] = int(ptr()) % PAGE
    return out

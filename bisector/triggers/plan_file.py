"""A publish plan is settled only after the untrusted is gone: the last step before it is written or posted.

    plan = settle(plan, config.publish)         # before an in-process publish
    write(plan, path, config.publish)           # `publish-plan.json`, for the workflow's publish job

Settling kills whatever code under test left running below the bot (bisector/isolation/survivors.py)
and says so in the plan's missing data (a run whose code under test outlived its trials is not
"no change"), then renders every text the way the bot posts it (bisector/publish/plan_text.py):
the upstream's commit subjects ping nobody and link nowhere, and `publish` can check a plan file
against exactly that.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bisector.config import Publish
from bisector.isolation.survivors import end_leftovers
from bisector.publish.plan_text import rendered, web_base
from bisector.publish.publish_plan import PublishPlan, dump_plan


def leftover_line(killed: tuple[str, ...]) -> str:
    shown = ", ".join(killed[:5]) + (f" and {len(killed) - 5} more" if len(killed) > 5 else "")
    return (
        f"{len(killed)} process(es) started by the code under test outlived their trials and were killed "
        f"before this plan was written: {shown}"
    )


def settle(plan: PublishPlan, cfg: Publish) -> PublishPlan:
    """`plan` once nothing of the code under test runs any more, its texts as the bot posts them."""
    killed = end_leftovers()
    if killed:
        plan = replace(plan, missing=(*plan.missing, leftover_line(killed)))
    return rendered(plan, web_base(cfg.base_url))


def write(plan: PublishPlan, path: Path, cfg: Publish) -> PublishPlan:
    """Settle `plan` and write it to `path` (what `bisector publish --plan` reads); the plan written."""
    plan = settle(plan, cfg)
    dump_plan(plan, path)
    return plan


__all__ = ["leftover_line", "settle", "write"]

"""Render the demo library's source templates for one point of its history. Pure: no I/O.

A template is ordinary Python (or text) with two additions, so that each planted change shows
up in the generated repository as a small, readable diff:

    #% if KNOB            keep the following lines when knobs[KNOB] is truthy
    #% if not KNOB        ... when it is falsy
    #% else
    #% endif             (blocks do not nest)
    {{KNOB}}              replaced by str(knobs[KNOB])
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_DIRECTIVE = re.compile(r"^\s*#%\s*(if not|if|else|endif)\s*(\w*)\s*$")
_SUBST = re.compile(r"\{\{(\w+)\}\}")


class TemplateError(ValueError):
    """A template names an unknown knob or has unbalanced directives (a bug in the demo)."""


def render(text: str, knobs: Mapping[str, Any], name: str = "<template>") -> str:
    out: list[str] = []
    keep: bool | None = None  # None: outside any block
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        match = _DIRECTIVE.match(line)
        if match:
            word, knob = match.groups()
            if word.startswith("if"):
                if keep is not None:
                    raise TemplateError(f"{name}:{lineno}: nested '#% if'")
                if knob not in knobs:
                    raise TemplateError(f"{name}:{lineno}: unknown knob {knob!r}")
                keep = bool(knobs[knob]) != (word == "if not")
            elif word == "else":
                if keep is None:
                    raise TemplateError(f"{name}:{lineno}: '#% else' outside a block")
                keep = not keep
            else:
                if keep is None:
                    raise TemplateError(f"{name}:{lineno}: '#% endif' outside a block")
                keep = None
            continue
        if keep is False:
            continue

        def subst(m: re.Match[str], lineno: int = lineno) -> str:
            if m.group(1) not in knobs:
                raise TemplateError(f"{name}:{lineno}: unknown knob {m.group(1)!r}")
            return str(knobs[m.group(1)])

        out.append(_SUBST.sub(subst, line))
    if keep is not None:
        raise TemplateError(f"{name}: unterminated '#% if'")
    return "".join(out)

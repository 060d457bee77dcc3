"""A failed trial's error as one line that names it: the exception type and its message's meaningful
line. Pure.

A trial records `<Type>: <str(exc)>` (benches/trial.py), and many messages span lines with the
meaning in one of them: a Triton CompilationError is "at 5:20:", up to twelve source lines, a caret,
then the error it wraps (`NameError('x is not defined')`); a CUDA error is "CUDA error: <what>"
followed by advice that is the same for every CUDA error; a Python traceback (a trial's log tail)
ends with the exception. Every "does not run" reason (a commit, a subset of hunks, a revert) is one
line in a report's list, so it is made here, from the line that says what went wrong.
"""

from __future__ import annotations

import re

__all__ = ["error_line", "MAX_CHARS"]

#: with "does not run: " in front, a reason stays whole where a revert's or a combination's check keeps
#: the last 200 characters of it (bisector/why/fixes.py, interactions.py)
MAX_CHARS = 180
# `NameError('x')`, `AssertionError()`: the repr of the exception a CompilationError wraps
_WRAPPED = re.compile(r"[A-Z]\w*(Error|Exception|Warning)\(.*\)$")
# `ValueError: x`, `triton.compiler.errors.CompilationError: x`, `torch.AcceleratorError: x`
_RAISED = re.compile(r"([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)|[A-Z]\w*Error\w*)(: .*)?$")


def _cut(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3].rstrip() + "..."


def error_line(text: str) -> str:
    """The one line of `text` (an error, a traceback, a log tail) that says what went wrong, with the
    exception's type in front where the text gives it; "" for an empty text."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0]
    typed = re.match(r"([A-Za-z_][\w.]*): ", first)
    kind = typed.group(1) if typed and _RAISED.fullmatch(typed.group(1)) else ""
    cuda = next((ln for ln in lines if "CUDA error:" in ln), None)
    if cuda is not None:  # the line after it is the same advice for every CUDA error
        return _cut(
            cuda if cuda.startswith(f"{kind}: ") or not kind else f"{kind}: {cuda[cuda.index('CUDA error:') :]}"
        )
    at = re.match(r"(?:[A-Za-z_][\w.]*: )?at (\d+:\d+):$", first)
    if at:  # a Triton compile error: where, the source, a caret, then the error it wraps
        wrapped = next((ln for ln in reversed(lines) if _WRAPPED.match(ln)), lines[-1])
        return _cut(f"{kind + ': ' if kind else ''}{wrapped} (at {at.group(1)})")
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):  # the exception ends it
        raised = next((i for i in range(len(lines) - 1, -1, -1) if _RAISED.match(lines[i])), None)
        if raised is not None:
            return error_line("\n".join(lines[raised:]))
    return _cut(first)

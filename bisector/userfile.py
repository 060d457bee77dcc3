"""Reading a file the user named: every failure is one line naming the file (exit 2).

Why one place: a config, a step model, a patch or an event that is missing, a directory, unreadable
or not UTF-8 raised a traceback from wherever it was read.
"""

from __future__ import annotations

from pathlib import Path

from bisector.errors import BadInput


class UserFileError(BadInput):
    """A file the user named cannot be read as text; `problem` is the message without the path."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}")


def read_text(path: str | Path, newline_exact: bool = False) -> str:
    """The file's text, decoded as UTF-8 (a leading BOM is dropped).

    newline_exact keeps CRLF line ends as they are (patches); otherwise they are read as '\\n'."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserFileError(path, "no such file") from None
    except IsADirectoryError:
        raise UserFileError(path, "is a directory, not a file") from None
    except OSError as exc:
        raise UserFileError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserFileError(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})") from None
    return text if newline_exact else text.replace("\r\n", "\n")

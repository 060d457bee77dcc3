"""Reading a JSON file the user named: every failure is one line naming the file (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bisector.errors import BadInput
from bisector.userfile import read_text


def read_json(path: str | Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise BadInput(f"{path}: invalid JSON: nested too deeply") from None

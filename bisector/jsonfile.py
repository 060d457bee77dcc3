"""Reading a JSON file the user named: every failure is one line naming the file (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bisector.errors import BadInput


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: invalid JSON: {exc}") from None

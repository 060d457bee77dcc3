"""Reading one TOML table of a config, every problem as `file: key: problem` (ConfigError, exit 2)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bisector.errors import ConfigError
from bisector.paths import absolute_or_none


def show(value: object, limit: int = 80) -> str:
    """A value as the message shows it: repr, capped (a config can hold a megabyte string)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Section:
    """Reads one TOML table, remembering the dotted path for error messages."""

    def __init__(self, path: Path, data: Mapping[str, Any], prefix: str, known: tuple[str, ...]):
        self.path, self.data, self.prefix = path, data, prefix
        if not isinstance(data, Mapping):
            raise ConfigError(path, prefix, "must be a table")
        for key in data:
            if key not in known:
                raise ConfigError(path, self.name(key), f"unknown key (known: {', '.join(known)})")

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., choices: tuple[Any, ...] = ()) -> Any:
        if key not in self.data:
            if default is ...:
                raise ConfigError(self.path, self.name(key), "missing")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(self.path, self.name(key), f"must be {names}, got {show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(self.path, self.name(key), f"must be a finite number, got {value!r}")
        if choices and value not in choices:
            raise ConfigError(
                self.path, self.name(key), f"must be one of {', '.join(map(str, choices))}, got {show(value)}"
            )
        return value

    def positive(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value <= 0:
            raise ConfigError(self.path, self.name(key), f"must be > 0, got {value!r}")
        return value

    def non_negative(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value is not None and value < 0:  # None: an optional key left out
            raise ConfigError(self.path, self.name(key), f"must be >= 0, got {value!r}")
        return value

    def path_value(self, key: str) -> str | None:
        """A path in the config, made absolute against the current directory (where bisector runs)."""
        value = self.get(key, str, None)
        if value == "":
            raise ConfigError(self.path, self.name(key), "must not be empty")
        return absolute_or_none(value)

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self.get(key, list, list(default))
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(self.path, self.name(key), "must be a list of strings")
        return tuple(value)

    def str_map(self, key: str) -> dict[str, str]:
        value = self.get(key, dict, {})
        for k, v in value.items():
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise ConfigError(self.path, f"{self.name(key)}.{k}", "must be a string or number")
        return {k: str(v) for k, v in value.items()}

    def section(self, key: str, known: tuple[str, ...], required: bool = False) -> Section:
        if key not in self.data and required:
            raise ConfigError(self.path, self.name(key), "missing table")
        return Section(self.path, self.data.get(key, {}), self.name(key), known)

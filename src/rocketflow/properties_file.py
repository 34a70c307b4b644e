"""RocketMQ-style ``.properties`` settings files (``broker.conf``, ``namesrv.properties``), for the servers.

`parse_properties` splits the text into ``(line, key, value)``, `read_settings_file` reads a file,
`file_then_overrides` layers a file's settings and explicit ones, `field_types` gives a settings
dataclass's field types, `convert_setting` turns a value's text into one of them and `make_settings`
builds the dataclass. Each raises the error class its caller names, so a server reports its own error.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

_T = TypeVar("_T")

#: ``key=value``, ``key: value`` or ``key value``.
_ENTRY = re.compile(r"([^=:\s]+)\s*[=:\s]\s*(.*)$")


def parse_properties(text: str, error: type[Exception] = ValueError,
                     source: str | None = None) -> list[tuple[int, str, str]]:
    """Java properties (``key=value`` or ``key: value``, ``#``/``!`` comments) -> (line, key, value); a
    line that is neither raises ``error`` naming ``source:line`` (no source: ``line <n>``)."""
    entries: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        match = _ENTRY.match(stripped)
        if match is None:
            where = f"line {number}" if source is None else f"{source}:{number}"
            raise error(f"{where}: expected key=value, got {stripped!r}")
        entries.append((number, match.group(1), match.group(2)))
    return entries


def read_settings_file(path: Path, error: type[Exception]) -> str:
    """The text of the settings file ``path``; ``error`` when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None


def file_then_overrides(conf_file: str | Path | None, overrides: Mapping[str, object] | None,
                        from_text: Callable[[str, str], dict[str, object]],
                        error: type[Exception]) -> dict[str, object]:
    """The settings ``from_text(text, source)`` finds in ``conf_file`` (if given), then the ``overrides``
    that are not None."""
    values: dict[str, object] = {}
    if conf_file is not None:
        path = Path(conf_file)
        values.update(from_text(read_settings_file(path, error), str(path)))
    if overrides:
        values.update({key: value for key, value in overrides.items() if value is not None})
    return values


def snake_case(name: str) -> str:
    """A camelCase RocketMQ setting name as a snake_case field name."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def field_types(cls: type) -> dict[str, Any]:
    """Field name -> type of the settings dataclass ``cls``."""
    hints = get_type_hints(cls)
    return {item.name: hints[item.name] for item in dataclasses.fields(cls)}


def convert_setting(raw: str, hint: Any, where: str, error: type[Exception],
                    convert_other: Callable[[str, Any], object] | None = None) -> object:
    """``raw`` (stripped) as a value of type ``hint``: None for an empty or ``null`` optional, a bool, an
    int, a float, a path or a string, else what ``convert_other(text, hint)`` makes (NotImplemented:
    it cannot). A malformed value (ValueError, KeyError) or another type raises ``error``."""
    text = raw.strip()
    if get_origin(hint) in (Union, types.UnionType):
        if text == "" or text.lower() == "null":
            return None
        hint = next(member for member in get_args(hint) if member is not type(None))
    try:
        if hint is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return text.lower() == "true"
        if hint is int:
            return int(text)
        if hint is float:
            return float(text)
        if hint is Path:
            return Path(text).expanduser()
        if hint is str:
            return text
        if convert_other is not None:
            value = convert_other(text, hint)
            if value is not NotImplemented:
                return value
    except (ValueError, KeyError) as exc:
        raise error(f"{where}={raw!r}: {exc}") from None
    raise error(f"{where}: settings of type {hint!r} cannot be set from a file")


def make_settings(make: Callable[[], _T], error: type[Exception], *keep: type[Exception]) -> _T:
    """``make()``, a TypeError or ValueError it raises turned into ``error`` (those of ``keep`` pass as they are)."""
    try:
        return make()
    except keep:
        raise
    except (TypeError, ValueError) as exc:
        raise error(str(exc)) from None


__all__ = [
    "convert_setting",
    "field_types",
    "file_then_overrides",
    "make_settings",
    "parse_properties",
    "read_settings_file",
    "snake_case",
]

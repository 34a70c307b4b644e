"""The message properties string (docs/design/wire-format.md, "Properties").

``key 0x01 value 0x02 key 0x01 value`` with no trailing separator, UTF-8 on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from rocketflow.errors import RocketflowError

#: Between a key and its value.
NAME_VALUE_SEPARATOR: Final = "\x01"
#: Between two entries.
PROPERTY_SEPARATOR: Final = "\x02"


class InvalidPropertyError(RocketflowError, ValueError):
    """A property that cannot be written: its key or value contains a separator."""


def encode_properties(props: Mapping[str, str | None]) -> str:
    """The properties string of ``props``; entries whose value is None are skipped.

    Raises `InvalidPropertyError` if a key contains 0x01 or 0x02, or a value contains 0x02
    (a reader could not split such an entry back out). Empty keys and values are written, as
    RocketMQ does, although `decode_properties` drops them.
    """
    parts = [f"{key}\x01{value}" for key, value in props.items() if value is not None]
    text = "\x02".join(parts)
    count = len(parts)
    # Fast check: exactly one 0x01 per entry and count-1 0x02 means every entry is clean.
    if text.count("\x01") != count or (count and text.count("\x02") != count - 1):
        _check_entries(props)
    return text


def _check_entries(props: Mapping[str, str | None]) -> None:
    for key, value in props.items():
        if value is None:
            continue
        if NAME_VALUE_SEPARATOR in key or PROPERTY_SEPARATOR in key:
            raise InvalidPropertyError(f"property key {key!r} contains a separator character (0x01 or 0x02)")
        if PROPERTY_SEPARATOR in value:
            raise InvalidPropertyError(f"value of property {key!r} contains the separator character 0x02")


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties string the way RocketMQ does.

    Segments without a key or without a value (including those shorter than 3 characters) are
    ignored; a value may itself contain 0x01; a repeated key keeps its last value.
    """
    result: dict[str, str] = {}
    if not text:
        return result
    for segment in text.split("\x02"):
        key, _, value = segment.partition("\x01")
        if key and value:
            result[key] = value
    return result


def encode_properties_bytes(props: Mapping[str, str | None]) -> bytes:
    """`encode_properties` as UTF-8 bytes (raises `InvalidPropertyError` for unencodable text too)."""
    text = encode_properties(props)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidPropertyError(f"properties are not encodable as UTF-8: {exc.reason}") from None


def decode_properties_bytes(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """`decode_properties` of UTF-8 bytes (raises `InvalidPropertyError` for invalid UTF-8)."""
    if not data:
        return {}
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidPropertyError(
            f"properties are not valid UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    return decode_properties(text)


__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "InvalidPropertyError",
    "decode_properties",
    "decode_properties_bytes",
    "encode_properties",
    "encode_properties_bytes",
]

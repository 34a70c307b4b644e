"""What every body shares: `WireBody` (encode/decode through fastjson) and the lenient readers of decoded JSON.

Decoding is lenient like fastjson: unknown keys are ignored, missing ones take Java's defaults,
numbers may arrive as strings and enums as names or ordinals. A value of the wrong shape raises
`BodyDecodeError` naming where it is (``HeartbeatData.consumerDataSet[0].groupName``).
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Any, Self, TypeVar

from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting import fastjson
from rocketflow.remoting.errors import BodyDecodeError
from rocketflow.remoting.fastjson import ObjectKey

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
EnumT = TypeVar("EnumT", bound=Enum)
ValueT = TypeVar("ValueT")


def now_millis() -> int:
    """Java's ``System.currentTimeMillis()``."""
    return time.time_ns() // 1_000_000


def register_body_crc32(body: bytes) -> int:
    """The ``bodyCrc32`` ext field of REGISTER_BROKER: CRC32 of the body, masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | ObjectKey):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"string {shown!r}"
    return f"{type(value).__name__} {value!r}"


def as_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise BodyDecodeError(f"{where}: expected a string, got {describe(value)}")


def as_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise BodyDecodeError(f"{where}: expected an integer, got {describe(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        return int(value.strip())
    raise BodyDecodeError(f"{where}: expected an integer, got {describe(value)}")


def as_float(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise BodyDecodeError(f"{where}: expected a number, got {describe(value)}")


def as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    raise BodyDecodeError(f"{where}: expected a boolean, got {describe(value)}")


def as_enum(enum_type: type[EnumT], value: Any, where: str) -> EnumT:
    """An enum from its name or its Java ordinal (as a number or a numeric string)."""
    if isinstance(value, enum_type):
        return value
    ordinal: int | None = None
    if isinstance(value, str):
        name = value.strip()
        if name in enum_type.__members__:
            return enum_type[name]
        if name.isdigit():
            ordinal = int(name)
    elif isinstance(value, int) and not isinstance(value, bool):
        ordinal = value
    if ordinal is not None:
        members = list(enum_type)
        if 0 <= ordinal < len(members):
            return members[ordinal]
    raise BodyDecodeError(f"{where}: not a {enum_type.__name__} name or ordinal: {describe(value)}")


def as_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise BodyDecodeError(f"{where}: expected an array, got {describe(value)}")


def as_map(value: Any, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise BodyDecodeError(f"{where}: expected an object, got {describe(value)}")


def int_key(key: Any, where: str) -> int:
    if isinstance(key, int | str) and not isinstance(key, bool):
        try:
            return as_int(key, where)
        except BodyDecodeError:
            pass
    raise BodyDecodeError(f"{where}: expected an integer map key, got {describe(key)}")


def message_queue(value: Any, where: str) -> MessageQueue:
    if isinstance(value, MessageQueue):
        return value
    if isinstance(value, ObjectKey):
        value = value.as_dict()
    reader = ObjectReader(value, where)
    return MessageQueue(
        topic=reader.string("topic", ""),
        broker_name=reader.string("brokerName", ""),
        queue_id=reader.integer("queueId", 0),
    )


def message_queue_key(key: Any, where: str) -> MessageQueue:
    """A MessageQueue map key: fastjson's raw-object key, or (from other writers) its JSON text."""
    if isinstance(key, str):
        try:
            key = fastjson.loads(key)
        except BodyDecodeError:
            raise BodyDecodeError(f"{where}: map key {key!r} is not a MessageQueue") from None
    if isinstance(key, ObjectKey | dict):
        return message_queue(key, where)
    raise BodyDecodeError(f"{where}: expected a MessageQueue map key, got {describe(key)}")


class ObjectReader:
    """Typed, path-aware access to one decoded JSON object."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str) -> None:
        if isinstance(data, ObjectKey):
            data = data.as_dict()
        if not isinstance(data, dict):
            raise BodyDecodeError(f"{where}: expected an object, got {describe(data)}")
        self.data: dict[Any, Any] = data
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def string(self, key: str, default: str) -> str:
        value = self.data.get(key)
        return default if value is None else as_str(value, self.at(key))

    def optional_string(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else as_str(value, self.at(key))

    def integer(self, key: str, default: int) -> int:
        value = self.data.get(key)
        return default if value is None else as_int(value, self.at(key))

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        return default if value is None else as_float(value, self.at(key))

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        return default if value is None else as_bool(value, self.at(key))

    def enum(self, enum_type: type[EnumT], key: str, default: EnumT) -> EnumT:
        value = self.data.get(key)
        return default if value is None else as_enum(enum_type, value, self.at(key))

    def array(self, key: str) -> list[Any]:
        return as_list(self.data.get(key), self.at(key))

    def mapping(self, key: str) -> dict[Any, Any]:
        return as_map(self.data.get(key), self.at(key))

    def strings(self, key: str) -> list[str]:
        where = self.at(key)
        return [as_str(item, f"{where}[{index}]") for index, item in enumerate(self.array(key))]

    def objects(self, key: str) -> list[tuple[Any, str]]:
        """Array items with their paths (for nested `from_json_dict` calls)."""
        where = self.at(key)
        return [(item, f"{where}[{index}]") for index, item in enumerate(self.array(key))]


def bean(values: Mapping[str, Any]) -> dict[str, Any]:
    """A JavaBean as fastjson writes it: keys sorted, null fields left out."""
    return {key: values[key] for key in sorted(values) if values[key] is not None}


def load_json(payload: bytes | bytearray | memoryview | str, where: str, what: str = "JSON") -> Any:
    """The fastjson value of ``payload``; `BodyDecodeError` at ``where`` when it is empty (``empty <what>``)
    or malformed."""
    if not payload:
        raise BodyDecodeError(f"{where}: empty {what}")
    try:
        return fastjson.loads(payload)
    except BodyDecodeError as exc:
        raise BodyDecodeError(f"{where}: {exc}") from None


def queue_set(reader: ObjectReader, key: str) -> set[MessageQueue]:
    return {message_queue(item, path) for item, path in reader.objects(key)}


def queue_table(reader: ObjectReader, key: str, convert: Callable[[Any, str], ValueT]) -> dict[MessageQueue, ValueT]:
    """A map keyed by MessageQueue, each value passed through ``convert(value, where)``."""
    table_where = reader.at(key)
    result: dict[MessageQueue, ValueT] = {}
    for raw_key, value in reader.mapping(key).items():
        queue = message_queue_key(raw_key, table_where)
        if value is not None:
            result[queue] = convert(value, f"{table_where}[{queue}]")
    return result


def sorted_by_key(table: Mapping[Any, ValueT]) -> Iterable[tuple[Any, ValueT]]:
    return sorted(table.items(), key=lambda item: item[0])


class WireBody:
    """Base of the JSON bodies: `encode`/`decode` in terms of `to_json_dict`/`from_json_dict`."""

    __slots__ = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The fastjson-shaped structure (may hold int, MessageQueue and ObjectKey map keys)."""
        raise NotImplementedError

    @classmethod
    def from_json_dict(cls, data: Any, where: str | None = None) -> Self:
        """Build from a decoded JSON object; ``where`` names it in error messages."""
        raise NotImplementedError

    def encode(self, *, pretty: bool = False) -> bytes:
        """fastjson bytes; ``pretty`` gives the TAB-indented form of the broker's config files."""
        return fastjson.dumps(self.to_json_dict(), pretty=pretty)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse a body; any malformation raises `BodyDecodeError`."""
        return cls.from_json_dict(load_json(data, cls.__name__, "body"), cls.__name__)


__all__ = [
    "EnumT",
    "ObjectReader",
    "ValueT",
    "WireBody",
    "as_bool",
    "as_enum",
    "as_float",
    "as_int",
    "as_list",
    "as_map",
    "as_str",
    "bean",
    "describe",
    "int_key",
    "load_json",
    "message_queue",
    "message_queue_key",
    "now_millis",
    "queue_set",
    "queue_table",
    "register_body_crc32",
    "sorted_by_key",
]

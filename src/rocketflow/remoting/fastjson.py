"""fastjson's JSON dialect, as RocketMQ's Java processes write and read it (no I/O).

fastjson (1.2.x) differs from standard JSON in ways every body of the protocol relies on
(docs/design/wire-format.md, "fastjson"):

* maps with ``Integer``/``Long`` keys are written with **bare numeric keys**: ``{0:"a"}``;
* maps with object keys (``MessageQueue``) are written with **the key as a raw JSON object**:
  ``{{"brokerName":"b","queueId":0,"topic":"t"}:5}``;
* null values are omitted, doubles look like Java's ``Double.toString`` (``0.0``, ``1.0E7``);
* ``PrettyFormat`` (used for the broker's config files) indents with TABs, puts no space after
  the colon, and writes the entries of a map with non-string keys on one line.

`dumps` writes that dialect, `loads` reads it (plus standard JSON). Map keys that are JSON objects
come back as `ObjectKey`, an immutable, hashable view. Classes of the layers above (the message
model's `MessageQueue`) are written as their bean once they `register_bean` themselves: this module
imports nothing above the remoting layer.
"""

from __future__ import annotations

import json.decoder
import math
import re
from collections.abc import Callable, Iterator, Mapping
from enum import Enum, IntEnum
from typing import Any, Final, Protocol, TypeVar

import orjson

from rocketflow.remoting.errors import BodyDecodeError

#: Deepest nesting `loads` accepts (the pure-Python fallback parser is recursive).
MAX_DEPTH: Final = 200


class JsonBean(Protocol):
    """A value `dumps` writes as the JSON object its ``to_json_dict()`` returns (a Java bean)."""

    def to_json_dict(self) -> Mapping[str, Any]: ...


_BeanT = TypeVar("_BeanT", bound=type[JsonBean])
#: the classes `register_bean` added: written as their bean, as values and as map keys
_bean_types: tuple[type[JsonBean], ...] = ()


def register_bean(cls: _BeanT) -> _BeanT:
    """Let `dumps` write instances of ``cls`` as their ``to_json_dict()``, as values and as map keys
    (fastjson writes an object key as a raw JSON object). A class decorator."""
    global _bean_types
    if cls not in _bean_types:
        _bean_types = (*_bean_types, cls)
    return cls


class ObjectKey(Mapping[Any, Any]):
    """An immutable, hashable view of a map key that was a JSON object.

    Nested objects are held as `ObjectKey` and arrays as tuples; `as_dict` thaws them back into
    plain dicts and lists. Two keys are equal when they hold the same entries (order ignored).
    """

    __slots__ = ("_hash", "_items")

    def __init__(self, entries: Mapping[Any, Any] | None = None) -> None:
        items = tuple((key, _freeze(value)) for key, value in (entries or {}).items())
        self._items: tuple[tuple[Any, Any], ...] = items
        self._hash = hash(frozenset(items))

    def as_dict(self) -> dict[str, Any]:
        """The key as a plain (mutable) dict, nested values thawed."""
        return {key: _thaw(value) for key, value in self._items}

    def __getitem__(self, key: Any) -> Any:
        for item_key, value in self._items:
            if item_key == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ObjectKey):
            return NotImplemented
        return self._hash == other._hash and frozenset(self._items) == frozenset(other._items)

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"ObjectKey({self.as_dict()!r})"


def _freeze(value: Any) -> Any:
    if isinstance(value, ObjectKey):
        return value
    if isinstance(value, Mapping):
        return ObjectKey(value)
    if isinstance(value, list | tuple):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, ObjectKey):
        return value.as_dict()
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


# --------------------------------------------------------------------------- writing


def dumps(obj: Any, *, pretty: bool = False) -> bytes:
    """Serialise `obj` the way fastjson would (UTF-8 bytes).

    Supported: None, bool, int, float, str, enums (by name; `IntEnum` as its number),
    registered beans such as `MessageQueue`, `ObjectKey`, dicts (None values omitted; keys may be
    str, int, a registered bean or `ObjectKey`), lists, tuples and sets (arrays, iteration order kept).
    ``pretty=True`` is fastjson's PrettyFormat (TAB indentation), used for config files.
    """
    if not pretty and _is_plain(obj):
        try:
            return orjson.dumps(obj)
        except orjson.JSONEncodeError:
            pass  # e.g. a lone surrogate in a string: the slow path escapes it
    return _dumps_python(obj, pretty=pretty)


def _dumps_python(obj: Any, *, pretty: bool) -> bytes:
    parts: list[str] = []
    _Writer(parts, pretty).write(obj, 0)
    return "".join(parts).encode("utf-8")


def _java_plain_float(value: float) -> bool:
    """Whether orjson prints this float exactly as Java does (plain notation, same digits)."""
    magnitude = abs(value)
    return magnitude == 0.0 or 1e-3 <= magnitude < 1e7


def _is_plain(obj: Any) -> bool:
    """True if orjson's output for `obj` is byte-identical to fastjson's (the common case)."""
    kind = type(obj)
    if kind is str or kind is int or kind is bool or obj is None:
        return kind is not int or -(2**63) <= obj < 2**64
    if kind is float:
        return math.isfinite(obj) and _java_plain_float(obj)
    if kind is dict:
        return all(type(key) is str and value is not None and _is_plain(value) for key, value in obj.items())
    if kind is list:
        return all(_is_plain(item) for item in obj)
    return False


def java_double(value: float) -> str:
    """A double as Java's ``Double.toString`` (shortest digits) prints it; NaN/infinity -> null."""
    if not math.isfinite(value):
        return "null"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = f"{abs(value)!r}".partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # decimal exponent of the first significant digit
    point = len(whole) + exponent if whole != "0" else exponent - (len(fraction) - len(fraction.lstrip("0")))
    digits = digits.rstrip("0") or "0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


class _Writer:
    __slots__ = ("out", "pretty")

    def __init__(self, out: list[str], pretty: bool) -> None:
        self.out = out
        self.pretty = pretty

    def newline(self, indent: int) -> None:
        self.out.append("\n" + "\t" * indent)

    def write(self, value: Any, indent: int) -> None:
        out = self.out
        if value is None:
            out.append("null")
        elif value is True:
            out.append("true")
        elif value is False:
            out.append("false")
        elif isinstance(value, str):
            if isinstance(value, Enum):
                out.append(_quote(value.name))
            else:
                out.append(_quote(value))
        elif isinstance(value, int):
            if isinstance(value, Enum) and not isinstance(value, IntEnum):
                out.append(_quote(value.name))
            else:
                out.append(str(int(value)))
        elif isinstance(value, float):
            out.append(java_double(value))
        elif isinstance(value, Enum):
            out.append(_quote(value.name))
        elif isinstance(value, dict):
            self.write_map(value, indent)
        elif isinstance(value, _bean_types):
            self.write_map(value.to_json_dict(), indent)
        elif isinstance(value, ObjectKey):
            self.write_map(value.as_dict(), indent)
        elif isinstance(value, list | tuple | set | frozenset):
            self.write_list(list(value), indent)
        else:
            raise TypeError(f"fastjson.dumps cannot serialise {type(value).__name__}")

    def write_map(self, mapping: Mapping[Any, Any], indent: int) -> None:
        # Mirrors fastjson's MapSerializer: string keys go on their own line in pretty mode,
        # other keys (numbers, objects) follow the previous entry on the same line.
        out = self.out
        out.append("{")
        inner = indent + 1
        first = True
        for key, value in mapping.items():
            if value is None:
                continue
            if not first:
                out.append(",")
            if isinstance(key, str) and not isinstance(key, Enum):
                if self.pretty:
                    self.newline(inner)
                out.append(_quote(key))
            else:
                self.write_key(key, inner)
            out.append(":")
            first = False
            self.write(value, inner)
        if self.pretty and mapping:
            self.newline(indent)
        out.append("}")

    def write_key(self, key: Any, indent: int) -> None:
        if isinstance(key, (bool, int, float, Enum, ObjectKey, *_bean_types)):
            self.write(key, indent)
        elif key is None:
            self.out.append("null")
        else:
            raise TypeError(f"fastjson.dumps cannot use a {type(key).__name__} as a map key")

    def write_list(self, items: list[Any], indent: int) -> None:
        # fastjson's ListSerializer only breaks lines in pretty mode when there are 2+ items.
        out = self.out
        if self.pretty and len(items) > 1:
            out.append("[")
            for index, item in enumerate(items):
                if index:
                    out.append(",")
                self.newline(indent + 1)
                self.write(item, indent + 1)
            self.newline(indent)
            out.append("]")
            return
        out.append("[")
        for index, item in enumerate(items):
            if index:
                out.append(",")
            self.write(item, indent)
        out.append("]")


def _quote(text: str) -> str:
    try:
        return orjson.dumps(text).decode("utf-8")
    except orjson.JSONEncodeError:
        # lone surrogates: orjson refuses them; the stdlib escapes them (and all non-ASCII) as \uXXXX
        return json.dumps(text)


# --------------------------------------------------------------------------- reading


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse standard JSON or fastjson's dialect (bare numeric keys -> int, object keys -> `ObjectKey`).

    Malformed input raises `BodyDecodeError` with the position of the problem.
    """
    if isinstance(data, memoryview | bytearray):
        data = bytes(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyDecodeError(f"JSON is not valid UTF-8 (byte {exc.start})") from None
    elif isinstance(data, str):
        text = data
    else:
        raise BodyDecodeError(f"cannot parse JSON from {type(data).__name__}")
    return _Parser(text).parse_document()


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The stdlib's (C-accelerated) JSON string scanner; typeshed does not declare it.
_scanstring: Callable[[str, int, bool], tuple[str, int]] = vars(json.decoder)["scanstring"]


class _Parser:
    """A small recursive-descent parser for the fastjson dialect (the slow path)."""

    __slots__ = ("depth", "pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def fail(self, message: str, pos: int | None = None) -> BodyDecodeError:
        at = self.pos if pos is None else pos
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        snippet = self.text[at : at + 20]
        found = f" near {snippet!r}" if snippet else " at end of input"
        where = f"position {at} (line {line}, column {column})"
        return BodyDecodeError(f"malformed JSON at {where}: {message}{found}")

    def skip_whitespace(self) -> None:
        match = _WHITESPACE.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()

    def parse_document(self) -> Any:
        self.skip_whitespace()
        if self.pos >= len(self.text):
            raise self.fail("empty JSON document")
        value = self.parse_value()
        self.skip_whitespace()
        if self.pos != len(self.text):
            raise self.fail("unexpected data after the JSON value")
        return value

    def parse_value(self) -> Any:
        text = self.text
        pos = self.pos
        if pos >= len(text):
            raise self.fail("expected a value")
        char = text[pos]
        if char == "{":
            return self.parse_object()
        if char == "[":
            return self.parse_array()
        if char == '"':
            return self.parse_string()
        if char == "-" or "0" <= char <= "9":
            return self.parse_number()
        for literal, value in (("true", True), ("false", False), ("null", None)):
            if text.startswith(literal, pos):
                self.pos = pos + len(literal)
                return value
        raise self.fail("expected a value")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels")

    def parse_object(self) -> dict[Any, Any]:
        self.enter()
        self.pos += 1
        result: dict[Any, Any] = {}
        self.skip_whitespace()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            self.depth -= 1
            return result
        while True:
            self.skip_whitespace()
            key = self.parse_key()
            self.skip_whitespace()
            if not self.text.startswith(":", self.pos):
                raise self.fail("expected ':' after an object key")
            self.pos += 1
            self.skip_whitespace()
            result[key] = self.parse_value()
            self.skip_whitespace()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                self.depth -= 1
                return result
            raise self.fail("expected ',' or '}' in an object")

    def parse_key(self) -> Any:
        text = self.text
        pos = self.pos
        if pos >= len(text):
            raise self.fail("expected an object key")
        char = text[pos]
        if char == '"':
            return self.parse_string()
        if char == "{":
            return ObjectKey(self.parse_object())
        if char == "-" or "0" <= char <= "9":
            return self.parse_number()
        raise self.fail("expected an object key (string, number or object)")

    def parse_array(self) -> list[Any]:
        self.enter()
        self.pos += 1
        result: list[Any] = []
        self.skip_whitespace()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            self.depth -= 1
            return result
        while True:
            self.skip_whitespace()
            result.append(self.parse_value())
            self.skip_whitespace()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                self.depth -= 1
                return result
            raise self.fail("expected ',' or ']' in an array")

    def parse_string(self) -> str:
        start = self.pos
        try:
            value, end = _scanstring(self.text, start + 1, False)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.msg.lower(), exc.pos) from None
        self.pos = end
        if "\\" in self.text[start:end] and _SURROGATE.search(value):
            # an escaped lone surrogate: keep the document usable (Java would keep it as is)
            value = _SURROGATE.sub("\ufffd", value)
        return value

    def parse_number(self) -> int | float:
        match = _NUMBER.match(self.text, self.pos)
        if match is None:
            raise self.fail("malformed number")
        self.pos = match.end()
        token = match.group(0)
        if match.group(1) is None and match.group(2) is None:
            return int(token)
        value = float(token)
        if not math.isfinite(value):
            raise self.fail("number out of range", match.start())
        return value


__all__ = ["MAX_DEPTH", "JsonBean", "ObjectKey", "dumps", "java_double", "loads", "register_bean"]

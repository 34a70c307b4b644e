"""Typed views of a command's ext fields ("custom headers"): `CommandHeader` and how its fields map to the wire.

Each header is a dataclass deriving from `CommandHeader`. A field's ext-field name is its Python
name in camelCase unless `Wire(name=...)` says otherwise; its type decides how it is parsed:

* ``str`` - taken as is;
* ``Int`` / ``Long`` - a 32- / 64-bit integer (Java ``Integer`` / ``Long``), e.g. ``"-1"``;
* ``bool`` - Java's ``Boolean.parseBoolean``: only ``"true"`` (any case) is true.

A field without a default (or marked ``Wire(required=True)``) is mandatory (``@CFNotNull``).
Unlike 4.9.3, which only logs a missing mandatory field, `CommandHeader.from_ext_fields` raises
`HeaderFieldError` naming the field, for missing fields and for unparsable values alike.
Unknown ext fields (e.g. the C++ client's ``AccessKey``/``Signature``) are ignored.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Final, Self, Union, get_args, get_origin, get_type_hints

from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import HeaderFieldError


class FieldKind(Enum):
    """How an ext-field string is parsed."""

    STRING = "string"
    INT = "int"  # Java int / Integer (32 bits)
    LONG = "long"  # Java long / Long (64 bits)
    BOOL = "bool"


#: A 32-bit integer field (Java ``Integer``).
Int = Annotated[int, FieldKind.INT]
#: A 64-bit integer field (Java ``Long``).
Long = Annotated[int, FieldKind.LONG]


@dataclass(frozen=True, slots=True)
class Wire:
    """`Annotated` metadata for a header field: its ext-field name, whether it is mandatory,
    and (for the one-letter V2 names) what it means, for error messages."""

    name: str | None = None
    required: bool | None = None
    meaning: str | None = None


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One field of a header class as it appears on the wire."""

    attr: str
    wire: str
    kind: FieldKind
    required: bool
    meaning: str | None = None


_INTEGER = re.compile(r"[+-]?[0-9]+")
_CAMEL = re.compile(r"_([a-z0-9])")
_BITS: Final = {FieldKind.INT: 32, FieldKind.LONG: 64}
_FIELDS_CACHE: dict[type, tuple[HeaderField, ...]] = {}
#: per header class, its generated `from_ext_fields` and `to_ext_fields` bodies (see `compile_parser`)
_PARSERS: dict[type, Callable[[Mapping[str, str]], Any]] = {}
_ENCODERS: dict[type, Callable[[Any], dict[str, str]]] = {}


def _camel_case(name: str) -> str:
    return _CAMEL.sub(lambda match: match.group(1).upper(), name)


def _unwrap(hint: Any, extras: list[Any]) -> Any:
    if get_origin(hint) is Annotated:
        base, *metadata = get_args(hint)
        extras.extend(metadata)
        return base
    return hint


def _describe_field(owner: type, field: dataclasses.Field[Any], hint: Any) -> HeaderField:
    extras: list[Any] = []
    hint = _unwrap(hint, extras)
    if get_origin(hint) in (Union, types.UnionType):
        members = [member for member in get_args(hint) if member is not type(None)]
        if len(members) != 1:
            raise TypeError(f"{owner.__name__}.{field.name}: unsupported header field type {hint!r}")
        hint = _unwrap(members[0], extras)
    kinds = [extra for extra in extras if isinstance(extra, FieldKind)]
    wires = [extra for extra in extras if isinstance(extra, Wire)]
    wire = wires[0] if wires else Wire()
    if kinds:
        kind = kinds[0]
    elif hint is str:
        kind = FieldKind.STRING
    elif hint is bool:
        kind = FieldKind.BOOL
    elif hint is int:
        kind = FieldKind.INT
    else:
        raise TypeError(f"{owner.__name__}.{field.name}: unsupported header field type {hint!r}")
    has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    required = wire.required if wire.required is not None else not has_default
    return HeaderField(
        attr=field.name,
        wire=wire.name or _camel_case(field.name),
        kind=kind,
        required=required,
        meaning=wire.meaning,
    )


def _parse_value(spec: HeaderField, raw: object) -> object:
    text = raw if isinstance(raw, str) else _to_text(raw)
    if spec.kind is FieldKind.STRING:
        return text
    if spec.kind is FieldKind.BOOL:
        return text.lower() == "true"
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        raise HeaderFieldError(spec.wire, f"{text!r} is not an integer{_meaning(spec)}")
    value = int(stripped)
    bits = _BITS[spec.kind]
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        message = f"{stripped} is out of range for a {bits}-bit integer{_meaning(spec)}"
        raise HeaderFieldError(spec.wire, message)
    return value


def _meaning(spec: HeaderField) -> str:
    return f" ({spec.meaning})" if spec.meaning else ""


_MISSING_DEFAULT: Final = object()


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory
    return _MISSING_DEFAULT


def _absent(spec: HeaderField, default: Any) -> Any:
    """The value of a field the ext fields leave out: its default, or `HeaderFieldError` when it is mandatory."""
    if spec.required or default is _MISSING_DEFAULT:
        raise HeaderFieldError(spec.wire, f"missing{_meaning(spec)}")
    return default


# Each header class gets a parser and an encoder written out for its own fields (as `dataclasses`
# writes ``__init__``): one header per request or response on every hot path, and a loop over a
# field table with a dict of keyword arguments cost about twice as much. Both keep the generic
# rules: a plain value takes the fast branch, anything else goes through `_parse_value` or `_to_text`.

def compile_parser(cls: type[CommandHeader], into: type[CommandHeader] | None = None,
                    attributes: tuple[str, ...] = ()) -> Callable[[Mapping[str, str]], Any]:
    """A parser of ``cls``'s ext fields; with ``into``, building that class instead, whose ``attributes``
    take ``cls``'s fields in order (SEND_MESSAGE_V2's one-letter fields parsed into the V1 header)."""
    specs = cls.header_fields()
    fields = {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    target = cls if into is None else into
    namespace: dict[str, Any] = {"_cls": target, "_parse_value": _parse_value, "_absent": _absent}
    lines = ["def parse(fields):", "    get = fields.get"]
    assigned: list[tuple[str, str]] = []  # (attribute of the result, local holding its value)
    for index, spec in enumerate(specs):
        value, spec_name, default_name = f"v{index}", f"_spec{index}", f"_default{index}"
        namespace[spec_name] = spec
        default = _field_default(fields[spec.attr])
        factory = default is not _MISSING_DEFAULT and fields[spec.attr].default_factory is not dataclasses.MISSING
        namespace[default_name] = default
        lines.append(f"    raw = get({spec.wire!r})")
        if spec.kind is FieldKind.STRING:
            lines.append(f"    if type(raw) is str: {value} = raw")
        elif spec.kind is FieldKind.BOOL:
            lines.append(f"    if raw == 'true': {value} = True")
            lines.append(f"    elif raw == 'false': {value} = False")
        else:
            # plain non-negative decimal ASCII of fewer digits than the limit has: the usual integer,
            # parsed without the regex and the range check
            digits = 10 if spec.kind is FieldKind.INT else 19
            lines.append(f"    if type(raw) is str and raw.isascii() and raw.isdigit() and len(raw) < {digits}:"
                         f" {value} = int(raw)")
        lines.append(f"    elif raw is None: {value} = _absent({spec_name}, {default_name})"
                     + ("()" if factory else ""))
        lines.append(f"    else: {value} = _parse_value({spec_name}, raw)")
        assigned.append((attributes[index] if into is not None else spec.attr, value))
    if hasattr(target, "__post_init__"):
        lines.append(f"    return _cls({', '.join(f'{attr}={value}' for attr, value in assigned)})")
    else:
        # the dataclass's ``__init__`` only stores its keyword arguments: stored here directly
        namespace["_new"] = object.__new__
        lines.append("    header = _new(_cls)")
        lines.extend(f"    header.{attr} = {value}" for attr, value in assigned)
        lines.append("    return header")
    exec("\n".join(lines), namespace)  # the source is built above from the class's own field names
    parser: Callable[[Mapping[str, str]], Any] = namespace["parse"]
    return parser


def compile_encoder(cls: type[CommandHeader], attributes: tuple[str, ...] = ()) -> Callable[[Any], dict[str, str]]:
    """An encoder of ``cls``'s ext fields; with ``attributes``, reading those attributes, in ``cls``'s
    field order, from another header (the V1 send header written as SEND_MESSAGE_V2's one-letter fields)."""
    namespace: dict[str, Any] = {"_to_text": _to_text}
    lines = ["def encode(header):", "    result = {}"]
    for index, spec in enumerate(cls.header_fields()):
        lines.append(f"    value = header.{attributes[index] if attributes else spec.attr}")
        lines.append("    if value is not None:")
        if spec.kind is FieldKind.STRING:
            text = "value if type(value) is str else _to_text(value)"
        elif spec.kind is FieldKind.BOOL:
            text = "'true' if value is True else 'false' if value is False else _to_text(value)"
        else:
            text = "str(value) if type(value) is int else _to_text(value)"
        lines.append(f"        result[{spec.wire!r}] = {text}")
    lines.append("    return result")
    exec("\n".join(lines), namespace)  # the source is built above from the class's own field names
    encoder: Callable[[Any], dict[str, str]] = namespace["encode"]
    return encoder


def _to_text(value: object) -> str:
    # (the generated encoders write plain str and int values themselves and call this for the rest)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


class CommandHeader:
    """Base of every typed header: maps dataclass fields to and from ext fields."""

    __slots__ = ()

    @classmethod
    def header_fields(cls) -> tuple[HeaderField, ...]:
        """The wire description of this class's fields, in declaration order."""
        cached = _FIELDS_CACHE.get(cls)
        if cached is None:
            hints = get_type_hints(cls, include_extras=True)
            fields = dataclasses.fields(cls)  # type: ignore[arg-type]
            cached = tuple(_describe_field(cls, field, hints[field.name]) for field in fields)
            _FIELDS_CACHE[cls] = cached
        return cached

    def to_ext_fields(self) -> dict[str, str]:
        """The ext fields Java's ``makeCustomHeaderToNet`` would produce (None fields omitted)."""
        encoder = _ENCODERS.get(type(self))
        if encoder is None:
            encoder = _ENCODERS[type(self)] = compile_encoder(type(self))
        return encoder(self)

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        """Parse and validate; raises `HeaderFieldError` naming the first bad or missing field."""
        parser = _PARSERS.get(cls)
        if parser is None:
            parser = _PARSERS[cls] = compile_parser(cls)
        return parser(fields)  # type: ignore[no-any-return]

    @classmethod
    def from_command(cls, command: RemotingCommand) -> Self:
        """`from_ext_fields` applied to a command's ext fields."""
        return cls.from_ext_fields(command.ext_fields)


__all__ = [
    "CommandHeader",
    "FieldKind",
    "HeaderField",
    "Int",
    "Long",
    "Wire",
    "compile_encoder",
    "compile_parser",
]

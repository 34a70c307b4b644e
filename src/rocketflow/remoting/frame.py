"""Frames: encoding a `RemotingCommand` to bytes and an incremental decoder (no I/O).

Layout (docs/design/wire-format.md, "Frames"): ``[i32 length][u8 serialize type][u24 header length][header][body]``
where ``length`` counts everything after itself.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import orjson

from rocketflow.remoting.codes import LanguageCode, SerializeType
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import (
    FrameTooLargeError,
    MalformedFrameError,
    MalformedHeaderError,
    ProtocolError,
)

#: Netty's default `com.rocketmq.remoting.frameMaxLength`: the whole frame, length field included.
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
MAX_HEADER_LENGTH: Final = 0xFFFFFF

_I32 = struct.Struct(">i")
_I32_I32 = struct.Struct(">iI")
_BINARY_FIXED = struct.Struct(">hBhii")
_I16 = struct.Struct(">h")
#: Language names as they appear in JSON headers, parsed once.
_LANGUAGES: Final[dict[str, LanguageCode]] = dict(LanguageCode.__members__)
_JSON: Final = int(SerializeType.JSON)
_ROCKETMQ: Final = int(SerializeType.ROCKETMQ)


# --------------------------------------------------------------------------- JSON header


def _ext_value(key: str, value: Any) -> str | None:
    """Ext-field values as Java holds them: strings (numbers and booleans `toString()`-ed)."""
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    # Nested structures never occur in real traffic; keep them as their JSON text.
    return orjson.dumps(value).decode()


def encode_json_header(command: RemotingCommand) -> bytes:
    """The header as fastjson writes it: keys sorted, nulls omitted, language as a name."""
    header: dict[str, Any] = {"code": command.code, "extFields": command.ext_fields, "flag": command.flag,
                              "language": command.language.name, "opaque": command.opaque}
    if command.remark is not None:
        header["remark"] = command.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = command.version
    return orjson.dumps(header)


def _int_field(header: dict[str, Any], name: str, default: int) -> int:
    value = header.get(name, default)
    if type(value) is int:
        return value
    if value is None:
        return default
    if isinstance(value, bool):
        raise MalformedHeaderError(f"header field {name!r} must be an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise MalformedHeaderError(f"header field {name!r} must be an integer, got {value!r}")


def decode_json_header(data: bytes | bytearray | memoryview, body: bytes) -> RemotingCommand:
    """Decode a JSON header, tolerant of what real clients send (trailing newline, unknown keys,
    numbers and booleans as ext-field values)."""
    try:
        header = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedHeaderError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise MalformedHeaderError("header JSON is not an object")
    if "code" not in header:
        raise MalformedHeaderError("header has no 'code'")
    raw_ext = header.get("extFields")
    ext_fields: dict[str, str]
    if raw_ext is None:
        ext_fields = {}
    elif not isinstance(raw_ext, dict):
        raise MalformedHeaderError("header 'extFields' is not an object")
    elif all(type(value) is str for value in raw_ext.values()):
        ext_fields = raw_ext  # the usual case: a fresh dict of strings, taken as is
    else:
        ext_fields = {}
        for key, value in raw_ext.items():
            text = _ext_value(key, value)
            if text is not None:
                ext_fields[key] = text
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = str(remark)
    language = header.get("language", "JAVA")
    parsed_language = _LANGUAGES.get(language, LanguageCode.OTHER) if type(language) is str else \
        LanguageCode.parse(language)
    # the usual integers taken as they are, anything else through _int_field's checks
    code, version, opaque, flag = header["code"], header.get("version"), header.get("opaque"), header.get("flag")
    if type(code) is not int:
        code = _int_field(header, "code", 0)
    if type(version) is not int:
        version = _int_field(header, "version", 0)
    if type(opaque) is not int:
        opaque = _int_field(header, "opaque", 0)
    if type(flag) is not int:
        flag = _int_field(header, "flag", 0)
    return RemotingCommand(code, parsed_language, version, opaque, flag, remark, ext_fields, body)


# --------------------------------------------------------------------------- binary header


def encode_binary_header(command: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header (serialize type 1, `RocketMQSerializable`)."""
    parts = [
        _BINARY_FIXED.pack(
            _to_i16(command.code), int(command.language) & 0xFF, _to_i16(command.version),
            _to_i32(command.opaque), _to_i32(command.flag),
        )
    ]
    remark = command.remark.encode() if command.remark else b""
    parts.append(_I32.pack(len(remark)))
    parts.append(remark)
    ext_parts: list[bytes] = []
    for key, value in command.ext_fields.items():
        key_bytes = key.encode()
        value_bytes = value.encode()
        ext_parts += [_I16.pack(len(key_bytes)), key_bytes, _I32.pack(len(value_bytes)), value_bytes]
    ext_block = b"".join(ext_parts)
    parts.append(_I32.pack(len(ext_block)))
    parts.append(ext_block)
    return b"".join(parts)


def _to_i16(value: int) -> int:
    value &= 0xFFFF
    return value - 0x10000 if value >= 0x8000 else value


def _to_i32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value >= 0x80000000 else value


def decode_binary_header(data: bytes | bytearray | memoryview, body: bytes) -> RemotingCommand:
    """Decode a ROCKETMQ binary header; lengths that run past the header are rejected."""
    view = memoryview(data)
    size = len(view)
    if size < _BINARY_FIXED.size + 8:
        raise MalformedHeaderError(f"binary header of {size} bytes is shorter than its fixed part")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(view, 0)
    pos = _BINARY_FIXED.size
    (remark_len,) = _I32.unpack_from(view, pos)
    pos += 4
    if remark_len < 0 or remark_len > size - pos:
        raise MalformedHeaderError(f"binary header remark length {remark_len} is out of range")
    remark = _utf8(view[pos : pos + remark_len], "remark") if remark_len else None
    pos += remark_len
    if size - pos < 4:
        raise MalformedHeaderError("binary header ends before its ext-fields length")
    (ext_len,) = _I32.unpack_from(view, pos)
    pos += 4
    if ext_len < 0 or ext_len > size - pos:
        raise MalformedHeaderError(f"binary header ext-fields length {ext_len} is out of range")
    end = pos + ext_len
    ext_fields: dict[str, str] = {}
    while pos < end:
        if end - pos < 2:
            raise MalformedHeaderError("binary ext-fields block is truncated at a key length")
        (key_len,) = _I16.unpack_from(view, pos)
        pos += 2
        if key_len < 0 or key_len > end - pos:
            raise MalformedHeaderError(f"binary ext-field key length {key_len} is out of range")
        key = _utf8(view[pos : pos + key_len], "ext-field key")
        pos += key_len
        if end - pos < 4:
            raise MalformedHeaderError("binary ext-fields block is truncated at a value length")
        (value_len,) = _I32.unpack_from(view, pos)
        pos += 4
        if value_len < 0 or value_len > end - pos:
            raise MalformedHeaderError(f"binary ext-field value length {value_len} is out of range")
        ext_fields[key] = _utf8(view[pos : pos + value_len], "ext-field value")
        pos += value_len
    return RemotingCommand(
        code=code,
        language=LanguageCode.parse(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
    )


def _utf8(data: memoryview, what: str) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise MalformedHeaderError(f"binary header {what} is not valid UTF-8") from None


# --------------------------------------------------------------------------- frames


def encode_frame(command: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON) -> bytes:
    """The full frame for a command, length prefix included."""
    header = encode_json_header(command) if serialize_type == SerializeType.JSON else encode_binary_header(command)
    header_len = len(header)
    if header_len > MAX_HEADER_LENGTH:
        raise MalformedHeaderError(f"header of {header_len} bytes does not fit the 24-bit length field")
    body = command.body
    return b"".join(
        (_I32_I32.pack(4 + header_len + len(body), (int(serialize_type) << 24) | header_len), header, body)
    )


def decode_frame_payload(payload: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame without its leading 4-byte length (what Netty's frame decoder hands on)."""
    return _decode_payload(payload, 0, len(payload))


def _decode_payload(source: bytes | bytearray | memoryview, start: int, end: int) -> RemotingCommand:
    """`decode_frame_payload` of ``source[start:end]``, read in place."""
    if end - start < 4:
        raise MalformedFrameError(f"frame of {end - start} bytes has no header-length word")
    (word,) = _I32.unpack_from(source, start)
    serialize_type = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    header_start = start + 4
    body_start = header_start + header_len
    if body_start > end:
        raise MalformedFrameError(f"header length {header_len} exceeds the frame ({end - header_start} bytes)")
    header = source[header_start:body_start]
    body = source[body_start:end]
    if type(body) is not bytes:
        body = bytes(body)
    if serialize_type == _JSON:
        return decode_json_header(header, body)
    if serialize_type == _ROCKETMQ:
        return decode_binary_header(header, body)
    raise MalformedHeaderError(f"unknown serialize type {serialize_type}")


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode exactly one complete frame (length prefix included)."""
    decoder = FrameDecoder()
    commands = decoder.feed(frame)
    if decoder.error is not None:
        raise decoder.error
    if len(commands) != 1 or decoder.buffered:
        raise MalformedFrameError(
            f"expected exactly one frame, got {len(commands)} and {decoder.buffered} extra bytes"
        )
    return commands[0]


class FrameDecoder:
    """Incremental frame decoder: `feed(bytes)` returns every command completed so far.

    A malformed frame raises a `ProtocolError`; the stream is then out of sync and the caller
    closes the connection. Frames that were complete before the bad one are not lost: they are
    returned by that `feed` call, and the error is raised by the next one (see `error`).
    """

    __slots__ = ("_buffer", "_error", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    @property
    def error(self) -> ProtocolError | None:
        """The error that put this stream out of sync, if any; every later `feed` raises it."""
        return self._error

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        source: bytes | bytearray
        if not buffer and type(data) is bytes:
            source = data  # the usual read (whole frames, nothing held back): decoded from it as it is
        else:
            buffer += data
            source = buffer
        commands: list[RemotingCommand] = []
        pos = 0
        size = len(source)
        try:
            while size - pos >= 4:
                (length,) = _I32.unpack_from(source, pos)
                if length < 4:
                    raise MalformedFrameError(f"frame length {length} is too small")
                if length + 4 > self.max_frame_size:
                    raise FrameTooLargeError(
                        f"frame of {length + 4} bytes exceeds the maximum of {self.max_frame_size}"
                    )
                if size - pos - 4 < length:
                    break
                start = pos + 4
                commands.append(_decode_payload(source, start, start + length))
                pos = start + length
        except ProtocolError as exc:
            self._error = exc
            self._buffer = bytearray()
            if not commands:
                raise
            return commands
        if source is buffer:
            if pos:
                del buffer[:pos]
        elif pos < size:
            buffer += memoryview(source)[pos:]  # the start of a frame still on its way
        return commands


__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "decode_binary_header",
    "decode_frame",
    "decode_frame_payload",
    "decode_json_header",
    "encode_binary_header",
    "encode_frame",
    "encode_json_header",
]

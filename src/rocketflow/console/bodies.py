"""Showing a message body to a person: its encoding guessed, JSON indented, binary as a hex dump."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import charset_normalizer

#: Bytes of a body shown at most (text or hex); the size is always shown.
PREVIEW_BYTES: Final = 64 * 1024
#: Bytes of a body shown in a table cell.
CELL_CHARS: Final = 80
#: Below this share of printable characters a decoded body counts as binary.
_PRINTABLE_SHARE: Final = 0.9


class BodyKind(StrEnum):
    EMPTY = "empty"
    JSON = "json"
    TEXT = "text"
    BINARY = "binary"


@dataclass(frozen=True, slots=True)
class BodyPreview:
    """A body as shown: ``text`` (indented JSON, decoded text or a hex dump), its ``encoding`` and ``size``."""

    kind: BodyKind
    encoding: str
    text: str
    size: int
    truncated: bool

    @property
    def short(self) -> str:
        """One line for a table cell."""
        if self.kind is BodyKind.BINARY:
            return f"<{self.size} bytes of binary>"
        line = " ".join(self.text.split())
        return line if len(line) <= CELL_CHARS else line[:CELL_CHARS - 1] + "…"


def _printable_share(text: str) -> float:
    if not text:
        return 1.0
    printable = sum(1 for char in text if char.isprintable() or char in "\r\n\t")
    return printable / len(text)


def hex_dump(data: bytes, width: int = 16) -> str:
    """Offset, hex bytes and printable ASCII, ``width`` bytes a line."""
    lines = []
    for start in range(0, len(data), width):
        chunk = data[start:start + width]
        hex_part = " ".join(f"{byte:02x}" for byte in chunk)
        ascii_part = "".join(chr(byte) if 32 <= byte < 127 else "." for byte in chunk)
        lines.append(f"{start:08x}  {hex_part:<{width * 3 - 1}}  {ascii_part}")
    return "\n".join(lines)


def _decode(data: bytes) -> tuple[str, str] | None:
    """(text, encoding) when ``data`` reads as text: UTF-8 first, else the best charset-normalizer guess."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return (text, "utf-8") if _printable_share(text) >= _PRINTABLE_SHARE else None
    guess = charset_normalizer.from_bytes(data).best()
    if guess is None or guess.encoding is None:
        return None
    text = str(guess)
    if _printable_share(text) < _PRINTABLE_SHARE:
        return None
    return text, guess.encoding


def preview_body(body: bytes, limit: int = PREVIEW_BYTES) -> BodyPreview:
    """The preview of ``body`` (at most ``limit`` bytes of it are looked at)."""
    size = len(body)
    if not body:
        return BodyPreview(BodyKind.EMPTY, "", "", 0, False)
    data = body[:limit]
    truncated = size > limit
    decoded = _decode(data)
    if decoded is None and truncated:  # a multi-byte character cut at the limit
        decoded = _decode(data[:-3]) if len(data) > 3 else None
    if decoded is None:
        return BodyPreview(BodyKind.BINARY, "binary", hex_dump(data), size, truncated)
    text, encoding = decoded
    if not truncated and text.lstrip()[:1] in ("{", "["):
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            return BodyPreview(BodyKind.JSON, encoding, json.dumps(parsed, indent=2, ensure_ascii=False), size,
                               False)
    return BodyPreview(BodyKind.TEXT, encoding, text, size, truncated)


__all__ = ["CELL_CHARS", "PREVIEW_BYTES", "BodyKind", "BodyPreview", "hex_dump", "preview_body"]

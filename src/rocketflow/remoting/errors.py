"""Errors of the remoting layer. Every malformed input surfaces as a `ProtocolError`."""

from __future__ import annotations

from rocketflow.errors import RocketflowError


class ProtocolError(RocketflowError):
    """Bytes on the wire that do not form a valid RocketMQ remoting frame."""


class FrameTooLargeError(ProtocolError):
    """A frame's length field exceeds the configured maximum (16 MiB by default)."""


class MalformedFrameError(ProtocolError):
    """A frame whose length fields are inconsistent (negative, or header longer than the frame)."""


class MalformedHeaderError(ProtocolError):
    """A frame whose header cannot be decoded (bad JSON, bad binary layout, unknown serialize type)."""


class HeaderFieldError(ProtocolError):
    """A request's ext fields lack a mandatory field, or hold a value of the wrong type."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class BodyDecodeError(ProtocolError):
    """A command body (JSON or binary) that cannot be decoded into the expected structure."""

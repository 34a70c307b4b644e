"""Errors of the asyncio transport layer (connections, invocations)."""

from __future__ import annotations

from rocketflow.errors import RocketflowError


class RemotingError(RocketflowError):
    """Base class of every transport-level failure of a remote call."""


class RemotingConnectError(RemotingError):
    """A connection could not be established (refused, unreachable, timed out, bad address)."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the caller's timeout."""


class RemotingConnectionClosedError(RemotingError):
    """The connection closed before the request could be sent or its response arrived."""


__all__ = [
    "RemotingConnectError",
    "RemotingConnectionClosedError",
    "RemotingError",
    "RemotingTimeoutError",
]

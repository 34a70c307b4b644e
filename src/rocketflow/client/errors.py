"""Errors the client raises.

Everything derives from `MQError`:

* `MQClientError` - misuse or invalid input detected on the client (bad topic, empty body,
  producer started twice, no route for a topic, every retry failed, ...);
* `MQBrokerError` - a broker or name server answered with a non-success response code;
* `MQRemotingError` - the transport failed (`MQConnectError`, `MQTimeoutError`,
  `MQConnectionClosedError`) or a response could not be decoded. The original
  `rocketflow.net` / `rocketflow.remoting` error is kept as ``__cause__``.
"""

from __future__ import annotations

from rocketflow.errors import RocketflowError
from rocketflow.net.errors import (
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingError,
    RemotingTimeoutError,
)
from rocketflow.remoting.codes import code_name


class MQError(RocketflowError):
    """Base of every error raised by the rocketflow client."""


class MQClientError(MQError):
    """Client-side misuse or validation failure; ``code`` is a response code when one applies."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class MQBrokerError(MQError):
    """A non-success response from a broker (or the name server) at ``broker_addr``."""

    def __init__(self, code: int, remark: str | None, broker_addr: str | None = None) -> None:
        where = f" from {broker_addr}" if broker_addr else ""
        name = code_name(code, response=True)
        label = f"{name}({code})" if name != str(code) else f"code {code}"
        super().__init__(f"{label}{where}: {remark or 'no remark'}")
        self.code = code
        self.remark = remark
        self.broker_addr = broker_addr


class MQRemotingError(MQError):
    """A transport failure talking to ``addr`` (or a response that could not be decoded)."""

    def __init__(self, message: str, addr: str | None = None) -> None:
        super().__init__(message)
        self.addr = addr


class MQConnectError(MQRemotingError):
    """The connection to ``addr`` could not be established."""


class MQTimeoutError(MQRemotingError):
    """No response from ``addr`` in time."""


class MQConnectionClosedError(MQRemotingError):
    """The connection to ``addr`` closed before the response arrived."""


def wrap_remoting_error(exc: RemotingError, addr: str, what: str) -> MQRemotingError:
    """The client error for a transport failure of ``what`` (e.g. ``"SEND_MESSAGE_V2"``) to ``addr``."""
    message = f"{what} to {addr} failed: {exc}"
    if isinstance(exc, RemotingTimeoutError):
        error: MQRemotingError = MQTimeoutError(message, addr)
    elif isinstance(exc, RemotingConnectError):
        error = MQConnectError(message, addr)
    elif isinstance(exc, RemotingConnectionClosedError):
        error = MQConnectionClosedError(message, addr)
    else:
        error = MQRemotingError(message, addr)
    error.__cause__ = exc
    return error


__all__ = [
    "MQBrokerError",
    "MQClientError",
    "MQConnectError",
    "MQConnectionClosedError",
    "MQError",
    "MQRemotingError",
    "MQTimeoutError",
    "wrap_remoting_error",
]

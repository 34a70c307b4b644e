"""The answers a remoting peer gives to requests it cannot handle: busy, not supported, bad input, failed."""

from __future__ import annotations

from typing import Final

from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import BodyDecodeError, HeaderFieldError, ProtocolError

#: What a server over its limit of requests in flight answers with SYSTEM_BUSY.
OVERLOAD_REMARK: Final = "[OVERLOAD]system busy, start flow control for a while"
#: What a processor that rejects a request (RocketMQ's rejectRequest()) answers with SYSTEM_BUSY.
REJECT_REQUEST_REMARK: Final = "[REJECTREQUEST]system busy, start flow control for a while"


def not_supported_remark(code: int) -> str:
    """The remark RocketMQ sends with REQUEST_CODE_NOT_SUPPORTED (leading space included)."""
    return f" request type {code} not supported"


def describe_exception(exc: BaseException) -> str:
    """A short one-line description of an exception, for a SYSTEM_ERROR remark."""
    text = str(exc)
    description = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return description if len(description) <= 500 else description[:497] + "..."


def bad_input_response(request: RemotingCommand, exc: ProtocolError) -> RemotingCommand:
    """SYSTEM_ERROR naming what is wrong with the request's header or body."""
    if isinstance(exc, HeaderFieldError):
        remark = f"invalid request header field {exc}"
    elif isinstance(exc, BodyDecodeError):
        remark = f"invalid request body: {exc}"
    else:
        remark = f"invalid request: {exc}"
    return request.make_response(ResponseCode.SYSTEM_ERROR, remark=remark)


__all__ = [
    "OVERLOAD_REMARK",
    "REJECT_REQUEST_REMARK",
    "bad_input_response",
    "describe_exception",
    "not_supported_remark",
]

"""The asyncio I/O layer: a remoting server and client over the sans-IO frame codec."""

from __future__ import annotations

from rocketflow.net.client import DEFAULT_CONNECT_TIMEOUT, RemotingClient, parse_address
from rocketflow.net.connection import (
    Channel,
    ChannelCallback,
    GroupProcessor,
    GroupResult,
    Processor,
    RequestContext,
    RequestHook,
)
from rocketflow.net.errors import (
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingError,
    RemotingTimeoutError,
)
from rocketflow.net.responses import OVERLOAD_REMARK, REJECT_REQUEST_REMARK, not_supported_remark
from rocketflow.net.server import DEFAULT_CHANNEL_MAX_IDLE_SECONDS, RemotingServer

__all__ = [
    "DEFAULT_CHANNEL_MAX_IDLE_SECONDS",
    "DEFAULT_CONNECT_TIMEOUT",
    "OVERLOAD_REMARK",
    "REJECT_REQUEST_REMARK",
    "Channel",
    "ChannelCallback",
    "GroupProcessor",
    "GroupResult",
    "Processor",
    "RemotingClient",
    "RemotingConnectError",
    "RemotingConnectionClosedError",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestContext",
    "RequestHook",
    "not_supported_remark",
    "parse_address",
]

"""The per-call plumbing of the gRPC servicer: status and duration helpers, `Refused` (a call answered
with a status other than OK), the `Caller` of a call and the `ClientSession` of a 5.x client."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from rocketflow.acl import AccessGrant, Permission, SessionCredentials
from rocketflow.errors import RocketflowError
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.proxy.local import LocalChannel

logger = logging.getLogger(__name__)


def status(code: int, message: str = "") -> pb.Status:
    """A status of ``code``, its message ``message`` or else the code's name."""
    value = pb.Code.ValueType(code)
    return pb.Status(code=value, message=message or pb.Code.Name(value))


def ok() -> pb.Status:
    """The OK status."""
    return pb.Status(code=pb.OK, message="OK")


def duration_ms(value: Duration) -> int:
    """``value`` in milliseconds."""
    return value.seconds * 1000 + value.nanos // 1_000_000


def to_duration(ms: int) -> Duration:
    """``ms`` milliseconds as a protobuf ``Duration``."""
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def producer_group(topic: str) -> str:
    """The producer group 5.x producers of ``topic`` stand for (5.x producers have none): transaction
    check-backs of the topic's half messages go to a producer of it."""
    return f"{topic}%GRPC_PRODUCER"


class Refused(RocketflowError):
    """A request answered with a status other than OK."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text or pb.Code.Name(pb.Code.ValueType(code)))
        self.code = code
        self.text = str(self)

    @property
    def status(self) -> pb.Status:
        return status(self.code, self.text)


@dataclass(slots=True)
class Caller:
    """Who made a call: client id, address, and (ACL on) the account and its permissions."""

    client_id: str
    address: str
    grant: AccessGrant
    credentials: SessionCredentials | None

    def require(self, resource: str, needed: Permission) -> None:
        refusal = self.grant.refusal(resource, needed)
        if refusal is not None:
            raise Refused(pb.FORBIDDEN, refusal)


@dataclass(slots=True)
class ClientSession:
    """A 5.x client known by its id: its settings, its stand-in channel and its telemetry stream."""

    client_id: str
    channel: LocalChannel
    credentials: SessionCredentials | None = None
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    producer_groups: set[str] = field(default_factory=set)
    outbox: asyncio.Queue[spb.TelemetryCommand] = field(default_factory=asyncio.Queue)
    streams: int = 0
    last_seen: float = field(default_factory=time.monotonic)


def peer_address(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """``host:port`` of the caller (gRPC names it ``ipv4:host:port`` or ``ipv6:[host]:port``)."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        rest = rest.replace("%5B", "[").replace("%5D", "]")
        host, _, port = rest.rpartition(":")
        return f"{host.strip('[]')}:{port}"
    return rest or peer



__all__ = ["Caller", "ClientSession", "Refused", "duration_ms", "ok", "peer_address", "producer_group", "status",
           "to_duration"]

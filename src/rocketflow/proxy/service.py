"""``apache.rocketmq.v2.MessagingService`` on rocketflow's broker: what RocketMQ 5's proxy answers.

Every RPC works on the broker's own store and tables (see docs/grpc.md). Sends, transaction ends and
dead-lettering go through the broker's remoting processors (`rocketflow.proxy.local`); receives,
acks and invisibility changes through `PopService`; delivery times through `TimerService`. Status
codes follow the proxy's, so the official clients raise the exceptions their users expect.

`ReceiveMessage` and `AckMessage`, the calls a consumer makes per message, answer with serialized
responses (`rocketflow.proxy.wire`; see `RAW_RESPONSES`); the other RPCs answer protobuf objects.

The servicer is composed by role: the per-call plumbing (`rocketflow.proxy.calls`), the shared
lookups and checks (`rocketflow.proxy.rpc_base`), and the RPCs of sessions, publishing and consuming
(`rocketflow.proxy.rpc_session`, `rpc_publish`, `rpc_consume`).
"""

from __future__ import annotations

from rocketflow.proxy.calls import Caller, ClientSession, Refused, producer_group, status
from rocketflow.proxy.rpc_consume import RAW_RESPONSES, ConsumeRpcs
from rocketflow.proxy.rpc_publish import PublishRpcs
from rocketflow.proxy.rpc_session import SessionRpcs


class MessagingService(SessionRpcs, PublishRpcs, ConsumeRpcs):
    """The RPCs of ``apache.rocketmq.v2.MessagingService``, one method each (named as the RPC);
    `rocketflow.proxy.server.GrpcServer` serves them."""


__all__ = ["RAW_RESPONSES", "Caller", "ClientSession", "MessagingService", "Refused", "producer_group", "status"]

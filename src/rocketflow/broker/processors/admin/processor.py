"""`AdminBrokerProcessor`: the broker's default processor (RocketMQ's AdminBrokerProcessor).

It answers every code no dedicated processor registers, from the admin parts by role: queue locks,
offsets, topics, subscription groups, connected clients, and the broker's own settings and runtime
info. Codes none of them knows are answered REQUEST_CODE_NOT_SUPPORTED with RocketMQ's remark.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.admin.broker_config import BrokerAdmin
from rocketflow.broker.processors.admin.clients import ClientAdmin
from rocketflow.broker.processors.admin.groups import GroupAdmin
from rocketflow.broker.processors.admin.locks import LockAdmin
from rocketflow.broker.processors.admin.offsets import OffsetAdmin
from rocketflow.broker.processors.admin.topics import TopicAdmin
from rocketflow.broker.processors.common import Handler, error
from rocketflow.net import RequestContext, not_supported_remark
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand


class AdminBrokerProcessor:
    """Dispatches the admin codes to their role's handler (``handlers``: code -> handler)."""

    def __init__(self, ctx: BrokerContext, *, runtime_info: Callable[[], dict[str, str]],
                 permission_changed: Callable[[], None]) -> None:
        self.handlers: dict[int, Handler] = {}
        for part in (LockAdmin(ctx), OffsetAdmin(ctx), TopicAdmin(ctx), GroupAdmin(ctx), ClientAdmin(ctx),
                     BrokerAdmin(ctx, runtime_info=runtime_info, permission_changed=permission_changed)):
            self.handlers.update(part.handlers())

    def process(self, request_ctx: RequestContext,
                request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        handler = self.handlers.get(request.code)
        if handler is None:
            return error(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, not_supported_remark(request.code))
        return handler(request_ctx, request)


__all__ = ["AdminBrokerProcessor"]

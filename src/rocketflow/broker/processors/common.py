"""Helpers shared by the broker's request processors."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable
from typing import Final

from rocketflow.net import Processor, RequestContext
from rocketflow.net.connection import bad_input_response
from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import HeaderFieldError, ProtocolError

logger = logging.getLogger("rocketflow.broker")

#: RocketMQ's FAQ pointer, appended to some remarks as the Java broker does.
FAQ_SUFFIX: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def error(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    """A response with ``code`` and ``remark`` (no header fields)."""
    return request.make_response(code, remark=remark)


def bad_input(request: RemotingCommand, exc: ProtocolError) -> RemotingCommand:
    """SYSTEM_ERROR naming what is wrong with the request's header or body."""
    return bad_input_response(request, exc)


def guarded(processor: Processor) -> Processor:
    """Wrap a processor so malformed headers/bodies (`ProtocolError`) get a clear SYSTEM_ERROR."""

    def run(ctx: RequestContext,
            request: RemotingCommand) -> Awaitable[RemotingCommand | None] | RemotingCommand | None:
        try:
            result = processor(ctx, request)
        except ProtocolError as exc:
            logger.info("rejecting %s from %s: %s", request.describe(), ctx.remote_address, exc)
            return bad_input(request, exc)
        if inspect.isawaitable(result):
            return _guard_awaitable(result, request, ctx)
        return result

    return run


async def _guard_awaitable(awaitable: Awaitable[RemotingCommand | None], request: RemotingCommand,
                           ctx: RequestContext) -> RemotingCommand | None:
    try:
        return await awaitable
    except ProtocolError as exc:
        logger.info("rejecting %s from %s: %s", request.describe(), ctx.remote_address, exc)
        return bad_input(request, exc)


def check_names(*, topic: str | None = None, group: str | None = None, queue_id: int | None = None,
                topic_field: str = "topic", group_field: str = "consumerGroup",
                queue_field: str = "queueId") -> None:
    """Raise `HeaderFieldError` (naming the field) for an illegal topic or group name or a negative queue id.

    Names go into persisted tables (offsets, groups, topics), so requests are checked before any change.
    """
    try:
        if topic is not None:
            validate_topic(topic)
    except InvalidNameError as exc:
        raise HeaderFieldError(topic_field, str(exc)) from None
    try:
        if group is not None:
            validate_group(group)
    except InvalidNameError as exc:
        raise HeaderFieldError(group_field, str(exc)) from None
    if queue_id is not None and queue_id < 0:
        raise HeaderFieldError(queue_field, f"must be >= 0, got {queue_id}")


def parse_host(address: str) -> tuple[str, int]:
    """``"ip:port"`` -> ``(ip, port)``; unknown or malformed -> ``("127.0.0.1", 0)``."""
    host, _, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit():
        return ("127.0.0.1", 0)
    return (host, int(port))


__all__ = ["FAQ_SUFFIX", "bad_input", "check_names", "error", "guarded", "parse_host"]

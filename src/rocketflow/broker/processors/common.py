"""Helpers shared by the broker's request processors."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Final, TypeAlias

from rocketflow.net import RequestContext
from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import HeaderFieldError

#: A request handler: the response now, or an awaitable of it (None: no response).
Handler: TypeAlias = Callable[[RequestContext, RemotingCommand], "RemotingCommand | Awaitable[RemotingCommand | None]"]
#: RocketMQ's FAQ pointer, appended to some remarks as the Java broker does.
FAQ_SUFFIX: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def error(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    """A response with ``code`` and ``remark`` (no header fields)."""
    return request.make_response(code, remark=remark)


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


async def answer_when_written(written: concurrent.futures.Future[bool], response: RemotingCommand) -> RemotingCommand:
    """``response`` once a config change is on disk (or its write failed: the change stands in memory and
    is written later, so the answer is the same). The loop serves other requests meanwhile."""
    await asyncio.wrap_future(written)
    return response


def parse_host(address: str) -> tuple[str, int]:
    """``"ip:port"`` -> ``(ip, port)``; unknown or malformed -> ``("127.0.0.1", 0)``."""
    host, _, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit():
        return ("127.0.0.1", 0)
    return (host, int(port))


__all__ = ["FAQ_SUFFIX", "Handler", "answer_when_written", "check_names", "error", "parse_host"]

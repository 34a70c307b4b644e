"""`ServerRequestHandlers`: the requests brokers send to a client instance, and their answers.

* NOTIFY_CONSUMER_IDS_CHANGED: rebalance now;
* RESET_CONSUMER_CLIENT_OFFSET: the group's consumer restarts the topic's queues from new offsets;
* GET_CONSUMER_RUNNING_INFO: the consumer's settings, subscriptions, process queues and statistics;
* CONSUME_MESSAGE_DIRECTLY: the consumer's listener runs on one message;
* CHECK_TRANSACTION_STATE: the group's transactional producer checks a half message;
* PUSH_REPLY_MESSAGE_TO_CLIENT: a reply to one of our requests reaches its waiting `Producer.request`.

The consumer and producer methods called are duck-typed (see `rocketflow.client.instance.client_instance`):
a group without one answers SYSTEM_ERROR or is logged.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback

from rocketflow.client.config import ClientConfig
from rocketflow.client.instance.runtime import InstanceRuntime, maybe_await
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import ConsumerRunningInfo, ResetOffsetBody, WireBody
from rocketflow.protocol.codec import RecordDecodeError, decode_record, decompress_body
from rocketflow.protocol.message import MessageConst, MessageExt
from rocketflow.protocol.properties import decode_properties
from rocketflow.protocol.sysflag import MessageSysFlag
from rocketflow.remoting.codes import ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    ReplyMessageRequestHeader,
    ResetOffsetRequestHeader,
)
from rocketflow.version import __version__

logger = logging.getLogger(__name__)

_COMPRESSED = int(MessageSysFlag.COMPRESSED)


class ServerRequestHandlers(InstanceRuntime):
    """The handlers of broker-initiated requests (registered on the remoting client at start)."""

    def __init__(self, config: ClientConfig, client_id: str | None = None) -> None:
        super().__init__(config, client_id)
        self._reply_futures: dict[str, asyncio.Future[MessageExt]] = {}

    def _on_notify_consumer_ids_changed(self, context: RequestContext,
                                        request: RemotingCommand) -> RemotingCommand | None:
        header = NotifyConsumerIdsChangedRequestHeader.from_command(request)
        logger.info("%s: consumer ids of %s changed (from %s), rebalancing", self.client_id,
                    header.consumer_group, context.remote_address)
        self.rebalance_immediately()
        return None

    async def _on_reset_offset(self, context: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        header = ResetOffsetRequestHeader.from_command(request)
        table = ResetOffsetBody.decode(request.body).offset_table if request.body else {}
        consumer = self.select_consumer(header.group)
        hook = getattr(consumer, "reset_offset", None)
        if callable(hook):
            logger.info("%s: resetting offsets of %s/%s from %s", self.client_id, header.group, header.topic,
                        context.remote_address)
            await maybe_await(hook(header.topic, dict(table)))
        if request.is_oneway:
            return None
        return request.make_response(ResponseCode.SUCCESS)

    async def _on_get_consumer_running_info(self, context: RequestContext,
                                            request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_command(request)
        consumer = self.select_consumer(header.consumer_group)
        hook = getattr(consumer, "running_info", None)
        if not callable(hook):
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"The Consumer Group <{header.consumer_group}> not exist in this consumer")
        info = await maybe_await(hook())
        if isinstance(info, ConsumerRunningInfo):
            info.properties.setdefault("PROP_NAMESERVER_ADDR", self.config.namesrv_addr or "")
            info.properties.setdefault("PROP_CLIENT_VERSION", f"rocketflow {__version__}")
            if header.jstack_enable:
                info.jstack = _thread_stacks()
            body = info.encode()
        elif isinstance(info, WireBody):
            body = info.encode()
        else:
            body = bytes(info)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def _on_consume_message_directly(self, context: RequestContext,
                                           request: RemotingCommand) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_command(request)
        consumer = self.select_consumer(header.consumer_group)
        if consumer is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"The Consumer Group <{header.consumer_group}> not exist in this consumer")
        hook = getattr(consumer, "consume_message_directly", None)
        if not callable(hook):
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"the consumer of group <{header.consumer_group}> does not support consuming a message directly")
        msg, _ = decode_record(request.body)
        result = await maybe_await(hook(msg, header.broker_name))
        body = result.encode() if isinstance(result, WireBody) else bytes(result)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    def _on_check_transaction_state(self, context: RequestContext, request: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE: hand the half message to its group's transactional producer."""
        header = CheckTransactionStateRequestHeader.from_command(request)
        try:
            msg, _ = decode_record(request.body)
        except RecordDecodeError as exc:
            logger.warning("%s: undecodable message in a transaction check from %s: %s", self.client_id,
                           context.remote_address, exc)
            return
        group = msg.properties.get(MessageConst.PRODUCER_GROUP)
        producer = self.select_producer(group) if group else None
        check = getattr(producer, "check_transaction_state", None)
        if not callable(check):
            logger.warning("%s: transaction check for group %r from %s, but no transactional producer of it runs "
                           "here", self.client_id, group, context.remote_address)
            return
        check(context.remote_address, header, msg)

    def expect_reply(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        """A future for the reply to the request ``correlation_id`` (call on the loop; `forget_reply` after)."""
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._reply_futures[correlation_id] = future
        return future

    def forget_reply(self, correlation_id: str) -> None:
        self._reply_futures.pop(correlation_id, None)

    def _on_push_reply_message(self, context: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: a reply to one of our requests (unmatched ones are logged)."""
        header = ReplyMessageRequestHeader.from_command(request)
        try:
            reply = reply_from_push(header, request.body)
        except (ValueError, ProtocolError) as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"cannot read the reply: {exc}")
        correlation_id = reply.properties.get(MessageConst.CORRELATION_ID, "")
        future = self._reply_futures.get(correlation_id)
        if future is None or future.done():
            logger.warning("%s: a reply (correlation id %r) from %s matches no waiting request", self.client_id,
                           correlation_id, context.remote_address)
        else:
            future.set_result(reply)
        return request.make_response(ResponseCode.SUCCESS)


def _thread_stacks() -> str:
    frames = sys._current_frames()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in frames.items():
        parts.append(f'"{names.get(ident, ident)}"\n' + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def _host(text: str) -> tuple[str, int]:
    """``/127.0.0.1:10911`` (Java's socket address text) -> ``("127.0.0.1", 10911)``."""
    host, _, port = text.lstrip("/").rpartition(":")
    if "/" in host:  # "hostname/1.2.3.4"
        host = host.rpartition("/")[2]
    return (host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0)


def reply_from_push(header: ReplyMessageRequestHeader, body: bytes) -> MessageExt:
    """The reply a broker pushed (PUSH_REPLY_MESSAGE_TO_CLIENT) as a message, its body inflated."""
    sys_flag = header.sys_flag
    if sys_flag & _COMPRESSED:
        body = decompress_body(body)
        sys_flag &= ~_COMPRESSED
    return MessageExt(
        header.topic, body, flag=header.flag,
        properties=decode_properties(header.properties) if header.properties else {},
        queue_id=header.queue_id, sys_flag=sys_flag, born_timestamp=header.born_timestamp,
        born_host=_host(header.born_host), store_timestamp=header.store_timestamp,
        store_host=_host(header.store_host), reconsume_times=header.reconsume_times or 0)


__all__ = ["ServerRequestHandlers", "reply_from_push"]

"""SEND_REPLY_MESSAGE (324) / _V2 (325): a consumer's reply to a request message (RocketMQ's request-reply).

The reply is pushed at once to the requesting client, found by the ``REPLY_TO_CLIENT`` property
among the producers connected to this broker (PUSH_REPLY_MESSAGE_TO_CLIENT, 326), and, with
``store_reply_message_enable`` (the default), also stored in its topic (``<cluster>_REPLY_TOPIC``).
The response says whether the push worked: a reply nobody is waiting for any more is an error.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from rocketflow.broker.processors.common import error, parse_host
from rocketflow.broker.processors.send import sys_flag_error
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.properties import InvalidPropertyError, decode_properties, encode_properties
from rocketflow.protocol.sysflag import transaction_value
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader, decode_send_header
from rocketflow.store.commit_log import PutMessageRequest

if TYPE_CHECKING:
    from rocketflow.broker.controller import BrokerController

logger = logging.getLogger("rocketflow.broker.reply")


class ReplyMessageProcessor:
    """Pushes replies to their requesters and stores them."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def register_to(self, server: RemotingServer) -> None:
        for code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
            server.register(code, self.process)

    async def process(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = decode_send_header(request)
        checked = broker.send_processor.check_send(ctx, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        body = request.body
        if len(body) > broker.config.max_message_size:
            return error(request, ResponseCode.MESSAGE_ILLEGAL,
                         f"the reply body size {len(body)} exceeds the maximum {broker.config.max_message_size}")
        wrong = sys_flag_error(header.sys_flag, (body,))
        if wrong is not None:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        try:
            properties = decode_properties(header.properties) if header.properties else {}
        except InvalidPropertyError as exc:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, f"bad reply properties: {exc}")
        queue_id = header.queue_id if header.queue_id >= 0 else broker.send_processor.pick_queue(
            -1, checked.write_queue_nums)
        push_properties = dict(properties)
        put: PutMessageRequest | None = None
        if broker.config.store_reply_message_enable:
            properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
            built = broker.send_processor.build_put_request(
                request, header.topic, queue_id, body, properties, header.flag, header.sys_flag, header.born_timestamp,
                parse_host(ctx.remote_address), header.reconsume_times or 0, transaction_value(header.sys_flag), False)
            if isinstance(built, RemotingCommand):
                return built
            put = built
        pushed, remark = await self._push(ctx, header, body, push_properties)
        fields = {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0",
                  "MSG_REGION": broker.config.region_id, "TRACE_ON": "true" if broker.config.trace_on else "false"}
        if put is not None:
            broker.topics.add_if_absent(checked)
            result = broker.store.put_message(put)
            if result.status.is_ok:
                broker.stats.put_messages(result.message_count, result.wrote_bytes)
                fields.update(msgId=result.msg_id, queueOffset=str(result.queue_offset))
            else:
                logger.warning("storing a reply to %s failed: %s %s", header.topic, result.status.value, result.error)
        if not pushed:
            return error(request, ResponseCode.SYSTEM_ERROR, remark)
        return request.make_response(ResponseCode.SUCCESS, ext_fields=fields)

    async def _push(self, ctx: RequestContext, header: SendMessageRequestHeader, body: bytes,
                    properties: dict[str, str]) -> tuple[bool, str]:
        broker = self.broker
        requester = properties.get(MessageConst.REPLY_TO_CLIENT)
        if not requester:
            return False, f"reply message properties[{MessageConst.REPLY_TO_CLIENT}] is null"
        channel = broker.clients.find_producer_channel(requester)
        if channel is None:
            return False, f"push reply message fail, channel of <{requester}> not found."
        now = time.time_ns() // 1_000_000
        properties[MessageConst.PUSH_REPLY_TIME] = str(now)
        push = ReplyMessageRequestHeader(
            producer_group=header.producer_group, topic=header.topic, default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums, queue_id=header.queue_id,
            sys_flag=header.sys_flag, born_timestamp=header.born_timestamp, flag=header.flag,
            properties=encode_properties(properties), reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode, born_host=f"/{ctx.remote_address}", store_host=f"/{broker.address}",
            store_timestamp=now)
        request = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.to_ext_fields(), body,
                                          language=LanguageCode.JAVA)
        try:
            response = await channel.invoke(request, broker.config.client_call_timeout_ms / 1000)
        except Exception as exc:
            logger.warning("pushing a reply to %s failed: %s", requester, exc)
            return False, f"push reply message to {requester} fail."
        if response.code != ResponseCode.SUCCESS:
            logger.warning("pushing a reply to %s: %s", requester, response.remark)
            return False, f"push reply message to {requester} fail."
        return True, ""


__all__ = ["ReplyMessageProcessor"]

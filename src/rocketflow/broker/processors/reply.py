"""SEND_REPLY_MESSAGE (324) / _V2 (325): a consumer's reply to a request message (RocketMQ's request-reply).

The reply is pushed at once to the requesting client, found by the ``REPLY_TO_CLIENT`` property
among the producers connected to this broker (PUSH_REPLY_MESSAGE_TO_CLIENT, 326), and, with
``store_reply_message_enable`` (the default), also stored in its topic (``<cluster>_REPLY_TOPIC``).
The response says whether the push worked: a reply nobody is waiting for any more is an error.
"""

from __future__ import annotations

import logging
import time

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.message_put import MessagePut
from rocketflow.broker.processors.common import error, parse_host
from rocketflow.broker.processors.send_rules import check_send, pick_queue, sys_flag_error
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.message import MessageConst
from rocketflow.protocol.properties import InvalidPropertyError, decode_properties, encode_properties
from rocketflow.protocol.sysflag import transaction_value
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader, decode_send_header
from rocketflow.store import PutMessageRequest

logger = logging.getLogger(__name__)


class ReplyMessageProcessor:
    """Pushes replies to their requesters and stores them."""

    def __init__(self, ctx: BrokerContext, put_path: MessagePut) -> None:
        self.ctx = ctx
        self.put_path = put_path

    def register_to(self, server: RemotingServer) -> None:
        for code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
            server.register(code, self.process)

    async def process(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        header = decode_send_header(request)
        checked = check_send(ctx, request_ctx, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        body = request.body
        if len(body) > ctx.config.max_message_size:
            return error(request, ResponseCode.MESSAGE_ILLEGAL,
                         f"the reply body size {len(body)} exceeds the maximum {ctx.config.max_message_size}")
        wrong = sys_flag_error(header.sys_flag, (body,))
        if wrong is not None:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        try:
            properties = decode_properties(header.properties) if header.properties else {}
        except InvalidPropertyError as exc:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, f"bad reply properties: {exc}")
        queue_id = pick_queue(header.queue_id, checked.write_queue_nums)
        push_properties = dict(properties)
        put: PutMessageRequest | None = None
        if ctx.config.store_reply_message_enable:
            properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
            built = self.put_path.build(
                request, header.topic, queue_id, body, properties, header.flag, header.sys_flag, header.born_timestamp,
                parse_host(request_ctx.remote_address), header.reconsume_times or 0,
                transaction_value(header.sys_flag), False)
            if isinstance(built, RemotingCommand):
                return built
            put = built
        pushed, remark = await self._push(request_ctx, header, body, push_properties)
        fields = {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0",
                  "MSG_REGION": ctx.config.region_id, "TRACE_ON": "true" if ctx.config.trace_on else "false"}
        if put is not None:
            ctx.topics.add_if_absent(checked)
            result = self.put_path.put_now(put)
            if result.status.is_ok:
                fields.update(msgId=result.msg_id, queueOffset=str(result.queue_offset))
            else:
                logger.warning("storing a reply to %s failed: %s %s", header.topic, result.status.value, result.error)
        if not pushed:
            return error(request, ResponseCode.SYSTEM_ERROR, remark)
        return request.make_response(ResponseCode.SUCCESS, ext_fields=fields)

    async def _push(self, request_ctx: RequestContext, header: SendMessageRequestHeader, body: bytes,
                    properties: dict[str, str]) -> tuple[bool, str]:
        ctx = self.ctx
        requester = properties.get(MessageConst.REPLY_TO_CLIENT)
        if not requester:
            return False, f"reply message properties[{MessageConst.REPLY_TO_CLIENT}] is null"
        channel = ctx.clients.find_producer_channel(requester)
        if channel is None:
            return False, f"push reply message fail, channel of <{requester}> not found."
        now = time.time_ns() // 1_000_000
        properties[MessageConst.PUSH_REPLY_TIME] = str(now)
        push = ReplyMessageRequestHeader(
            producer_group=header.producer_group, topic=header.topic, default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums, queue_id=header.queue_id,
            sys_flag=header.sys_flag, born_timestamp=header.born_timestamp, flag=header.flag,
            properties=encode_properties(properties), reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode, born_host=f"/{request_ctx.remote_address}",
            store_host=f"/{ctx.identity.address}",
            store_timestamp=now)
        request = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.to_ext_fields(), body,
                                          language=LanguageCode.JAVA)
        try:
            response = await channel.invoke(request, ctx.config.client_call_timeout_ms / 1000)
        except Exception as exc:
            logger.warning("pushing a reply to %s failed: %s", requester, exc)
            return False, f"push reply message to {requester} fail."
        if response.code != ResponseCode.SUCCESS:
            logger.warning("pushing a reply to %s: %s", requester, response.remark)
            return False, f"push reply message to {requester} fail."
        return True, ""


__all__ = ["ReplyMessageProcessor"]

"""The RPCs of publishing: sends (normal, FIFO, delayed and half messages, through the broker's send
processor) and transaction ends."""

from __future__ import annotations

import logging
from typing import Any, Final

import grpc

from rocketflow.acl import Permission
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.protocol.ids import decode_offset_msg_id
from rocketflow.protocol.message import MessageConst
from rocketflow.proxy import convert
from rocketflow.proxy.calls import Caller, ClientSession, Refused, ok, producer_group, status
from rocketflow.proxy.local import invoke_local
from rocketflow.proxy.pop_service import now_ms
from rocketflow.proxy.rpc_base import ServiceBase
from rocketflow.proxy.timer import TIMER_TOPIC, send_fields
from rocketflow.remoting.codes import RequestCode, ResponseCode

logger = logging.getLogger(__name__)

_TRANSACTION_PREPARED: Final = 4
_COMMIT: Final = 8
_ROLLBACK: Final = 12
#: remoting response codes of a send -> the 5.x status code the proxy answers with
_SEND_CODES: Final[dict[int, pb.Code.ValueType]] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
}


class PublishRpcs(ServiceBase):
    """``SendMessage`` and ``EndTransaction``."""

    async def SendMessage(self, request: spb.SendMessageRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> spb.SendMessageResponse:
        try:
            caller = self._caller(context)
            if not request.messages:
                raise Refused(pb.BAD_REQUEST, "the request has no message")
        except Refused as refused:
            return spb.SendMessageResponse(status=refused.status)
        session = self._session(caller)
        entries = []
        for message in request.messages:
            try:
                entries.append(await self._send_one(caller, session, message))
            except Refused as refused:
                entries.append(spb.SendResultEntry(status=refused.status,
                                                   message_id=message.system_properties.message_id))
        codes = {entry.status.code for entry in entries}
        overall = entries[0].status if len(entries) == 1 else ok() if codes == {pb.OK} else status(
            pb.MULTIPLE_RESULTS)
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, caller: Caller, session: ClientSession, message: pb.Message) -> spb.SendResultEntry:
        config = self.access.config
        topic = self._topic_name(message.topic)
        try:
            out = convert.outgoing(message, max_body_size=config.max_message_size,
                                   max_decompressed=config.max_message_size)
        except convert.BadMessage as bad:
            raise Refused(bad.code, str(bad)) from None
        topic_config = self._topic(topic)
        accepted = self.accepted_types(topic_config)
        if out.message_type not in accepted:
            raise Refused(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          f"topic {topic} accepts {', '.join(convert.type_name(t) for t in accepted)} messages, "
                          f"not {convert.type_name(out.message_type)}")
        caller.require(topic, Permission.PUB)
        properties = out.properties
        queue_id = -1
        if out.message_group is not None:
            queue_nums = max(topic_config.write_queue_nums, 1)
            queue_id = abs(convert.java_hash(out.message_group) % queue_nums)
        send_topic = topic
        sys_flag = 0
        timer = False
        group = producer_group(topic)
        if out.deliver_ms is not None:
            now = now_ms()
            if out.deliver_ms - now > self.max_delay_ms:
                raise Refused(pb.ILLEGAL_DELIVERY_TIME,
                              f"the delivery time is more than {self.max_delay_ms // 1000} s away")
            properties[convert.DELIVER_MS_PROPERTY] = str(out.deliver_ms)
            if out.deliver_ms > now:
                if queue_id < 0:
                    queue_id = (now // 7) % max(topic_config.write_queue_nums, 1)
                properties[MessageConst.REAL_TOPIC] = topic
                properties[MessageConst.REAL_QUEUE_ID] = str(queue_id)
                send_topic, queue_id, timer = TIMER_TOPIC, 0, True
        if out.message_type == pb.TRANSACTION:
            properties[MessageConst.TRANSACTION_PREPARED] = "true"
            properties[MessageConst.PRODUCER_GROUP] = group
            sys_flag = _TRANSACTION_PREPARED
            if group not in session.producer_groups:
                await self._register_producers(session, [topic])
        fields = send_fields(send_topic, queue_id, properties, out.born_ms or now_ms(), producer_group=group,
                             sys_flag=sys_flag)
        response = await invoke_local(self.access.processor, session.channel, RequestCode.SEND_MESSAGE, fields,
                                      out.body, credentials=caller.credentials)
        code = _SEND_CODES.get(response.code, pb.INTERNAL_SERVER_ERROR)
        if code != pb.OK:
            raise Refused(code, response.remark or f"send failed with code {response.code}")
        queue_offset = int(response.ext_fields.get("queueOffset", "0") or 0)
        if timer:
            self.timer.added(queue_offset, out.deliver_ms or 0)
        transaction_id = ""
        if out.message_type == pb.TRANSACTION:
            offset_msg_id = response.ext_fields.get("msgId", "")
            try:
                commit_log_offset = decode_offset_msg_id(offset_msg_id)[2]
            except ValueError:
                raise Refused(pb.INTERNAL_SERVER_ERROR,
                              f"the broker answered an unreadable msgId {offset_msg_id!r}") from None
            transaction_id = f"{commit_log_offset}:{queue_offset}"
        return spb.SendResultEntry(status=ok(), message_id=out.message_id, transaction_id=transaction_id,
                                   offset=queue_offset)

    async def EndTransaction(self, request: spb.EndTransactionRequest,
                             context: grpc.aio.ServicerContext[Any, Any]) -> spb.EndTransactionResponse:
        try:
            caller = self._caller(context)
            topic = self._topic_name(request.topic)
            caller.require(topic, Permission.PUB)
            commit_text, _, queue_text = request.transaction_id.partition(":")
            if not commit_text.isdigit() or not queue_text.isdigit():
                raise Refused(pb.INVALID_TRANSACTION_ID, f"unknown transaction id {request.transaction_id!r}")
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise Refused(pb.BAD_REQUEST, "the resolution must be COMMIT or ROLLBACK")
        except Refused as refused:
            return spb.EndTransactionResponse(status=refused.status)
        session = self._session(caller)
        fields = {
            "producerGroup": producer_group(topic), "tranStateTableOffset": queue_text,
            "commitLogOffset": commit_text, "commitOrRollback": str(_COMMIT if request.resolution == pb.COMMIT
                                                                    else _ROLLBACK),
            "fromTransactionCheck": "true" if request.source == pb.SOURCE_SERVER_CHECK else "false",
            "msgId": request.message_id, "transactionId": request.message_id,
        }
        response = await invoke_local(self.access.processor, session.channel, RequestCode.END_TRANSACTION, fields,
                                      credentials=caller.credentials)
        if response.code == ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=ok())
        code = pb.FORBIDDEN if response.code == ResponseCode.NO_PERMISSION else pb.INVALID_TRANSACTION_ID
        return spb.EndTransactionResponse(status=status(code, response.remark or "end transaction failed"))



__all__ = ["PublishRpcs"]

"""The RPCs of consuming: assignments, receives, acks, invisibility changes and dead-lettering (by
invisibility, through `PopService`), offsets and pulls; recalls and lite topics are refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc

from rocketflow.acl import Permission
from rocketflow.grpc_protocol import definition_pb2 as pb
from rocketflow.grpc_protocol import service_pb2 as spb
from rocketflow.protocol.names import is_readable, retry_topic
from rocketflow.proxy import convert, wire
from rocketflow.proxy.calls import Refused, duration_ms, ok, status
from rocketflow.proxy.pop_service import MessageFilter, now_ms
from rocketflow.proxy.rpc_base import ServiceBase

logger = logging.getLogger(__name__)

#: RPCs whose methods return (or yield) serialized responses rather than protobuf objects
RAW_RESPONSES: Final = frozenset({"ReceiveMessage", "AckMessage"})
_RECEIVE_OK: Final = spb.ReceiveMessageResponse(status=pb.Status(code=pb.OK, message="OK")).SerializeToString()
_RECEIVE_NOT_FOUND: Final = spb.ReceiveMessageResponse(
    status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="no new message")).SerializeToString()


class ConsumeRpcs(ServiceBase):
    """The consumers' RPCs: by invisibility (``ReceiveMessage`` and the calls on its receipt handles),
    by offset (``PullMessage`` and the offset RPCs)."""

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: grpc.aio.ServicerContext[Any, Any]) -> spb.QueryAssignmentResponse:
        try:
            caller = self._caller(context)
            topic = self._topic_name(request.topic)
            group = self._group_name(request.group)
            topic_config = self._topic(topic)
            self._group(group)
            caller.require(topic, Permission.SUB)
        except Refused as refused:
            return spb.QueryAssignmentResponse(status=refused.status)
        if not is_readable(topic_config.perm):
            return spb.QueryAssignmentResponse(status=ok())
        # one assignment for the whole broker: a receive takes from all its queues, as the proxy's pop does
        queue = pb.MessageQueue(topic=request.topic, id=-1, permission=pb.READ_WRITE,
                                broker=self._broker(request.endpoints if request.HasField("endpoints") else None),
                                accept_message_types=self.accepted_types(topic_config))
        return spb.QueryAssignmentResponse(status=ok(), assignments=[pb.Assignment(message_queue=queue)])

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.message_queue.topic)
            topic_config = self._topic(topic)
            group_config = self._group(group)
            caller.require(topic, Permission.SUB)
            caller.require(retry_topic(group), Permission.SUB)
            if not 0 < request.batch_size <= self.max_batch:
                raise Refused(pb.BAD_REQUEST, f"batch_size must be in 1..{self.max_batch}, got {request.batch_size}")
            if request.HasField("invisible_duration"):
                invisible_ms = duration_ms(request.invisible_duration)
            elif request.auto_renew:
                invisible_ms = self.default_invisible_ms
            else:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, "a receive without auto_renew needs an invisible_duration")
            if not self.min_invisible_ms <= invisible_ms <= self.max_invisible_ms:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"the invisible duration must be in {self.min_invisible_ms}.."
                                                         f"{self.max_invisible_ms} ms, got {invisible_ms} ms")
            expression = request.filter_expression
            kind = "SQL" if expression.type == pb.SQL else "TAG"
            if kind == "SQL" and not self.access.config.enable_property_filter:
                raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, "SQL filters need enablePropertyFilter on the broker")
            message_filter = MessageFilter.parse(kind, expression.expression)
            if isinstance(message_filter, str):
                raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, message_filter)
            polling_ms = duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") \
                else self.long_polling_ms
            if polling_ms < 0 or polling_ms > max(self.long_polling_ms, 30_000) * 2:
                raise Refused(pb.ILLEGAL_POLLING_TIME, f"the long polling timeout {polling_ms} ms is out of range")
        except Refused as refused:
            yield spb.ReceiveMessageResponse(status=refused.status).SerializeToString()
            return
        session = self._session(caller)
        loop = asyncio.get_running_loop()
        remaining = context.time_remaining()
        wait_s = polling_ms / 1000
        if remaining is not None:  # answer before the client's deadline
            wait_s = min(wait_s, max(0.0, remaining - min(1.0, remaining / 5)))
        queue_ids = list(range(topic_config.read_queue_nums)) if is_readable(topic_config.perm) else []
        found = await self.pop.receive(
            group, topic, queue_ids, request.batch_size, invisible_ms,
            fifo=bool(getattr(group_config, "consume_message_orderly", False)), message_filter=message_filter,
            max_attempts=self._max_attempts(group_config), deadline=loop.time() + wait_s,
            credentials=caller.credentials, channel=session.channel)
        if not found:
            yield _RECEIVE_NOT_FOUND
            return
        yield _RECEIVE_OK
        encoder = wire.ReceiveEncoder(topic, store_host=self.access.store_host, invisible_ms=invisible_ms)
        for item in found:
            yield encoder.encode(item.message, item.handle, item.attempt)
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.to_timestamp(now_ms())).SerializeToString()

    async def AckMessage(self, request: spb.AckMessageRequest,
                         context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.topic)
            caller.require(topic, Permission.SUB)
            if not request.entries:
                raise Refused(pb.BAD_REQUEST, "the request has no entry")
        except Refused as refused:
            return spb.AckMessageResponse(status=refused.status).SerializeToString()
        entries = [(entry.message_id, entry.receipt_handle) for entry in request.entries]
        errors = self.pop.ack_many(group, topic, [handle for _, handle in entries])
        statuses = [wire.STATUS_OK if error is None else wire.status(pb.INVALID_RECEIPT_HANDLE, error.value)
                    for error in errors]
        if len(statuses) == 1:
            overall = statuses[0]
        else:
            overall = wire.STATUS_OK if errors.count(None) == len(errors) else wire.status(
                pb.MULTIPLE_RESULTS, pb.Code.Name(pb.MULTIPLE_RESULTS))
        return wire.ack_response(overall, ((message_id, handle, entry_status) for (message_id, handle), entry_status
                                           in zip(entries, statuses, strict=True)))

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: grpc.aio.ServicerContext[Any, Any]
                                      ) -> spb.ChangeInvisibleDurationResponse:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.topic)
            caller.require(topic, Permission.SUB)
            invisible_ms = duration_ms(request.invisible_duration)
            if not 0 <= invisible_ms <= self.max_invisible_ms:
                raise Refused(pb.ILLEGAL_INVISIBLE_TIME, f"the invisible duration must be in 0.."
                                                         f"{self.max_invisible_ms} ms, got {invisible_ms} ms")
            changed = self.pop.change_invisible(group, topic, request.receipt_handle, invisible_ms)
            if not isinstance(changed, tuple):
                raise Refused(pb.INVALID_RECEIPT_HANDLE, changed.value)
        except Refused as refused:
            return spb.ChangeInvisibleDurationResponse(status=refused.status)
        return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=changed[0])

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: grpc.aio.ServicerContext[Any, Any]
                                              ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic = self._topic_name(request.topic)
            group_config = self._group(group)
            caller.require(topic, Permission.SUB)
        except Refused as refused:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=refused.status)
        session = self._session(caller)
        outcome = await self.pop.forward_to_dlq(group, topic, request.receipt_handle,
                                                self._max_attempts(group_config), caller.credentials, session.channel)
        if outcome is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())
        if isinstance(outcome, str):
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INTERNAL_SERVER_ERROR, outcome))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE, outcome.value))

    # ------------------------------------------------------------------ offsets and pull

    async def QueryOffset(self, request: spb.QueryOffsetRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> spb.QueryOffsetResponse:
        try:
            self._caller(context)
            topic, queue_id = self._queue_of(request.message_queue)
        except Refused as refused:
            return spb.QueryOffsetResponse(status=refused.status)
        if request.query_offset_policy == spb.BEGINNING:  # type: ignore[attr-defined]
            offset = self.access.min_offset(topic, queue_id)
        elif request.query_offset_policy == spb.END:  # type: ignore[attr-defined]
            offset = self.access.max_offset(topic, queue_id)
        else:
            offset = self.access.offset_by_time(topic, queue_id, convert.timestamp_ms(request.timestamp))
        return spb.QueryOffsetResponse(status=ok(), offset=offset)

    async def GetOffset(self, request: spb.GetOffsetRequest,
                        context: grpc.aio.ServicerContext[Any, Any]) -> spb.GetOffsetResponse:
        try:
            self._caller(context)
            group = self._group_name(request.group)
            topic, queue_id = self._queue_of(request.message_queue)
        except Refused as refused:
            return spb.GetOffsetResponse(status=refused.status)
        offset = self.access.committed_offset(group, topic, queue_id)
        if offset < 0:
            return spb.GetOffsetResponse(status=status(pb.OFFSET_NOT_FOUND, "the group has no offset in this queue"))
        return spb.GetOffsetResponse(status=ok(), offset=offset)

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest,
                           context: grpc.aio.ServicerContext[Any, Any]) -> spb.UpdateOffsetResponse:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic, queue_id = self._queue_of(request.message_queue)
            caller.require(topic, Permission.SUB)
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, "the offset must not be negative")
        except Refused as refused:
            return spb.UpdateOffsetResponse(status=refused.status)
        self.access.commit_offset(group, topic, queue_id, request.offset)
        return spb.UpdateOffsetResponse(status=ok())

    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            caller = self._caller(context)
            group = self._group_name(request.group)
            topic, queue_id = self._queue_of(request.message_queue)
            caller.require(topic, Permission.SUB)
            if not 0 < request.batch_size <= self.max_batch:
                raise Refused(pb.BAD_REQUEST, f"batch_size must be in 1..{self.max_batch}")
            expression = request.filter_expression
            message_filter = MessageFilter.parse("SQL" if expression.type == pb.SQL else "TAG", expression.expression)
            if isinstance(message_filter, str):
                raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, message_filter)
        except Refused as refused:
            yield spb.PullMessageResponse(status=refused.status)
            return
        read = self.access.read(topic, queue_id, request.offset, request.batch_size, group)
        messages = [m for m in read.messages if message_filter.matches(m)]
        yield spb.PullMessageResponse(status=ok() if messages else status(pb.MESSAGE_NOT_FOUND, "no new message"))
        for message in messages:
            yield spb.PullMessageResponse(message=convert.incoming(message, topic=topic,
                                                                   store_host=self.access.store_host))
        yield spb.PullMessageResponse(next_offset=read.next_offset)

    async def RecallMessage(self, request: spb.RecallMessageRequest,
                            context: grpc.aio.ServicerContext[Any, Any]) -> spb.RecallMessageResponse:
        return spb.RecallMessageResponse(status=status(pb.NOT_IMPLEMENTED, "recalling messages is not supported"))

    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: grpc.aio.ServicerContext[Any, Any]) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(status=status(pb.NOT_IMPLEMENTED, "lite topics are not supported"))



__all__ = ["RAW_RESPONSES", "ConsumeRpcs"]

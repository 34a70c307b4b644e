"""Queue and consumer offsets: max / min / by-time offsets of a queue, every committed and delay offset,
resetting a group's offsets by time (INVOKE_BROKER_TO_RESET_OFFSET) and cloning them to another group."""

from __future__ import annotations

import logging

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import Handler, check_names, error
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import ConsumerOffsetTable, DelayOffsetTable, ResetOffsetBody
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
)

logger = logging.getLogger(__name__)


class OffsetAdmin:
    """Offsets of queues (from the store) and of consumer groups (the `ConsumerOffsetManager`)."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
        }

    def get_max_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        offset = self.ctx.store.get_max_offset_in_queue(header.topic, header.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def get_min_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetMinOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        offset = self.ctx.store.get_min_offset_in_queue(header.topic, header.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def search_offset_by_timestamp(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = SearchOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        offset = self.ctx.store.get_offset_by_timestamp(header.topic, header.queue_id, header.timestamp)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def get_earliest_msg_storetime(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetEarliestMsgStoretimeRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        timestamp = self.ctx.store.get_earliest_message_time(header.topic, header.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})

    def get_all_consumer_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        table = {key: dict(queues) for key, queues in self.ctx.offsets.table.items()}
        return request.make_response(ResponseCode.SUCCESS, body=ConsumerOffsetTable(table).encode())

    def get_all_delay_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        table = dict(self.ctx.delay_offsets.table)
        return request.make_response(ResponseCode.SUCCESS, body=DelayOffsetTable(table).encode())

    def reset_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: offsets by timestamp, stored, and pushed to the group's clients."""
        header = ResetOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, group=header.group, group_field="group")
        ctx = self.ctx
        topic_config = ctx.topics.select(header.topic)
        if topic_config is None:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"[reset-offset] reset offset failed, no topic in this broker. topic={header.topic}")
        store = ctx.store
        table: dict[MessageQueue, int] = {}
        for queue_id in range(topic_config.write_queue_nums):
            if header.timestamp == -1:
                target = store.get_max_offset_in_queue(header.topic, queue_id)
            else:
                target = store.get_offset_by_timestamp(header.topic, queue_id, header.timestamp)
            current = ctx.offsets.query_offset(header.group, header.topic, queue_id)
            if not header.is_force and 0 <= current <= target:
                target = current
            table[MessageQueue(header.topic, ctx.config.broker_name, queue_id)] = target
        for queue, offset in table.items():
            ctx.offsets.commit_offset(header.group, header.topic, queue.queue_id, offset)
        body = ResetOffsetBody(table).encode()
        group_info = ctx.clients.get_consumer_group(header.group)
        if group_info is not None:
            for info in list(group_info.channels.values()):
                push = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header.to_ext_fields(), body,
                                               oneway=True, language=LanguageCode.JAVA)
                info.channel.send(push)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    def clone_group_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """CLONE_GROUP_OFFSET (314): the destination group starts where the source group is.

        Without a topic, every topic the source group has offsets of. Unless ``offline``, a topic the
        source group's online members do not subscribe to is skipped (RocketMQ's rule).
        """
        header = CloneGroupOffsetRequestHeader.from_command(request)
        check_names(group=header.src_group, group_field="srcGroup")
        check_names(group=header.dest_group, group_field="destGroup")
        if header.topic:
            check_names(topic=header.topic)
        ctx = self.ctx
        topics = {header.topic} if header.topic else ctx.offsets.topics_of(header.src_group)
        group_info = ctx.clients.get_consumer_group(header.src_group)
        cloned = []
        for topic in sorted(topics):
            if ctx.topics.select(topic) is None:
                logger.warning("clone offsets of %s: topic %s does not exist here", header.src_group, topic)
                continue
            if not header.offline and group_info is not None and group_info.subscriptions \
                    and topic not in group_info.subscriptions:
                continue
            ctx.offsets.clone_offsets(header.src_group, header.dest_group, topic)
            cloned.append(topic)
        logger.info("cloned the offsets of %s to %s for %s (asked by %s)", header.src_group, header.dest_group,
                    cloned, request_ctx.remote_address)
        return request.make_response(ResponseCode.SUCCESS)


__all__ = ["OffsetAdmin"]

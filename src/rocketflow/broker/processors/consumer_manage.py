"""GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15)."""

from __future__ import annotations

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import check_names, error
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.bodies import ConsumerListBody
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import HeaderFieldError
from rocketflow.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

QUERY_NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
#: The committed offset RocketMQ clients send for a queue whose offset they do not know yet.
UNKNOWN_OFFSET = -1


class ConsumerManageProcessor:
    """Group membership lists and committed offsets."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list)
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_consumer_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset)

    def get_consumer_list(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_command(request)
        group_info = self.ctx.clients.get_consumer_group(header.consumer_group)
        client_ids = group_info.all_client_ids() if group_info is not None else []
        if not client_ids:
            return error(request, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}")
        return request.make_response(ResponseCode.SUCCESS, body=ConsumerListBody(client_ids).encode())

    def query_consumer_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, group=header.consumer_group, queue_id=header.queue_id)
        ctx = self.ctx
        offset = ctx.offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            # A queue that still starts at 0 is consumed from its beginning by a group's first consumer.
            min_offset = ctx.store.get_min_offset_in_queue(header.topic, header.queue_id)
            if min_offset > 0:
                return error(request, ResponseCode.QUERY_NOT_FOUND, QUERY_NOT_FOUND_REMARK)
            offset = 0
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def update_consumer_offset(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """Commit an offset. -1 (RocketMQ clients' "not known yet", sent in their periodic persistence) is
        answered SUCCESS and changes nothing: stored, it would erase the group's progress; below -1 is refused."""
        header = UpdateConsumerOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, group=header.consumer_group, queue_id=header.queue_id)
        offset = header.commit_offset
        if offset < UNKNOWN_OFFSET:
            raise HeaderFieldError("commitOffset", f"must be >= 0 (or -1: not known, nothing committed), got {offset}")
        if offset != UNKNOWN_OFFSET:
            self.ctx.offsets.commit_offset(header.consumer_group, header.topic, header.queue_id, offset)
        return request.make_response(ResponseCode.SUCCESS)


__all__ = ["QUERY_NOT_FOUND_REMARK", "UNKNOWN_OFFSET", "ConsumerManageProcessor"]

"""QUERY_MESSAGE (12) by key and VIEW_MESSAGE_BY_ID (33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketflow.broker.processors.common import error
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import QueryMessageRequestHeader, ViewMessageRequestHeader

if TYPE_CHECKING:
    from rocketflow.broker.controller import BrokerController


class QueryMessageProcessor:
    """Looks messages up by key (index) or by commit-log offset (offset msg id)."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message_by_id)

    def query_message(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_command(request)
        store = self.broker.store
        max_num = header.max_num
        if header.unique_key_query:
            max_num = store.config.default_query_max_num
        result = store.query_message(header.topic, header.key, max_num, header.begin_timestamp,
                                     header.end_timestamp)
        fields = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phy_offset),
        }
        if not result.buffers:
            return request.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         remark="can not find message, maybe time range not correct",
                                         ext_fields=fields)
        return request.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=result.body())

    def view_message_by_id(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_command(request)
        record = self.broker.store.select_one_message_by_offset(header.offset) if header.offset >= 0 else None
        if record is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}")
        return request.make_response(ResponseCode.SUCCESS, body=bytes(record))


__all__ = ["QueryMessageProcessor"]

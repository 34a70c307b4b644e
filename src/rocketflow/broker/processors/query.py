"""QUERY_MESSAGE (12) by key and VIEW_MESSAGE_BY_ID (33).

With ACL on, a message is returned only to an account with SUB on the topic its data belongs to
(`rocketflow.acl.message_resource`: a delayed, prepared or returned message's first topic), whatever
the header names.
"""

from __future__ import annotations

from rocketflow.acl import AccessGrant, Permission, request_grant
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import error
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.codec import RecordDecodeError, decode_record
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import QueryMessageRequestHeader, ViewMessageRequestHeader


class QueryMessageProcessor:
    """Looks messages up by key (index) or by commit-log offset (offset msg id)."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message_by_id)

    def query_message(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_command(request)
        store = self.ctx.store
        max_num = header.max_num
        if header.unique_key_query:
            max_num = store.config.default_query_max_num
        result = store.query_message(header.topic, header.key, max_num, header.begin_timestamp,
                                     header.end_timestamp)
        fields = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phy_offset),
        }
        buffers = result.buffers
        grant = request_grant(self.ctx.acl_hook, request, request_ctx.remote_address)
        if grant.checked and buffers:
            refusals = [_refusal(grant, record) for record in buffers]
            allowed = [record for record, refusal in zip(buffers, refusals, strict=True) if refusal is None]
            if not allowed:
                return error(request, ResponseCode.NO_PERMISSION, next(r for r in refusals if r is not None))
            buffers = allowed
        if not buffers:
            return request.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         remark="can not find message, maybe time range not correct",
                                         ext_fields=fields)
        return request.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=b"".join(buffers))

    def view_message_by_id(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_command(request)
        record = self.ctx.store.select_one_message_by_offset(header.offset) if header.offset >= 0 else None
        if record is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}")
        grant = request_grant(self.ctx.acl_hook, request, request_ctx.remote_address)
        if grant.checked:
            refusal = _refusal(grant, record)
            if refusal is not None:
                return error(request, ResponseCode.NO_PERMISSION, refusal)
        return request.make_response(ResponseCode.SUCCESS, body=bytes(record))


def _refusal(grant: AccessGrant, record: bytes) -> str | None:
    """Why ``grant`` may not read the stored message ``record``, or None if it may."""
    try:
        msg, _ = decode_record(record, decompress=False, with_body=False)
    except RecordDecodeError as exc:
        return f"the record cannot be read to check its topic: {exc}"
    return grant.message_refusal(msg.topic, msg.properties, Permission.SUB)


__all__ = ["QueryMessageProcessor"]

"""Connected clients: a group's consume progress and rate, its consumers' and producers' connections, and
a consumer's running info relayed from the client itself."""

from __future__ import annotations

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import Handler, error
from rocketflow.net import RemotingError, RequestContext
from rocketflow.protocol.bodies import Connection, ConsumerConnection, ConsumeStats, OffsetWrapper, ProducerConnection
from rocketflow.protocol.ids import InvalidMessageIdError, decode_offset_msg_id
from rocketflow.protocol.message import MessageQueue
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
)


class ClientAdmin:
    """What the `ClientManager` knows of producers and consumers, with the offsets of their queues."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
        }

    def get_consume_stats(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumeStatsRequestHeader.from_command(request)
        ctx = self.ctx
        group = header.consumer_group
        if header.topic and header.topic.strip():
            topics = [header.topic]
        else:
            suffix = "@" + group
            topics = sorted(key[:-len(suffix)] for key in ctx.offsets.table if key.endswith(suffix))
        group_info = ctx.clients.get_consumer_group(group)
        store = ctx.store
        table: dict[MessageQueue, OffsetWrapper] = {}
        for topic in topics:
            topic_config = ctx.topics.select(topic)
            if topic_config is None:
                continue
            if group_info is not None and group_info.subscriptions and topic not in group_info.subscriptions:
                continue
            for queue_id in range(topic_config.read_queue_nums):
                broker_offset = max(0, store.get_max_offset_in_queue(topic, queue_id))
                consumer_offset = max(0, ctx.offsets.query_offset(group, topic, queue_id))
                last = 0
                if consumer_offset > 0:
                    last = max(0, store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1))
                table[MessageQueue(topic, ctx.config.broker_name, queue_id)] = OffsetWrapper(
                    broker_offset, consumer_offset, last)
        stats = ConsumeStats(table, ctx.stats.group_get_tps(group))
        return request.make_response(ResponseCode.SUCCESS, body=stats.encode())

    def get_consumer_connection_list(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerConnectionListRequestHeader.from_command(request)
        group_info = self.ctx.clients.get_consumer_group(header.consumer_group)
        if group_info is None or not group_info.channels:
            return error(request, ResponseCode.CONSUMER_NOT_ONLINE,
                         f"the consumer group[{header.consumer_group}] not online")
        body = ConsumerConnection(
            connection_set=[Connection(info.client_id, info.client_addr, info.language, info.version)
                            for info in group_info.channels.values()],
            subscription_table=dict(group_info.subscriptions),
            consume_type=group_info.consume_type,
            message_model=group_info.message_model,
            consume_from_where=group_info.consume_from_where,
        )
        return request.make_response(ResponseCode.SUCCESS, body=body.encode())

    def get_producer_connection_list(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetProducerConnectionListRequestHeader.from_command(request)
        members = self.ctx.clients.producer_groups.get(header.producer_group)
        if not members:
            return error(request, ResponseCode.SYSTEM_ERROR, f"the producer group[{header.producer_group}] not exist")
        body = ProducerConnection([Connection(info.client_id, info.client_addr, info.language, info.version)
                                   for info in members.values()])
        return request.make_response(ResponseCode.SUCCESS, body=body.encode())

    async def get_consumer_running_info(self, request_ctx: RequestContext,
                                        request: RemotingCommand) -> RemotingCommand:
        """Relay GET_CONSUMER_RUNNING_INFO to the client and return its answer."""
        header = GetConsumerRunningInfoRequestHeader.from_command(request)
        relay = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext_fields(),
                                        language=LanguageCode.JAVA)
        return await self._call_consumer(request, relay, header.consumer_group, header.client_id)

    async def consume_message_directly(self, request_ctx: RequestContext,
                                       request: RemotingCommand) -> RemotingCommand:
        """Have a client of the group consume the stored message ``msgId`` (an offset msg id) once: the record
        goes to the client with this broker's name, and the client's `ConsumeMessageDirectlyResult` comes back."""
        header = ConsumeMessageDirectlyResultRequestHeader.from_command(request)
        if not header.client_id:
            return error(request, ResponseCode.SYSTEM_ERROR, "CONSUME_MESSAGE_DIRECTLY needs a clientId")
        try:
            _, _, offset = decode_offset_msg_id(header.msg_id or "")
        except InvalidMessageIdError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"invalid msgId {header.msg_id!r}: {exc}")
        record = self.ctx.store.select_one_message_by_offset(offset) if offset >= 0 else None
        if record is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        fields = header.to_ext_fields()
        fields["brokerName"] = self.ctx.config.broker_name
        relay = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, fields, bytes(record),
                                        language=LanguageCode.JAVA)
        return await self._call_consumer(request, relay, header.consumer_group, header.client_id)

    async def _call_consumer(self, request: RemotingCommand, relay: RemotingCommand, group: str,
                             client_id: str) -> RemotingCommand:
        """Send ``relay`` to the client ``client_id`` of ``group`` and answer ``request`` with its response."""
        group_info = self.ctx.clients.get_consumer_group(group)
        info = group_info.find_channel(client_id) if group_info is not None else None
        if info is None or info.channel.closed:
            return error(request, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        try:
            answer = await info.channel.invoke(relay, self.ctx.config.client_call_timeout_ms / 1000)
        except RemotingError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> failed: {exc}")
        return request.make_response(answer.code, remark=answer.remark, ext_fields=answer.ext_fields,
                                     body=answer.body)


__all__ = ["ClientAdmin"]

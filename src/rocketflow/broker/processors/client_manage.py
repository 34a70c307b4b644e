"""HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketflow.broker.client_manager import ClientChannelInfo
from rocketflow.broker.processors.common import error
from rocketflow.broker.processors.pull import is_tag_type
from rocketflow.filter import FilterSyntaxError
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.bodies import CheckClientRequestBody, HeartbeatData
from rocketflow.protocol.names import InvalidNameError, PermName, retry_topic, validate_group
from rocketflow.protocol.tags import SubscriptionParseError, parse_subscription
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import UnregisterClientRequestHeader

if TYPE_CHECKING:
    from rocketflow.broker.controller import BrokerController


class ClientManageProcessor:
    """Client registration: heartbeats from producers and consumers, unregistration, config checks."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heart_beat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)

    def heart_beat(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        heartbeat = HeartbeatData.decode(request.body)
        if not heartbeat.client_id:
            return error(request, ResponseCode.SYSTEM_ERROR, "invalid request body: HeartbeatData.clientID is empty")
        for consumer in heartbeat.consumer_data_set:
            try:
                validate_group(consumer.group_name)
            except InvalidNameError as exc:
                return error(request, ResponseCode.SYSTEM_ERROR, f"invalid consumer group in heartbeat: {exc}")
        for producer in heartbeat.producer_data_set:
            if not producer.group_name:
                return error(request, ResponseCode.SYSTEM_ERROR, "invalid producer group in heartbeat: empty name")
        broker = self.broker
        channel = ctx.channel
        for consumer in heartbeat.consumer_data_set:
            group_config = broker.groups.find(consumer.group_name)
            notify = True
            if group_config is not None:
                notify = group_config.notify_consumer_ids_changed_enable
                broker.topics.create_in_send_back(retry_topic(consumer.group_name), group_config.retry_queue_nums,
                                                  PermName.READ | PermName.WRITE)
            info = ClientChannelInfo(channel, heartbeat.client_id, request.language, request.version)
            broker.clients.register_consumer(consumer.group_name, info, consumer.consume_type,
                                             consumer.message_model, consumer.consume_from_where,
                                             consumer.subscription_data_set, notify)
        for producer in heartbeat.producer_data_set:
            info = ClientChannelInfo(channel, heartbeat.client_id, request.language, request.version)
            broker.clients.register_producer(producer.group_name, info)
        return request.make_response(ResponseCode.SUCCESS)

    def unregister_client(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_command(request)
        broker = self.broker
        if header.producer_group:
            broker.clients.unregister_producer(header.producer_group, ctx.channel)
        if header.consumer_group:
            group_config = broker.groups.get(header.consumer_group)
            notify = group_config.notify_consumer_ids_changed_enable if group_config is not None else True
            broker.clients.unregister_consumer(header.consumer_group, ctx.channel, notify)
        return request.make_response(ResponseCode.SUCCESS)

    def check_client_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = CheckClientRequestBody.decode(request.body)
        subscription = body.subscription_data
        if subscription is not None and not is_tag_type(subscription.expression_type):
            if not self.broker.config.enable_property_filter:
                return error(request, ResponseCode.SYSTEM_ERROR,
                             f"The broker does not support consumer to filter message by "
                             f"{subscription.expression_type}")
            try:
                self.broker.pull_processor.filters.compile(subscription.expression_type, subscription.sub_string)
            except FilterSyntaxError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        elif subscription is not None:
            try:
                parse_subscription(subscription.sub_string)
            except SubscriptionParseError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return request.make_response(ResponseCode.SUCCESS)


__all__ = ["ClientManageProcessor"]

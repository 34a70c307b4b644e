"""HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Final

from rocketflow.acl import HEARTBEAT_INLINE_BYTES, heartbeat_permissions, request_grant
from rocketflow.broker.client_manager import ClientChannelInfo
from rocketflow.broker.context import BrokerContext
from rocketflow.broker.message_filter import FilterCompiler, is_tag_type
from rocketflow.broker.processors.common import error
from rocketflow.filter import FilterSyntaxError
from rocketflow.net import RemotingServer, RequestContext
from rocketflow.protocol.bodies import CheckClientRequestBody, ConsumerData, HeartbeatData
from rocketflow.protocol.names import InvalidNameError, PermName, retry_topic, validate_group
from rocketflow.protocol.tags import SubscriptionParseError, parse_subscription
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import UnregisterClientRequestHeader

#: heartbeat bodies larger than this are decoded in a worker thread (and, with ACL on, their permissions
#: checked here rather than by the ACL hook, which would decode them on the loop)
_DECODE_INLINE_BYTES: Final = HEARTBEAT_INLINE_BYTES
#: heartbeats listing more consumer groups than this are registered in slices
_INLINE_GROUPS: Final = 32
#: the loop is given back after this much registering work
_SLICE_SECONDS: Final = 0.002


class ClientManageProcessor:
    """Client registration: heartbeats from producers and consumers, unregistration, config checks."""

    def __init__(self, ctx: BrokerContext, filters: FilterCompiler) -> None:
        self.ctx = ctx
        self.filters = filters

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heart_beat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)

    def heart_beat(self, request_ctx: RequestContext,
                   request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        """Register the heartbeat's producers and consumers (auto-creating groups and retry topics).

        A usual heartbeat is handled at once, in order with the client's other requests. A big one is
        decoded in a worker thread and its groups registered in slices, so the loop serves other
        requests meanwhile: the work is linear in the heartbeat's size and each slice holds the loop
        for about `_SLICE_SECONDS`.
        """
        body = request.body or b""
        if len(body) > _DECODE_INLINE_BYTES:
            return self._heart_beat_in_slices(request_ctx, request, None)
        heartbeat = HeartbeatData.decode(body)
        if len(heartbeat.consumer_data_set) > _INLINE_GROUPS:
            return self._heart_beat_in_slices(request_ctx, request, heartbeat)
        refusal = self._check_heartbeat(request, heartbeat)
        if refusal is not None:
            return refusal
        for consumer in heartbeat.consumer_data_set:
            self._register_consumer(request_ctx, request, heartbeat.client_id, consumer)
        self._register_producers(request_ctx, request, heartbeat)
        return request.make_response(ResponseCode.SUCCESS)

    async def _heart_beat_in_slices(self, request_ctx: RequestContext, request: RemotingCommand,
                                    heartbeat: HeartbeatData | None) -> RemotingCommand:
        if heartbeat is None:
            heartbeat = await asyncio.to_thread(HeartbeatData.decode, request.body or b"")
            if self.ctx.acl_hook is not None:
                grant = request_grant(self.ctx.acl_hook, request, request_ctx.remote_address)
                for resource, permission in heartbeat_permissions(heartbeat).items():
                    denied = grant.refusal(resource, permission)
                    if denied is not None:
                        return error(request, ResponseCode.NO_PERMISSION, denied)
        refusal = self._check_heartbeat(request, heartbeat)
        if refusal is not None:
            return refusal
        slice_started = time.perf_counter()
        for consumer in heartbeat.consumer_data_set:
            if time.perf_counter() - slice_started > _SLICE_SECONDS:
                await asyncio.sleep(0)
                slice_started = time.perf_counter()
                if request_ctx.channel.closed:  # gone meanwhile: what is registered goes with the channel
                    return request.make_response(ResponseCode.SUCCESS)
            self._register_consumer(request_ctx, request, heartbeat.client_id, consumer)
        self._register_producers(request_ctx, request, heartbeat)
        return request.make_response(ResponseCode.SUCCESS)

    def _register_consumer(self, request_ctx: RequestContext, request: RemotingCommand, client_id: str,
                           consumer: ConsumerData) -> None:
        ctx = self.ctx
        group_config = ctx.groups.find(consumer.group_name)
        notify = True
        if group_config is not None:
            notify = group_config.notify_consumer_ids_changed_enable
            ctx.topics.create_in_send_back(retry_topic(consumer.group_name), group_config.retry_queue_nums,
                                           PermName.READ | PermName.WRITE)
        info = ClientChannelInfo(request_ctx.channel, client_id, request.language, request.version)
        ctx.clients.register_consumer(consumer.group_name, info, consumer.consume_type, consumer.message_model,
                                      consumer.consume_from_where, consumer.subscription_data_set, notify)

    def _register_producers(self, request_ctx: RequestContext, request: RemotingCommand,
                            heartbeat: HeartbeatData) -> None:
        for producer in heartbeat.producer_data_set:
            info = ClientChannelInfo(request_ctx.channel, heartbeat.client_id, request.language, request.version)
            self.ctx.clients.register_producer(producer.group_name, info)

    def _check_heartbeat(self, request: RemotingCommand, heartbeat: HeartbeatData) -> RemotingCommand | None:
        """The refusal of a heartbeat (checked before anything is registered), or None."""
        reason = self._refusal_reason(heartbeat)
        return None if reason is None else error(request, ResponseCode.SYSTEM_ERROR, reason)

    def _refusal_reason(self, heartbeat: HeartbeatData) -> str | None:
        if not heartbeat.client_id:
            return "invalid request body: HeartbeatData.clientID is empty"
        config = self.ctx.config
        limit = config.max_groups_per_heartbeat
        for kind, count in (("consumer", len(heartbeat.consumer_data_set)),
                            ("producer", len(heartbeat.producer_data_set))):
            if count > limit:
                return f"the heartbeat lists {count} {kind} groups, more than maxGroupsPerHeartbeat ({limit})"
        for consumer in heartbeat.consumer_data_set:
            try:
                validate_group(consumer.group_name)
            except InvalidNameError as exc:
                return f"invalid consumer group in heartbeat: {exc}"
            subscriptions = consumer.subscription_data_set
            if len(subscriptions) > config.max_subscriptions_per_group:
                return (f"consumer group {consumer.group_name} subscribes to {len(subscriptions)} topics, more than "
                        f"maxSubscriptionsPerGroup ({config.max_subscriptions_per_group})")
            for subscription in subscriptions:
                tags = max(len(subscription.tags_set), len(subscription.code_set))
                if tags > config.max_tags_per_subscription:
                    return (f"consumer group {consumer.group_name} subscribes to {tags} tags of topic "
                            f"{subscription.topic}, more than maxTagsPerSubscription "
                            f"({config.max_tags_per_subscription})")
                if len(subscription.sub_string) > config.max_subscription_length:
                    return (f"the subscription of consumer group {consumer.group_name} to topic {subscription.topic} "
                            f"is {len(subscription.sub_string)} characters long, more than maxSubscriptionLength "
                            f"({config.max_subscription_length})")
        for producer in heartbeat.producer_data_set:
            if not producer.group_name:
                return "invalid producer group in heartbeat: empty name"
        return None

    def unregister_client(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_command(request)
        ctx = self.ctx
        if header.producer_group:
            ctx.clients.unregister_producer(header.producer_group, request_ctx.channel)
        if header.consumer_group:
            group_config = ctx.groups.get(header.consumer_group)
            notify = group_config.notify_consumer_ids_changed_enable if group_config is not None else True
            ctx.clients.unregister_consumer(header.consumer_group, request_ctx.channel, notify)
        return request.make_response(ResponseCode.SUCCESS)

    def check_client_config(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = CheckClientRequestBody.decode(request.body)
        subscription = body.subscription_data
        config = self.ctx.config
        if subscription is not None and not is_tag_type(subscription.expression_type):
            if not config.enable_property_filter:
                return error(request, ResponseCode.SYSTEM_ERROR,
                             f"The broker does not support consumer to filter message by "
                             f"{subscription.expression_type}")
            try:
                self.filters.compile(subscription.expression_type, subscription.sub_string)
            except FilterSyntaxError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        elif subscription is not None:
            try:
                parse_subscription(subscription.sub_string, max_tags=config.max_tags_per_subscription,
                                   max_length=config.max_subscription_length)
            except SubscriptionParseError as exc:
                return error(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return request.make_response(ResponseCode.SUCCESS)


__all__ = ["ClientManageProcessor"]

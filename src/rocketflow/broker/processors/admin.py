"""The broker's default processor (RocketMQ's AdminBrokerProcessor): locks, offsets, topics, groups, stats.

Codes it does not know are answered REQUEST_CODE_NOT_SUPPORTED with RocketMQ's remark.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from rocketflow.acl import redact_settings, redact_value
from rocketflow.broker.config import BrokerConfigError, config_overrides_from_properties
from rocketflow.broker.processors.common import answer_when_written, check_names, error
from rocketflow.net import RemotingError, RequestContext, not_supported_remark
from rocketflow.protocol.bodies import (
    Connection,
    ConsumerConnection,
    ConsumerOffsetTable,
    ConsumeStats,
    DelayOffsetTable,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicFilterType,
    TopicOffset,
    TopicStatsTable,
    UnlockBatchRequestBody,
)
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import InvalidNameError, validate_group, validate_topic
from rocketflow.remoting import fastjson
from rocketflow.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import BodyDecodeError
from rocketflow.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
)

if TYPE_CHECKING:
    from rocketflow.broker.controller import BrokerController

logger = logging.getLogger("rocketflow.broker.admin")

_Handler = Callable[[RequestContext, RemotingCommand], "RemotingCommand | Awaitable[RemotingCommand | None]"]
#: Upper bound of queue counts accepted by UPDATE_AND_CREATE_TOPIC (BenchmarkTest has 1024).
MAX_QUEUE_NUMS = 1024
_LockBody = TypeVar("_LockBody", LockBatchRequestBody, UnlockBatchRequestBody)


#: RocketMQ 5's topic attributes and their allowed values (None: any value)
TOPIC_ATTRIBUTES: Final[dict[str, frozenset[str] | None]] = {
    "message.type": frozenset({"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
    "queue.type": frozenset({"BatchCQ", "SimpleCQ"}),
    "cleanup.policy": frozenset({"DELETE", "COMPACTION"}),
}


def parse_topic_attributes(text: str | None, current: dict[str, str]) -> dict[str, str] | str:
    """UPDATE_AND_CREATE_TOPIC's ``attributes`` (``+key=value`` adds or sets, ``-key`` removes; ``,``
    between them) applied to ``current``; or why they are refused."""
    if not text or not text.strip():
        return current
    attributes = dict(current)
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        sign, rest = item[0], item[1:]
        key, has_value, value = rest.partition("=")
        key, value = key.strip(), value.strip()
        if sign not in "+-" or not key:
            return f"topic attribute {item!r} must be +key=value or -key"
        if key not in TOPIC_ATTRIBUTES:
            return f"unknown topic attribute {key!r} (known: {', '.join(sorted(TOPIC_ATTRIBUTES))})"
        if sign == "-":
            attributes.pop(key, None)
            continue
        allowed = TOPIC_ATTRIBUTES[key]
        if not has_value or (allowed is not None and value not in allowed):
            return f"topic attribute {key} must be one of {', '.join(sorted(allowed or ()))}, got {value!r}"
        attributes[key] = value
    return attributes


def _decode_lock_body(cls: type[_LockBody], data: bytes, max_queues: int) -> _LockBody:
    """A (UN)LOCK_BATCH_MQ body, strictly: a legal group, a client id, at most ``max_queues`` queues with a
    legal topic, a broker name and an integer queue id >= 0 (`BodyDecodeError` naming the bad field otherwise)."""
    name = cls.__name__
    if not data:
        raise BodyDecodeError(f"{name}: empty body")
    try:
        parsed = fastjson.loads(data)
    except BodyDecodeError as exc:
        raise BodyDecodeError(f"{name}: {exc}") from None
    if not isinstance(parsed, dict):
        raise BodyDecodeError(f"{name}: expected an object, got {type(parsed).__name__}")
    group = parsed.get("consumerGroup")
    if not isinstance(group, str):
        raise BodyDecodeError(f"{name}.consumerGroup: expected a string, got {group!r}")
    try:
        validate_group(group)
    except InvalidNameError as exc:
        raise BodyDecodeError(f"{name}.consumerGroup: {exc}") from None
    client_id = parsed.get("clientId")
    if not isinstance(client_id, str) or not client_id.strip():
        raise BodyDecodeError(f"{name}.clientId: expected a non-empty string, got {client_id!r}")
    queues = parsed.get("mqSet")
    if queues is not None and not isinstance(queues, list):
        raise BodyDecodeError(f"{name}.mqSet: expected an array, got {queues!r}")
    if queues is not None and len(queues) > max_queues:
        raise BodyDecodeError(f"{name}.mqSet: {len(queues)} queues, more than maxQueuesPerRequest ({max_queues})")
    for index, queue in enumerate(queues or ()):
        where = f"{name}.mqSet[{index}]"
        if not isinstance(queue, dict):
            raise BodyDecodeError(f"{where}: expected an object, got {queue!r}")
        topic = queue.get("topic")
        if not isinstance(topic, str):
            raise BodyDecodeError(f"{where}.topic: expected a string, got {topic!r}")
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise BodyDecodeError(f"{where}.topic: {exc}") from None
        broker_name = queue.get("brokerName")
        if not isinstance(broker_name, str) or not broker_name:
            raise BodyDecodeError(f"{where}.brokerName: expected a non-empty string, got {broker_name!r}")
        queue_id = queue.get("queueId")
        if not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0:
            raise BodyDecodeError(f"{where}.queueId: expected an integer >= 0, got {queue_id!r}")
    return cls.from_json_dict(parsed, name)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


class AdminBrokerProcessor:
    """Everything without a dedicated processor."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.handlers: dict[int, _Handler] = {
            RequestCode.LOCK_BATCH_MQ: self.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch_mq,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
        }

    def process(self, ctx: RequestContext,
                request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        handler = self.handlers.get(request.code)
        if handler is None:
            return error(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, not_supported_remark(request.code))
        return handler(ctx, request)

    # ------------------------------------------------------------------ locks

    def lock_batch_mq(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _decode_lock_body(LockBatchRequestBody, request.body, self.broker.config.max_queues_per_request)
        locked = self.broker.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(ResponseCode.SUCCESS, body=LockBatchResponseBody(locked).encode())

    def unlock_batch_mq(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _decode_lock_body(UnlockBatchRequestBody, request.body, self.broker.config.max_queues_per_request)
        self.broker.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ offsets

    def get_max_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        offset = self.broker.store.get_max_offset_in_queue(header.topic, header.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def get_min_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetMinOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        offset = self.broker.store.get_min_offset_in_queue(header.topic, header.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def search_offset_by_timestamp(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = SearchOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        offset = self.broker.store.get_offset_by_timestamp(header.topic, header.queue_id, header.timestamp)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def get_earliest_msg_storetime(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetEarliestMsgStoretimeRequestHeader.from_command(request)
        check_names(topic=header.topic, queue_id=header.queue_id)
        timestamp = self.broker.store.get_earliest_message_time(header.topic, header.queue_id)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})

    def get_all_consumer_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        table = {key: dict(queues) for key, queues in self.broker.offsets.table.items()}
        return request.make_response(ResponseCode.SUCCESS, body=ConsumerOffsetTable(table).encode())

    def get_all_delay_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        table = dict(self.broker.delay_offsets.table)
        return request.make_response(ResponseCode.SUCCESS, body=DelayOffsetTable(table).encode())

    def reset_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: offsets by timestamp, stored, and pushed to the group's clients."""
        header = ResetOffsetRequestHeader.from_command(request)
        check_names(topic=header.topic, group=header.group, group_field="group")
        broker = self.broker
        topic_config = broker.topics.select(header.topic)
        if topic_config is None:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"[reset-offset] reset offset failed, no topic in this broker. topic={header.topic}")
        store = broker.store
        table: dict[MessageQueue, int] = {}
        for queue_id in range(topic_config.write_queue_nums):
            if header.timestamp == -1:
                target = store.get_max_offset_in_queue(header.topic, queue_id)
            else:
                target = store.get_offset_by_timestamp(header.topic, queue_id, header.timestamp)
            current = broker.offsets.query_offset(header.group, header.topic, queue_id)
            if not header.is_force and 0 <= current <= target:
                target = current
            table[MessageQueue(header.topic, broker.config.broker_name, queue_id)] = target
        for queue, offset in table.items():
            broker.offsets.commit_offset(header.group, header.topic, queue.queue_id, offset)
        body = ResetOffsetBody(table).encode()
        group_info = broker.clients.get_consumer_group(header.group)
        if group_info is not None:
            for info in list(group_info.channels.values()):
                push = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header.to_ext_fields(), body,
                                               oneway=True, language=LanguageCode.JAVA)
                info.channel.send(push)
        return request.make_response(ResponseCode.SUCCESS, body=body)

    # ------------------------------------------------------------------ topics

    def update_and_create_topic(self, ctx: RequestContext,
                                request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = CreateTopicRequestHeader.from_command(request)
        topic = header.topic
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        if self.broker.topics.is_system_topic(topic):
            return error(request, ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        for name, value in (("readQueueNums", header.read_queue_nums), ("writeQueueNums", header.write_queue_nums)):
            if not 0 < value <= MAX_QUEUE_NUMS:
                return error(request, ResponseCode.SYSTEM_ERROR, f"{name} must be in 1..{MAX_QUEUE_NUMS}, got {value}")
        if not 0 <= header.perm <= 15:
            return error(request, ResponseCode.SYSTEM_ERROR, f"perm must be PermName bits 0..15, got {header.perm}")
        try:
            filter_type = TopicFilterType[header.topic_filter_type]
        except KeyError:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"topicFilterType must be SINGLE_TAG or MULTI_TAG, got {header.topic_filter_type!r}")
        existing = self.broker.topics.select(topic)
        attributes = parse_topic_attributes(header.attributes, dict(existing.attributes) if existing else {})
        if isinstance(attributes, str):
            return error(request, ResponseCode.SYSTEM_ERROR, attributes)
        config = TopicConfig(topic, header.read_queue_nums, header.write_queue_nums, header.perm, filter_type,
                             header.topic_sys_flag or 0, header.order, attributes)
        self.broker.topics.update(config)
        return answer_when_written(self.broker.topics.written(), request.make_response(ResponseCode.SUCCESS))

    def delete_topic(self, ctx: RequestContext,
                     request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = DeleteTopicRequestHeader.from_command(request)
        topic = header.topic
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        if self.broker.topics.is_system_topic(topic):
            return error(request, ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        self.broker.topics.delete(topic)
        self.broker.store.delete_topics([topic])
        return answer_when_written(self.broker.topics.written(), request.make_response(ResponseCode.SUCCESS))

    def get_all_topic_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=self.broker.topics.snapshot().encode())

    def get_topic_stats_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetTopicStatsInfoRequestHeader.from_command(request)
        broker = self.broker
        topic_config = broker.topics.select(header.topic)
        if topic_config is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        store = broker.store
        table: dict[MessageQueue, TopicOffset] = {}
        for queue_id in range(topic_config.write_queue_nums):
            min_offset = max(0, store.get_min_offset_in_queue(header.topic, queue_id))
            max_offset = max(0, store.get_max_offset_in_queue(header.topic, queue_id))
            timestamp = 0
            if max_offset > 0:
                timestamp = max(0, store.get_message_store_timestamp(header.topic, queue_id, max_offset - 1))
            table[MessageQueue(header.topic, broker.config.broker_name, queue_id)] = TopicOffset(
                min_offset, max_offset, timestamp)
        return request.make_response(ResponseCode.SUCCESS, body=TopicStatsTable(table).encode())

    def query_topic_consume_by_who(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = QueryTopicConsumeByWhoRequestHeader.from_command(request)
        broker = self.broker
        groups = broker.clients.groups_subscribing(header.topic)
        prefix = header.topic + "@"
        groups.update(key[len(prefix):] for key in broker.offsets.table if key.startswith(prefix))
        return request.make_response(ResponseCode.SUCCESS, body=fastjson.dumps({"groupList": sorted(groups)}))

    # ------------------------------------------------------------------ consumers and producers

    def get_consume_stats(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumeStatsRequestHeader.from_command(request)
        broker = self.broker
        group = header.consumer_group
        if header.topic and header.topic.strip():
            topics = [header.topic]
        else:
            suffix = "@" + group
            topics = sorted(key[:-len(suffix)] for key in broker.offsets.table if key.endswith(suffix))
        group_info = broker.clients.get_consumer_group(group)
        store = broker.store
        table: dict[MessageQueue, OffsetWrapper] = {}
        for topic in topics:
            topic_config = broker.topics.select(topic)
            if topic_config is None:
                continue
            if group_info is not None and group_info.subscriptions and topic not in group_info.subscriptions:
                continue
            for queue_id in range(topic_config.read_queue_nums):
                broker_offset = max(0, store.get_max_offset_in_queue(topic, queue_id))
                consumer_offset = max(0, broker.offsets.query_offset(group, topic, queue_id))
                last = 0
                if consumer_offset > 0:
                    last = max(0, store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1))
                table[MessageQueue(topic, broker.config.broker_name, queue_id)] = OffsetWrapper(
                    broker_offset, consumer_offset, last)
        stats = ConsumeStats(table, broker.stats.group_get_tps(group))
        return request.make_response(ResponseCode.SUCCESS, body=stats.encode())

    def get_consumer_connection_list(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerConnectionListRequestHeader.from_command(request)
        group_info = self.broker.clients.get_consumer_group(header.consumer_group)
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

    def get_producer_connection_list(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetProducerConnectionListRequestHeader.from_command(request)
        members = self.broker.clients.producer_groups.get(header.producer_group)
        if not members:
            return error(request, ResponseCode.SYSTEM_ERROR, f"the producer group[{header.producer_group}] not exist")
        body = ProducerConnection([Connection(info.client_id, info.client_addr, info.language, info.version)
                                   for info in members.values()])
        return request.make_response(ResponseCode.SUCCESS, body=body.encode())

    async def get_consumer_running_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """Relay GET_CONSUMER_RUNNING_INFO to the client and return its answer."""
        header = GetConsumerRunningInfoRequestHeader.from_command(request)
        group_info = self.broker.clients.get_consumer_group(header.consumer_group)
        info = group_info.find_channel(header.client_id) if group_info is not None else None
        if info is None or info.channel.closed:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"The Consumer <{header.consumer_group}> <{header.client_id}> not online")
        relay = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext_fields(),
                                        language=LanguageCode.JAVA)
        try:
            answer = await info.channel.invoke(relay, self.broker.config.client_call_timeout_ms / 1000)
        except RemotingError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"invoke consumer <{header.consumer_group}> <{header.client_id}> failed: {exc}")
        return request.make_response(answer.code, remark=answer.remark, ext_fields=answer.ext_fields,
                                     body=answer.body)

    # ------------------------------------------------------------------ subscription groups

    def update_and_create_subscription_group(self, ctx: RequestContext,
                                             request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        config = SubscriptionGroupConfig.decode(request.body)
        try:
            validate_group(config.group_name)
        except InvalidNameError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        if config.retry_queue_nums < 0 or config.retry_max_times < -1:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         "retryQueueNums must be >= 0 and retryMaxTimes >= -1")
        self.broker.groups.update(config)
        return answer_when_written(self.broker.groups.written(), request.make_response(ResponseCode.SUCCESS))

    def get_all_subscription_group(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=self.broker.groups.snapshot().encode())

    def delete_subscription_group(self, ctx: RequestContext,
                                  request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = DeleteSubscriptionGroupRequestHeader.from_command(request)
        self.broker.groups.delete(header.group_name)
        if header.remove_offset:
            self.broker.offsets.remove_group(header.group_name)
        return answer_when_written(self.broker.groups.written(), request.make_response(ResponseCode.SUCCESS))

    # ------------------------------------------------------------------ broker

    def get_broker_runtime_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=KVTable(self.broker.runtime_info()).encode())

    def clone_group_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """CLONE_GROUP_OFFSET (314): the destination group starts where the source group is.

        Without a topic, every topic the source group has offsets of. Unless ``offline``, a topic the
        source group's online members do not subscribe to is skipped (RocketMQ's rule).
        """
        header = CloneGroupOffsetRequestHeader.from_command(request)
        check_names(group=header.src_group, group_field="srcGroup")
        check_names(group=header.dest_group, group_field="destGroup")
        if header.topic:
            check_names(topic=header.topic)
        broker = self.broker
        topics = {header.topic} if header.topic else broker.offsets.topics_of(header.src_group)
        group_info = broker.clients.get_consumer_group(header.src_group)
        cloned = []
        for topic in sorted(topics):
            if broker.topics.select(topic) is None:
                logger.warning("clone offsets of %s: topic %s does not exist here", header.src_group, topic)
                continue
            if not header.offline and group_info is not None and group_info.subscriptions \
                    and topic not in group_info.subscriptions:
                continue
            broker.offsets.clone_offsets(header.src_group, header.dest_group, topic)
            cloned.append(topic)
        logger.info("cloned the offsets of %s to %s for %s (asked by %s)", header.src_group, header.dest_group,
                    cloned, ctx.remote_address)
        return request.make_response(ResponseCode.SUCCESS)

    def update_broker_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG (25): ``key=value`` lines (RocketMQ's names or ours) applied to the running broker.

        Settings read on use (permissions, limits, timeouts, filters, flush intervals...) take effect at
        once; the few fixed at start (addresses, names, paths, segment sizes, TLS, ACL) are refused, all
        or nothing. Changes last until the broker restarts (put them in broker.conf to keep them).
        """
        broker = self.broker
        try:
            text = request.body.decode("utf-8")
            overrides = config_overrides_from_properties(text, "UPDATE_BROKER_CONFIG",
                                                         max_lines=broker.config.max_config_lines)
        except (UnicodeDecodeError, BrokerConfigError) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
        fixed = sorted(name for name in overrides if _fixed_at_start(name))
        if fixed:
            return error(request, ResponseCode.SYSTEM_ERROR,
                         f"{', '.join(fixed)} cannot change while the broker runs: set it in broker.conf and restart")
        broker_changes: dict[str, Any] = {name: value for name, value in overrides.items()
                                          if not name.startswith("store.")}
        store_changes: dict[str, Any] = {name[len("store."):]: value for name, value in overrides.items()
                                         if name.startswith("store.")}
        try:  # validate as a whole, on copies, before touching the live settings
            store_copy = dataclasses.replace(broker.config.store, **store_changes)
            dataclasses.replace(broker.config, store=store_copy, **broker_changes)
        except (BrokerConfigError, TypeError, ValueError) as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, f"invalid broker config: {exc}")
        for name, value in broker_changes.items():
            setattr(broker.config, name, value)
        for name, value in store_changes.items():
            setattr(broker.config.store, name, value)
        if "max_message_size" in broker_changes:
            broker.config.store.max_message_size = broker.config.max_message_size
        logger.info("broker config updated by %s: %s", ctx.remote_address, redact_settings(overrides))
        if "broker_permission" in broker_changes:
            broker.topics.data_version.next_version()
            if broker.registrar is not None:
                broker.registrar.register_soon()
        return request.make_response(ResponseCode.SUCCESS)

    def get_broker_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG (26): every setting as ``name=value`` lines; secrets (keys' passwords, the
        broker's ``secretKey``) are redacted, so the answer is safe to show (and it is admin-only with ACL on)."""
        config = self.broker.config
        lines: list[str] = []

        def add(prefix: str, obj: Any) -> None:
            for item in dataclasses.fields(obj):
                value = getattr(obj, item.name)
                if dataclasses.is_dataclass(value):
                    continue
                if isinstance(value, bool):
                    value = "true" if value else "false"  # as Java prints them
                elif hasattr(value, "value") and not isinstance(value, int | str):
                    value = value.value
                text = "" if value is None else str(value)
                lines.append(f"{prefix}{_camel(item.name)}={redact_value(item.name, text)}")

        add("", config)
        add("", config.store)
        version = self.broker.topics.data_version
        return request.make_response(ResponseCode.SUCCESS,
                                     ext_fields={"version": version.encode().decode()},
                                     body=("\n".join(sorted(lines)) + "\n").encode())


__all__ = ["MAX_QUEUE_NUMS", "AdminBrokerProcessor"]


#: Settings used only while the broker starts (or baked into files): UPDATE_BROKER_CONFIG refuses them.
_FIXED_AT_START: Final = frozenset({
    "broker_name", "cluster", "broker_id", "broker_ip", "listen_host", "listen_port", "namesrv_addr",
    "message_delay_level", "acl_enable", "acl_file", "metrics_port", "metrics_host", "access_key", "secret_key",
    "server_channel_max_idle_seconds", "store.store_root", "store.commit_log_segment_size",
    "store.consume_queue_segment_units", "store.flush_disk_type", "store.broker_role", "store.max_hash_slot_num",
    "store.max_index_num", "store.message_index_enable", "store.store_host", "store.message_delay_level",
    "store.total_physical_memory", "store.ha_listen_port", "store.ha_master_address", "store.index_build_batch",
    "store.ha_transfer_batch_size", "store.ha_send_heartbeat_interval_ms", "store.ha_housekeeping_interval_ms",
    "slave_synchronize_interval_ms",
})


def _fixed_at_start(name: str) -> bool:
    return name in _FIXED_AT_START or name.startswith(("tls_", "store.tls_"))

"""Topics: create or update, delete, list, per-queue stats, and which groups consume a topic."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final

from rocketflow.broker.context import BrokerContext
from rocketflow.broker.processors.common import Handler, answer_when_written, error
from rocketflow.net import RequestContext
from rocketflow.protocol.bodies import TopicConfig, TopicFilterType, TopicOffset, TopicStatsTable
from rocketflow.protocol.message import MessageQueue
from rocketflow.protocol.names import InvalidNameError, validate_topic
from rocketflow.remoting import fastjson
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
)

#: Upper bound of queue counts accepted by UPDATE_AND_CREATE_TOPIC (BenchmarkTest has 1024).
MAX_QUEUE_NUMS = 1024

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


class TopicAdmin:
    """The topic table's admin requests; a change is answered once its journal line is on disk."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
        }

    def update_and_create_topic(self, request_ctx: RequestContext,
                                request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = CreateTopicRequestHeader.from_command(request)
        topic = header.topic
        topics = self.ctx.topics
        refused = self._refuse_topic(request, topic)
        if refused is not None:
            return refused
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
        existing = topics.select(topic)
        attributes = parse_topic_attributes(header.attributes, dict(existing.attributes) if existing else {})
        if isinstance(attributes, str):
            return error(request, ResponseCode.SYSTEM_ERROR, attributes)
        config = TopicConfig(topic, header.read_queue_nums, header.write_queue_nums, header.perm, filter_type,
                             header.topic_sys_flag or 0, header.order, attributes)
        topics.update(config)
        return answer_when_written(topics.written(), request.make_response(ResponseCode.SUCCESS))

    def delete_topic(self, request_ctx: RequestContext,
                     request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = DeleteTopicRequestHeader.from_command(request)
        topic = header.topic
        topics = self.ctx.topics
        refused = self._refuse_topic(request, topic)
        if refused is not None:
            return refused
        topics.delete(topic)
        self.ctx.store.delete_topics([topic])
        return answer_when_written(topics.written(), request.make_response(ResponseCode.SUCCESS))

    def _refuse_topic(self, request: RemotingCommand, topic: str) -> RemotingCommand | None:
        """The error answer when ``topic`` is not a valid name or is a system topic, else None."""
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            return error(request, ResponseCode.SYSTEM_ERROR, str(exc))
        if self.ctx.topics.is_system_topic(topic):
            return error(request, ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        return None

    def get_all_topic_config(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=self.ctx.topics.snapshot().encode())

    def get_topic_stats_info(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = GetTopicStatsInfoRequestHeader.from_command(request)
        ctx = self.ctx
        topic_config = ctx.topics.select(header.topic)
        if topic_config is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        store = ctx.store
        table: dict[MessageQueue, TopicOffset] = {}
        for queue_id in range(topic_config.write_queue_nums):
            min_offset = max(0, store.get_min_offset_in_queue(header.topic, queue_id))
            max_offset = max(0, store.get_max_offset_in_queue(header.topic, queue_id))
            timestamp = 0
            if max_offset > 0:
                timestamp = max(0, store.get_message_store_timestamp(header.topic, queue_id, max_offset - 1))
            table[MessageQueue(header.topic, ctx.config.broker_name, queue_id)] = TopicOffset(
                min_offset, max_offset, timestamp)
        return request.make_response(ResponseCode.SUCCESS, body=TopicStatsTable(table).encode())

    def query_topic_consume_by_who(self, request_ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = QueryTopicConsumeByWhoRequestHeader.from_command(request)
        ctx = self.ctx
        groups = ctx.clients.groups_subscribing(header.topic)
        prefix = header.topic + "@"
        groups.update(key[len(prefix):] for key in ctx.offsets.table if key.startswith(prefix))
        return request.make_response(ResponseCode.SUCCESS, body=fastjson.dumps({"groupList": sorted(groups)}))


__all__ = ["MAX_QUEUE_NUMS", "TOPIC_ATTRIBUTES", "TopicAdmin", "parse_topic_attributes"]

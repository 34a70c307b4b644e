"""Headers of the admin commands: topics, stats, connections, subscription groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from rocketflow.remoting.headers.base import CommandHeader, Int, Wire


@dataclass(slots=True, kw_only=True)
class CreateTopicRequestHeader(CommandHeader):
    """UPDATE_AND_CREATE_TOPIC (17); ``topic_filter_type`` is ``SINGLE_TAG`` or ``MULTI_TAG``."""

    topic: str
    default_topic: str
    read_queue_nums: Int
    write_queue_nums: Int
    perm: Int
    topic_filter_type: str
    topic_sys_flag: Int | None = None
    order: Annotated[bool, Wire(required=True)] = False
    #: RocketMQ 5's topic attributes, as its admin tools send them: ``+message.type=FIFO`` (``,``-separated;
    #: ``-key`` removes one)
    attributes: str | None = None


@dataclass(slots=True, kw_only=True)
class DeleteTopicRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_BROKER (215)."""

    topic: str


@dataclass(slots=True, kw_only=True)
class GetTopicStatsInfoRequestHeader(CommandHeader):
    """GET_TOPIC_STATS_INFO (202)."""

    topic: str


@dataclass(slots=True, kw_only=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    """GET_CONSUME_STATS (208); no/blank topic means every topic the group has offsets for."""

    consumer_group: str
    topic: str | None = None


@dataclass(slots=True, kw_only=True)
class GetConsumerConnectionListRequestHeader(CommandHeader):
    """GET_CONSUMER_CONNECTION_LIST (203)."""

    consumer_group: str


@dataclass(slots=True, kw_only=True)
class GetProducerConnectionListRequestHeader(CommandHeader):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: str


@dataclass(slots=True, kw_only=True)
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    """DELETE_SUBSCRIPTIONGROUP (207)."""

    group_name: str
    remove_offset: bool = False


@dataclass(slots=True, kw_only=True)
class QueryTopicConsumeByWhoRequestHeader(CommandHeader):
    """QUERY_TOPIC_CONSUME_BY_WHO (300)."""

    topic: str


@dataclass(slots=True, kw_only=True)
class QueryConsumeTimeSpanRequestHeader(CommandHeader):
    """QUERY_CONSUME_TIME_SPAN (303)."""

    topic: str
    group: str


__all__ = [
    "CreateTopicRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "QueryConsumeTimeSpanRequestHeader",
    "QueryTopicConsumeByWhoRequestHeader",
]

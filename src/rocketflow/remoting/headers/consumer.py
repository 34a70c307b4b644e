"""Headers of consuming: pulls, consume offsets, consumer lists, sending back, offset and time lookups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from rocketflow.remoting.headers.base import CommandHeader, Int, Long, Wire


@dataclass(slots=True, kw_only=True)
class PullMessageRequestHeader(CommandHeader):
    """PULL_MESSAGE (11)."""

    consumer_group: str
    topic: str
    queue_id: Int
    queue_offset: Long
    max_msg_nums: Int
    sys_flag: Int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None


@dataclass(slots=True, kw_only=True)
class PullMessageResponseHeader(CommandHeader):
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long


@dataclass(slots=True, kw_only=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET (14)."""

    consumer_group: str
    topic: str
    queue_id: Int


@dataclass(slots=True, kw_only=True)
class QueryConsumerOffsetResponseHeader(CommandHeader):
    offset: Long


@dataclass(slots=True, kw_only=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    """UPDATE_CONSUMER_OFFSET (15)."""

    consumer_group: str
    topic: str
    queue_id: Int
    commit_offset: Long


@dataclass(slots=True, kw_only=True)
class GetConsumerListByGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38)."""

    consumer_group: str


@dataclass(slots=True, kw_only=True)
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    """NOTIFY_CONSUMER_IDS_CHANGED (40), broker -> consumer, oneway."""

    consumer_group: str


@dataclass(slots=True, kw_only=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    """CONSUMER_SEND_MSG_BACK (36); ``offset`` is the failed message's commit-log offset."""

    offset: Long
    group: str
    delay_level: Int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int | None = None


@dataclass(slots=True, kw_only=True)
class GetMaxOffsetRequestHeader(CommandHeader):
    """GET_MAX_OFFSET (30)."""

    topic: str
    queue_id: Int


@dataclass(slots=True, kw_only=True)
class GetMaxOffsetResponseHeader(CommandHeader):
    offset: Long


@dataclass(slots=True, kw_only=True)
class GetMinOffsetRequestHeader(CommandHeader):
    """GET_MIN_OFFSET (31)."""

    topic: str
    queue_id: Int


@dataclass(slots=True, kw_only=True)
class GetMinOffsetResponseHeader(CommandHeader):
    offset: Long


@dataclass(slots=True, kw_only=True)
class SearchOffsetRequestHeader(CommandHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29)."""

    topic: str
    queue_id: Int
    timestamp: Long


@dataclass(slots=True, kw_only=True)
class SearchOffsetResponseHeader(CommandHeader):
    offset: Long


@dataclass(slots=True, kw_only=True)
class GetEarliestMsgStoretimeRequestHeader(CommandHeader):
    """GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str
    queue_id: Int


@dataclass(slots=True, kw_only=True)
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: Long


@dataclass(slots=True, kw_only=True)
class ViewMessageRequestHeader(CommandHeader):
    """VIEW_MESSAGE_BY_ID (33): the commit-log offset decoded from an offset msgId."""

    offset: Long


@dataclass(slots=True, kw_only=True)
class QueryMessageRequestHeader(CommandHeader):
    """QUERY_MESSAGE (12). ``_UNIQUE_KEY_QUERY`` is an extra ext field the client adds."""

    topic: str
    key: str
    max_num: Int
    begin_timestamp: Long
    end_timestamp: Long
    unique_key_query: Annotated[bool | None, Wire(name="_UNIQUE_KEY_QUERY")] = None


@dataclass(slots=True, kw_only=True)
class QueryMessageResponseHeader(CommandHeader):
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


@dataclass(slots=True, kw_only=True)
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    """GET_CONSUMER_RUNNING_INFO (307), broker -> consumer."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@dataclass(slots=True, kw_only=True)
class ConsumeMessageDirectlyResultRequestHeader(CommandHeader):
    """CONSUME_MESSAGE_DIRECTLY (309), broker -> consumer."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


@dataclass(slots=True, kw_only=True)
class GetConsumerStatusRequestHeader(CommandHeader):
    """GET_CONSUMER_STATUS_FROM_CLIENT (221) / INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223)."""

    topic: str
    group: str
    client_addr: str | None = None


@dataclass(slots=True, kw_only=True)
class CloneGroupOffsetRequestHeader(CommandHeader):
    """CLONE_GROUP_OFFSET (314): copy ``src_group``'s offsets (of ``topic``, or of all its topics) to ``dest_group``."""

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


@dataclass(slots=True, kw_only=True)
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220)."""

    topic: str
    group: str
    timestamp: Long
    is_force: Annotated[bool, Wire(required=True)] = False


__all__ = [
    "CloneGroupOffsetRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
]

"""Headers of sending: routes, sends (V1 and the one-letter V2 form), replies, transactions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

from rocketflow.remoting.codes import RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import ProtocolError
from rocketflow.remoting.headers.base import CommandHeader, Int, Long, Wire, compile_encoder, compile_parser


@dataclass(slots=True, kw_only=True)
class GetRouteInfoRequestHeader(CommandHeader):
    """GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str


@dataclass(slots=True, kw_only=True)
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10); also the canonical form `decode_send_header` returns for 310/320."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int
    queue_id: Int
    sys_flag: Int
    born_timestamp: Long
    flag: Int
    properties: str | None = None
    reconsume_times: Int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: Int | None = None

    def to_v2_ext_fields(self) -> dict[str, str]:
        """``SendMessageRequestHeaderV2.from_v1(self).to_ext_fields()`` in one step (each send makes one)."""
        return _encode_v1_as_v2(self)


@dataclass(slots=True, kw_only=True)
class SendMessageRequestHeaderV2(CommandHeader):
    """SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320): the V1 fields under one-letter names."""

    a: Annotated[str, Wire(meaning="producerGroup")]
    b: Annotated[str, Wire(meaning="topic")]
    c: Annotated[str, Wire(meaning="defaultTopic")]
    d: Annotated[Int, Wire(meaning="defaultTopicQueueNums")]
    e: Annotated[Int, Wire(meaning="queueId")]
    f: Annotated[Int, Wire(meaning="sysFlag")]
    g: Annotated[Long, Wire(meaning="bornTimestamp")]
    h: Annotated[Int, Wire(meaning="flag")]
    i: Annotated[str | None, Wire(meaning="properties")] = None
    j: Annotated[Int | None, Wire(meaning="reconsumeTimes")] = None
    k: Annotated[bool, Wire(meaning="unitMode")] = False
    l: Annotated[Int | None, Wire(meaning="maxReconsumeTimes")] = None  # noqa: E741 - the wire name
    m: Annotated[bool, Wire(meaning="batch")] = False

    @classmethod
    def from_v1(cls, header: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        return cls(
            a=header.producer_group,
            b=header.topic,
            c=header.default_topic,
            d=header.default_topic_queue_nums,
            e=header.queue_id,
            f=header.sys_flag,
            g=header.born_timestamp,
            h=header.flag,
            i=header.properties,
            j=header.reconsume_times,
            k=header.unit_mode,
            l=header.max_reconsume_times,
            m=header.batch,
        )

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group=self.a,
            topic=self.b,
            default_topic=self.c,
            default_topic_queue_nums=self.d,
            queue_id=self.e,
            sys_flag=self.f,
            born_timestamp=self.g,
            flag=self.h,
            properties=self.i,
            reconsume_times=self.j,
            unit_mode=self.k,
            max_reconsume_times=self.l,
            batch=self.m,
        )


@dataclass(slots=True, kw_only=True)
class SendMessageResponseHeader(CommandHeader):
    """Response to a send. ``MSG_REGION`` and ``TRACE_ON`` are extra ext fields the broker adds."""

    msg_id: str
    queue_id: Int
    queue_offset: Long
    transaction_id: str | None = None
    msg_region: Annotated[str | None, Wire(name="MSG_REGION")] = None
    trace_on: Annotated[bool | None, Wire(name="TRACE_ON")] = None


@dataclass(slots=True, kw_only=True)
class ReplyMessageRequestHeader(CommandHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326), broker -> requesting client: the reply's send header plus where
    and when the broker got it (hosts as Java prints socket addresses, e.g. ``/127.0.0.1:10911``)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int
    queue_id: Int
    sys_flag: Int
    born_timestamp: Long
    flag: Int
    properties: str | None = None
    reconsume_times: Int | None = None
    unit_mode: bool = False
    born_host: str
    store_host: str
    store_timestamp: Long


@dataclass(slots=True, kw_only=True)
class UnregisterClientRequestHeader(CommandHeader):
    """UNREGISTER_CLIENT (35)."""

    client_id: Annotated[str, Wire(name="clientID")]
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True, kw_only=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    """CHECK_TRANSACTION_STATE (39), broker -> producer."""

    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@dataclass(slots=True, kw_only=True)
class EndTransactionRequestHeader(CommandHeader):
    """END_TRANSACTION (37); ``commit_or_rollback`` is a MessageSysFlag transaction value (0/8/12)."""

    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: Int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


_SEND_V1_CODES: Final = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE})
_SEND_V2_CODES: Final = frozenset(
    {RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2}
)


#: The V1 send header's attribute behind each of SEND_MESSAGE_V2's one-letter fields, a to m
_V1_ATTRIBUTES_OF_V2: Final = (
    "producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id", "sys_flag", "born_timestamp",
    "flag", "properties", "reconsume_times", "unit_mode", "max_reconsume_times", "batch")
#: SEND_MESSAGE_V2's one-letter fields parsed straight into the V1 header (its canonical form), and written
#: straight from it
_parse_send_v2_as_v1: Final = compile_parser(SendMessageRequestHeaderV2, SendMessageRequestHeader,
                                             _V1_ATTRIBUTES_OF_V2)
_encode_v1_as_v2: Final = compile_encoder(SendMessageRequestHeaderV2, _V1_ATTRIBUTES_OF_V2)


def decode_send_header(command: RemotingCommand) -> SendMessageRequestHeader:
    """The send header of SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320)
    (and the reply-message twins 324/325), always in its V1 form."""
    if command.code in _SEND_V2_CODES:
        header: SendMessageRequestHeader = _parse_send_v2_as_v1(command.ext_fields)
        return header
    if command.code in _SEND_V1_CODES:
        return SendMessageRequestHeader.from_ext_fields(command.ext_fields)
    raise ProtocolError(f"request code {command.code} is not a send request")


__all__ = [
    "CheckTransactionStateRequestHeader",
    "EndTransactionRequestHeader",
    "GetRouteInfoRequestHeader",
    "ReplyMessageRequestHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "UnregisterClientRequestHeader",
    "decode_send_header",
]

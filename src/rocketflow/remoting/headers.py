"""Typed views of a command's ext fields ("custom headers", PROTOCOL.md 1.6 and 2.3).

Each header is a dataclass deriving from `CommandHeader`. A field's ext-field name is its Python
name in camelCase unless `Wire(name=...)` says otherwise; its type decides how it is parsed:

* ``str`` - taken as is;
* ``Int`` / ``Long`` - a 32- / 64-bit integer (Java ``Integer`` / ``Long``), e.g. ``"-1"``;
* ``bool`` - Java's ``Boolean.parseBoolean``: only ``"true"`` (any case) is true.

A field without a default (or marked ``Wire(required=True)``) is mandatory (``@CFNotNull``).
Unlike 4.9.3, which only logs a missing mandatory field, `CommandHeader.from_ext_fields` raises
`HeaderFieldError` naming the field, for missing fields and for unparsable values alike.
Unknown ext fields (e.g. the C++ client's ``AccessKey``/``Signature``) are ignored.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Final, Self, Union, get_args, get_origin, get_type_hints

from rocketflow.remoting.codes import RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import HeaderFieldError, ProtocolError


class FieldKind(Enum):
    """How an ext-field string is parsed."""

    STRING = "string"
    INT = "int"  # Java int / Integer (32 bits)
    LONG = "long"  # Java long / Long (64 bits)
    BOOL = "bool"


#: A 32-bit integer field (Java ``Integer``).
Int = Annotated[int, FieldKind.INT]
#: A 64-bit integer field (Java ``Long``).
Long = Annotated[int, FieldKind.LONG]


@dataclass(frozen=True, slots=True)
class Wire:
    """`Annotated` metadata for a header field: its ext-field name, whether it is mandatory,
    and (for the one-letter V2 names) what it means, for error messages."""

    name: str | None = None
    required: bool | None = None
    meaning: str | None = None


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One field of a header class as it appears on the wire."""

    attr: str
    wire: str
    kind: FieldKind
    required: bool
    meaning: str | None = None


_INTEGER = re.compile(r"[+-]?[0-9]+")
_CAMEL = re.compile(r"_([a-z0-9])")
_BITS: Final = {FieldKind.INT: 32, FieldKind.LONG: 64}
_FIELDS_CACHE: dict[type, tuple[HeaderField, ...]] = {}
#: per header class, its generated `from_ext_fields` and `to_ext_fields` bodies (see `_compile_parser`)
_PARSERS: dict[type, Callable[[Mapping[str, str]], Any]] = {}
_ENCODERS: dict[type, Callable[[Any], dict[str, str]]] = {}


def _camel_case(name: str) -> str:
    return _CAMEL.sub(lambda match: match.group(1).upper(), name)


def _unwrap(hint: Any, extras: list[Any]) -> Any:
    if get_origin(hint) is Annotated:
        base, *metadata = get_args(hint)
        extras.extend(metadata)
        return base
    return hint


def _describe_field(owner: type, field: dataclasses.Field[Any], hint: Any) -> HeaderField:
    extras: list[Any] = []
    hint = _unwrap(hint, extras)
    if get_origin(hint) in (Union, types.UnionType):
        members = [member for member in get_args(hint) if member is not type(None)]
        if len(members) != 1:
            raise TypeError(f"{owner.__name__}.{field.name}: unsupported header field type {hint!r}")
        hint = _unwrap(members[0], extras)
    kinds = [extra for extra in extras if isinstance(extra, FieldKind)]
    wires = [extra for extra in extras if isinstance(extra, Wire)]
    wire = wires[0] if wires else Wire()
    if kinds:
        kind = kinds[0]
    elif hint is str:
        kind = FieldKind.STRING
    elif hint is bool:
        kind = FieldKind.BOOL
    elif hint is int:
        kind = FieldKind.INT
    else:
        raise TypeError(f"{owner.__name__}.{field.name}: unsupported header field type {hint!r}")
    has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    required = wire.required if wire.required is not None else not has_default
    return HeaderField(
        attr=field.name,
        wire=wire.name or _camel_case(field.name),
        kind=kind,
        required=required,
        meaning=wire.meaning,
    )


def _parse_value(spec: HeaderField, raw: object) -> object:
    text = raw if isinstance(raw, str) else _to_text(raw)
    if spec.kind is FieldKind.STRING:
        return text
    if spec.kind is FieldKind.BOOL:
        return text.lower() == "true"
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        raise HeaderFieldError(spec.wire, f"{text!r} is not an integer{_meaning(spec)}")
    value = int(stripped)
    bits = _BITS[spec.kind]
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        message = f"{stripped} is out of range for a {bits}-bit integer{_meaning(spec)}"
        raise HeaderFieldError(spec.wire, message)
    return value


def _meaning(spec: HeaderField) -> str:
    return f" ({spec.meaning})" if spec.meaning else ""


_MISSING_DEFAULT: Final = object()


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory
    return _MISSING_DEFAULT


def _absent(spec: HeaderField, default: Any) -> Any:
    """The value of a field the ext fields leave out: its default, or `HeaderFieldError` when it is mandatory."""
    if spec.required or default is _MISSING_DEFAULT:
        raise HeaderFieldError(spec.wire, f"missing{_meaning(spec)}")
    return default


# Each header class gets a parser and an encoder written out for its own fields (as `dataclasses`
# writes ``__init__``): one header per request or response on every hot path, and a loop over a
# field table with a dict of keyword arguments cost about twice as much. Both keep the generic
# rules: a plain value takes the fast branch, anything else goes through `_parse_value` or `_to_text`.

def _compile_parser(cls: type[CommandHeader], into: type[CommandHeader] | None = None,
                    attributes: tuple[str, ...] = ()) -> Callable[[Mapping[str, str]], Any]:
    """A parser of ``cls``'s ext fields; with ``into``, building that class instead, whose ``attributes``
    take ``cls``'s fields in order (SEND_MESSAGE_V2's one-letter fields parsed into the V1 header)."""
    specs = cls.header_fields()
    fields = {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    target = cls if into is None else into
    namespace: dict[str, Any] = {"_cls": target, "_parse_value": _parse_value, "_absent": _absent}
    lines = ["def parse(fields):", "    get = fields.get"]
    assigned: list[tuple[str, str]] = []  # (attribute of the result, local holding its value)
    for index, spec in enumerate(specs):
        value, spec_name, default_name = f"v{index}", f"_spec{index}", f"_default{index}"
        namespace[spec_name] = spec
        default = _field_default(fields[spec.attr])
        factory = default is not _MISSING_DEFAULT and fields[spec.attr].default_factory is not dataclasses.MISSING
        namespace[default_name] = default
        lines.append(f"    raw = get({spec.wire!r})")
        if spec.kind is FieldKind.STRING:
            lines.append(f"    if type(raw) is str: {value} = raw")
        elif spec.kind is FieldKind.BOOL:
            lines.append(f"    if raw == 'true': {value} = True")
            lines.append(f"    elif raw == 'false': {value} = False")
        else:
            # plain non-negative decimal ASCII of fewer digits than the limit has: the usual integer,
            # parsed without the regex and the range check
            digits = 10 if spec.kind is FieldKind.INT else 19
            lines.append(f"    if type(raw) is str and raw.isascii() and raw.isdigit() and len(raw) < {digits}:"
                         f" {value} = int(raw)")
        lines.append(f"    elif raw is None: {value} = _absent({spec_name}, {default_name})"
                     + ("()" if factory else ""))
        lines.append(f"    else: {value} = _parse_value({spec_name}, raw)")
        assigned.append((attributes[index] if into is not None else spec.attr, value))
    if hasattr(target, "__post_init__"):
        lines.append(f"    return _cls({', '.join(f'{attr}={value}' for attr, value in assigned)})")
    else:
        # the dataclass's ``__init__`` only stores its keyword arguments: stored here directly
        namespace["_new"] = object.__new__
        lines.append("    header = _new(_cls)")
        lines.extend(f"    header.{attr} = {value}" for attr, value in assigned)
        lines.append("    return header")
    exec("\n".join(lines), namespace)  # the source is built above from the class's own field names
    parser: Callable[[Mapping[str, str]], Any] = namespace["parse"]
    return parser


def _compile_encoder(cls: type[CommandHeader], attributes: tuple[str, ...] = ()) -> Callable[[Any], dict[str, str]]:
    """An encoder of ``cls``'s ext fields; with ``attributes``, reading those attributes, in ``cls``'s
    field order, from another header (the V1 send header written as SEND_MESSAGE_V2's one-letter fields)."""
    namespace: dict[str, Any] = {"_to_text": _to_text}
    lines = ["def encode(header):", "    result = {}"]
    for index, spec in enumerate(cls.header_fields()):
        lines.append(f"    value = header.{attributes[index] if attributes else spec.attr}")
        lines.append("    if value is not None:")
        if spec.kind is FieldKind.STRING:
            text = "value if type(value) is str else _to_text(value)"
        elif spec.kind is FieldKind.BOOL:
            text = "'true' if value is True else 'false' if value is False else _to_text(value)"
        else:
            text = "str(value) if type(value) is int else _to_text(value)"
        lines.append(f"        result[{spec.wire!r}] = {text}")
    lines.append("    return result")
    exec("\n".join(lines), namespace)  # the source is built above from the class's own field names
    encoder: Callable[[Any], dict[str, str]] = namespace["encode"]
    return encoder


def _to_text(value: object) -> str:
    # (the generated encoders write plain str and int values themselves and call this for the rest)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


class CommandHeader:
    """Base of every typed header: maps dataclass fields to and from ext fields."""

    __slots__ = ()

    @classmethod
    def header_fields(cls) -> tuple[HeaderField, ...]:
        """The wire description of this class's fields, in declaration order."""
        cached = _FIELDS_CACHE.get(cls)
        if cached is None:
            hints = get_type_hints(cls, include_extras=True)
            fields = dataclasses.fields(cls)  # type: ignore[arg-type]
            cached = tuple(_describe_field(cls, field, hints[field.name]) for field in fields)
            _FIELDS_CACHE[cls] = cached
        return cached

    def to_ext_fields(self) -> dict[str, str]:
        """The ext fields Java's ``makeCustomHeaderToNet`` would produce (None fields omitted)."""
        encoder = _ENCODERS.get(type(self))
        if encoder is None:
            encoder = _ENCODERS[type(self)] = _compile_encoder(type(self))
        return encoder(self)

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        """Parse and validate; raises `HeaderFieldError` naming the first bad or missing field."""
        parser = _PARSERS.get(cls)
        if parser is None:
            parser = _PARSERS[cls] = _compile_parser(cls)
        return parser(fields)  # type: ignore[no-any-return]

    @classmethod
    def from_command(cls, command: RemotingCommand) -> Self:
        """`from_ext_fields` applied to a command's ext fields."""
        return cls.from_ext_fields(command.ext_fields)


# =========================================================================== producer


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


# =========================================================================== consumer


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


# =========================================================================== broker <-> namesrv


@dataclass(slots=True, kw_only=True)
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103); ``body_crc32`` = CRC32(body) & 0x7FFFFFFF, 0 skips the check."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    compressed: bool = False
    body_crc32: Int = 0


@dataclass(slots=True, kw_only=True)
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True, kw_only=True)
class UnRegisterBrokerRequestHeader(CommandHeader):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(slots=True, kw_only=True)
class QueryDataVersionRequestHeader(CommandHeader):
    """QUERY_DATA_VERSION (322)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@dataclass(slots=True, kw_only=True)
class QueryDataVersionResponseHeader(CommandHeader):
    changed: Annotated[bool, Wire(required=True)] = False


@dataclass(slots=True, kw_only=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    """GET_TOPICS_BY_CLUSTER (224)."""

    cluster: str


@dataclass(slots=True, kw_only=True)
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205), to the namesrv."""

    broker_name: str


@dataclass(slots=True, kw_only=True)
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: Int


@dataclass(slots=True, kw_only=True)
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    """ADD_WRITE_PERM_OF_BROKER (327), to the namesrv."""

    broker_name: str


@dataclass(slots=True, kw_only=True)
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: Int


@dataclass(slots=True, kw_only=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_NAMESRV (216); ``clusterName`` is only sent by later versions."""

    topic: str
    cluster_name: str | None = None


# --------------------------------------------------------------------------- KV config (namesrv)


@dataclass(slots=True, kw_only=True)
class PutKVConfigRequestHeader(CommandHeader):
    """PUT_KV_CONFIG (100)."""

    namespace: str
    key: str
    value: str


@dataclass(slots=True, kw_only=True)
class GetKVConfigRequestHeader(CommandHeader):
    """GET_KV_CONFIG (101)."""

    namespace: str
    key: str


@dataclass(slots=True, kw_only=True)
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


@dataclass(slots=True, kw_only=True)
class DeleteKVConfigRequestHeader(CommandHeader):
    """DELETE_KV_CONFIG (102)."""

    namespace: str
    key: str


@dataclass(slots=True, kw_only=True)
class GetKVListByNamespaceRequestHeader(CommandHeader):
    """GET_KVLIST_BY_NAMESPACE (219)."""

    namespace: str


# =========================================================================== admin


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


# =========================================================================== lookup tables

#: Request code -> the header class its ext fields decode into (codes without ext fields are absent).
REQUEST_HEADERS: Final[Mapping[int, type[CommandHeader]]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeaderV2,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeaderV2,
    RequestCode.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeaderV2,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: ReplyMessageRequestHeader,
    RequestCode.CLONE_GROUP_OFFSET: CloneGroupOffsetRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    RequestCode.PUT_KV_CONFIG: PutKVConfigRequestHeader,
    RequestCode.GET_KV_CONFIG: GetKVConfigRequestHeader,
    RequestCode.DELETE_KV_CONFIG: DeleteKVConfigRequestHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
    RequestCode.UNREGISTER_BROKER: UnRegisterBrokerRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListRequestHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerRequestHeader,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
    RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvRequestHeader,
    RequestCode.GET_KVLIST_BY_NAMESPACE: GetKVListByNamespaceRequestHeader,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: GetConsumerStatusRequestHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: GetConsumerStatusRequestHeader,
    RequestCode.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterRequestHeader,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: QueryTopicConsumeByWhoRequestHeader,
    RequestCode.QUERY_CONSUME_TIME_SPAN: QueryConsumeTimeSpanRequestHeader,
    RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    RequestCode.QUERY_DATA_VERSION: QueryDataVersionRequestHeader,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: AddWritePermOfBrokerRequestHeader,
}

#: Request code -> the header class of a SUCCESS response to it (where the response has one).
RESPONSE_HEADERS: Final[Mapping[int, type[CommandHeader]]] = {
    RequestCode.SEND_MESSAGE: SendMessageResponseHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageResponseHeader,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
    RequestCode.PULL_MESSAGE: PullMessageResponseHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageResponseHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerResponseHeader,
    RequestCode.QUERY_DATA_VERSION: QueryDataVersionResponseHeader,
    RequestCode.GET_KV_CONFIG: GetKVConfigResponseHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerResponseHeader,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: AddWritePermOfBrokerResponseHeader,
}

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
_parse_send_v2_as_v1: Final = _compile_parser(SendMessageRequestHeaderV2, SendMessageRequestHeader,
                                              _V1_ATTRIBUTES_OF_V2)
_encode_v1_as_v2: Final = _compile_encoder(SendMessageRequestHeaderV2, _V1_ATTRIBUTES_OF_V2)


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
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "CheckTransactionStateRequestHeader",
    "CloneGroupOffsetRequestHeader",
    "CommandHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "FieldKind",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetProducerConnectionListRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "HeaderField",
    "Int",
    "Long",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PutKVConfigRequestHeader",
    "QueryConsumeTimeSpanRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "ReplyMessageRequestHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "UnRegisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
    "Wire",
    "decode_send_header",
]

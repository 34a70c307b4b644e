"""Typed headers: wire names, round trips for every class, V1 <-> V2, and validation errors."""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocketflow.remoting import headers as headers_module
from rocketflow.remoting.codes import RequestCode
from rocketflow.remoting.command import RemotingCommand
from rocketflow.remoting.errors import HeaderFieldError, ProtocolError
from rocketflow.remoting.headers import (
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    CommandHeader,
    FieldKind,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    UpdateConsumerOffsetRequestHeader,
    decode_send_header,
)

ALL_HEADER_CLASSES: list[type[CommandHeader]] = sorted(
    {
        value
        for value in vars(headers_module).values()
        if isinstance(value, type) and issubclass(value, CommandHeader) and value is not CommandHeader
    },
    key=lambda cls: cls.__name__,
)

# (class, {wire name: required}) for the headers of RocketMQ 4.9.3, written out independently of the code.
EXPECTED_WIRE: list[tuple[str, dict[str, bool]]] = [
    ("GetRouteInfoRequestHeader", {"topic": True}),
    (
        "SendMessageRequestHeader",
        {
            "producerGroup": True,
            "topic": True,
            "defaultTopic": True,
            "defaultTopicQueueNums": True,
            "queueId": True,
            "sysFlag": True,
            "bornTimestamp": True,
            "flag": True,
            "properties": False,
            "reconsumeTimes": False,
            "unitMode": False,
            "batch": False,
            "maxReconsumeTimes": False,
        },
    ),
    ("SendMessageRequestHeaderV2", {**dict.fromkeys("abcdefgh", True), **dict.fromkeys("ijklm", False)}),
    (
        "SendMessageResponseHeader",
        {
            "msgId": True,
            "queueId": True,
            "queueOffset": True,
            "transactionId": False,
            "MSG_REGION": False,
            "TRACE_ON": False,
        },
    ),
    (
        "PullMessageRequestHeader",
        {
            "consumerGroup": True,
            "topic": True,
            "queueId": True,
            "queueOffset": True,
            "maxMsgNums": True,
            "sysFlag": True,
            "commitOffset": True,
            "suspendTimeoutMillis": True,
            "subscription": False,
            "subVersion": True,
            "expressionType": False,
        },
    ),
    (
        "PullMessageResponseHeader",
        {"suggestWhichBrokerId": True, "nextBeginOffset": True, "minOffset": True, "maxOffset": True},
    ),
    ("QueryConsumerOffsetRequestHeader", {"consumerGroup": True, "topic": True, "queueId": True}),
    ("QueryConsumerOffsetResponseHeader", {"offset": True}),
    (
        "UpdateConsumerOffsetRequestHeader",
        {"consumerGroup": True, "topic": True, "queueId": True, "commitOffset": True},
    ),
    ("UnregisterClientRequestHeader", {"clientID": True, "producerGroup": False, "consumerGroup": False}),
    ("GetConsumerListByGroupRequestHeader", {"consumerGroup": True}),
    ("NotifyConsumerIdsChangedRequestHeader", {"consumerGroup": True}),
    (
        "ConsumerSendMsgBackRequestHeader",
        {
            "offset": True,
            "group": True,
            "delayLevel": True,
            "originMsgId": False,
            "originTopic": False,
            "unitMode": False,
            "maxReconsumeTimes": False,
        },
    ),
    ("GetMaxOffsetRequestHeader", {"topic": True, "queueId": True}),
    ("GetMinOffsetRequestHeader", {"topic": True, "queueId": True}),
    ("SearchOffsetRequestHeader", {"topic": True, "queueId": True, "timestamp": True}),
    ("GetEarliestMsgStoretimeRequestHeader", {"topic": True, "queueId": True}),
    ("GetEarliestMsgStoretimeResponseHeader", {"timestamp": True}),
    ("ViewMessageRequestHeader", {"offset": True}),
    (
        "QueryMessageRequestHeader",
        {
            "topic": True,
            "key": True,
            "maxNum": True,
            "beginTimestamp": True,
            "endTimestamp": True,
            "_UNIQUE_KEY_QUERY": False,
        },
    ),
    ("QueryMessageResponseHeader", {"indexLastUpdateTimestamp": True, "indexLastUpdatePhyoffset": True}),
    (
        "RegisterBrokerRequestHeader",
        {
            "brokerName": True,
            "brokerAddr": True,
            "clusterName": True,
            "haServerAddr": True,
            "brokerId": True,
            "compressed": False,
            "bodyCrc32": False,
        },
    ),
    ("RegisterBrokerResponseHeader", {"haServerAddr": False, "masterAddr": False}),
    (
        "UnRegisterBrokerRequestHeader",
        {"brokerName": True, "brokerAddr": True, "clusterName": True, "brokerId": True},
    ),
    (
        "QueryDataVersionRequestHeader",
        {"brokerName": True, "brokerAddr": True, "clusterName": True, "brokerId": True},
    ),
    ("QueryDataVersionResponseHeader", {"changed": True}),
    (
        "CreateTopicRequestHeader",
        {
            "topic": True,
            "defaultTopic": True,
            "readQueueNums": True,
            "writeQueueNums": True,
            "perm": True,
            "topicFilterType": True,
            "topicSysFlag": False,
            "order": True,
            "attributes": False,  # RocketMQ 5's topic attributes ("+message.type=FIFO")
        },
    ),
    ("DeleteTopicRequestHeader", {"topic": True}),
    ("GetTopicStatsInfoRequestHeader", {"topic": True}),
    ("GetConsumeStatsRequestHeader", {"consumerGroup": True, "topic": False}),
    ("GetConsumerConnectionListRequestHeader", {"consumerGroup": True}),
    ("GetProducerConnectionListRequestHeader", {"producerGroup": True}),
    ("ResetOffsetRequestHeader", {"topic": True, "group": True, "timestamp": True, "isForce": True}),
    ("GetConsumerRunningInfoRequestHeader", {"consumerGroup": True, "clientId": True, "jstackEnable": False}),
    (
        "CheckTransactionStateRequestHeader",
        {
            "tranStateTableOffset": True,
            "commitLogOffset": True,
            "msgId": False,
            "transactionId": False,
            "offsetMsgId": False,
        },
    ),
    (
        "EndTransactionRequestHeader",
        {
            "producerGroup": True,
            "tranStateTableOffset": True,
            "commitLogOffset": True,
            "commitOrRollback": True,
            "fromTransactionCheck": False,
            "msgId": True,
            "transactionId": False,
        },
    ),
    ("DeleteSubscriptionGroupRequestHeader", {"groupName": True, "removeOffset": False}),
    ("PutKVConfigRequestHeader", {"namespace": True, "key": True, "value": True}),
    ("GetKVConfigRequestHeader", {"namespace": True, "key": True}),
    ("GetKVConfigResponseHeader", {"value": False}),
    ("DeleteKVConfigRequestHeader", {"namespace": True, "key": True}),
    ("GetKVListByNamespaceRequestHeader", {"namespace": True}),
]

LONG_FIELDS = {
    ("SendMessageRequestHeader", "bornTimestamp"),
    ("SendMessageRequestHeaderV2", "g"),
    ("PullMessageRequestHeader", "queueOffset"),
    ("PullMessageRequestHeader", "commitOffset"),
    ("PullMessageRequestHeader", "suspendTimeoutMillis"),
    ("PullMessageRequestHeader", "subVersion"),
    ("UpdateConsumerOffsetRequestHeader", "commitOffset"),
    ("QueryConsumerOffsetResponseHeader", "offset"),
    ("SendMessageResponseHeader", "queueOffset"),
    ("RegisterBrokerRequestHeader", "brokerId"),
    ("ConsumerSendMsgBackRequestHeader", "offset"),
}


@pytest.mark.parametrize(("class_name", "expected"), EXPECTED_WIRE, ids=[name for name, _ in EXPECTED_WIRE])
def test_wire_names_and_required_flags(class_name: str, expected: dict[str, bool]) -> None:
    cls = getattr(headers_module, class_name)
    assert {spec.wire: spec.required for spec in cls.header_fields()} == expected


@pytest.mark.parametrize(("class_name", "wire"), sorted(LONG_FIELDS))
def test_long_fields_are_64_bit(class_name: str, wire: str) -> None:
    cls = getattr(headers_module, class_name)
    (spec,) = [spec for spec in cls.header_fields() if spec.wire == wire]
    assert spec.kind is FieldKind.LONG


def test_every_header_class_describes_its_fields() -> None:
    assert len(ALL_HEADER_CLASSES) >= 50
    for cls in ALL_HEADER_CLASSES:
        specs = cls.header_fields()
        assert len({spec.wire for spec in specs}) == len(specs), cls.__name__


def test_request_header_table_covers_the_protocol_tables() -> None:
    expected = {
        RequestCode.SEND_MESSAGE: "SendMessageRequestHeader",
        RequestCode.SEND_MESSAGE_V2: "SendMessageRequestHeaderV2",
        RequestCode.SEND_BATCH_MESSAGE: "SendMessageRequestHeaderV2",
        RequestCode.PULL_MESSAGE: "PullMessageRequestHeader",
        RequestCode.QUERY_CONSUMER_OFFSET: "QueryConsumerOffsetRequestHeader",
        RequestCode.UPDATE_CONSUMER_OFFSET: "UpdateConsumerOffsetRequestHeader",
        RequestCode.UNREGISTER_CLIENT: "UnregisterClientRequestHeader",
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: "GetConsumerListByGroupRequestHeader",
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: "NotifyConsumerIdsChangedRequestHeader",
        RequestCode.CONSUMER_SEND_MSG_BACK: "ConsumerSendMsgBackRequestHeader",
        RequestCode.GET_MAX_OFFSET: "GetMaxOffsetRequestHeader",
        RequestCode.GET_MIN_OFFSET: "GetMinOffsetRequestHeader",
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: "SearchOffsetRequestHeader",
        RequestCode.GET_EARLIEST_MSG_STORETIME: "GetEarliestMsgStoretimeRequestHeader",
        RequestCode.VIEW_MESSAGE_BY_ID: "ViewMessageRequestHeader",
        RequestCode.QUERY_MESSAGE: "QueryMessageRequestHeader",
        RequestCode.REGISTER_BROKER: "RegisterBrokerRequestHeader",
        RequestCode.UNREGISTER_BROKER: "UnRegisterBrokerRequestHeader",
        RequestCode.GET_ROUTEINFO_BY_TOPIC: "GetRouteInfoRequestHeader",
        RequestCode.QUERY_DATA_VERSION: "QueryDataVersionRequestHeader",
        RequestCode.UPDATE_AND_CREATE_TOPIC: "CreateTopicRequestHeader",
        RequestCode.GET_TOPIC_STATS_INFO: "GetTopicStatsInfoRequestHeader",
        RequestCode.GET_CONSUMER_CONNECTION_LIST: "GetConsumerConnectionListRequestHeader",
        RequestCode.GET_PRODUCER_CONNECTION_LIST: "GetProducerConnectionListRequestHeader",
        RequestCode.GET_CONSUME_STATS: "GetConsumeStatsRequestHeader",
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: "ResetOffsetRequestHeader",
        RequestCode.RESET_CONSUMER_CLIENT_OFFSET: "ResetOffsetRequestHeader",
        RequestCode.GET_CONSUMER_RUNNING_INFO: "GetConsumerRunningInfoRequestHeader",
        RequestCode.CHECK_TRANSACTION_STATE: "CheckTransactionStateRequestHeader",
        RequestCode.END_TRANSACTION: "EndTransactionRequestHeader",
        RequestCode.DELETE_SUBSCRIPTIONGROUP: "DeleteSubscriptionGroupRequestHeader",
        RequestCode.PUT_KV_CONFIG: "PutKVConfigRequestHeader",
        RequestCode.GET_KV_CONFIG: "GetKVConfigRequestHeader",
        RequestCode.DELETE_KV_CONFIG: "DeleteKVConfigRequestHeader",
    }
    for code, name in expected.items():
        assert REQUEST_HEADERS[code].__name__ == name, code
    assert RESPONSE_HEADERS[RequestCode.PULL_MESSAGE].__name__ == "PullMessageResponseHeader"
    assert RESPONSE_HEADERS[RequestCode.SEND_MESSAGE_V2].__name__ == "SendMessageResponseHeader"
    # requests without ext fields have no header class
    for code in (RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        assert code not in REQUEST_HEADERS


# --------------------------------------------------------------------------- round trips

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)


def _strategy_for(cls: type[CommandHeader]) -> st.SearchStrategy[CommandHeader]:
    fields = {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    arguments: dict[str, st.SearchStrategy[Any]] = {}
    for spec in cls.header_fields():
        value: st.SearchStrategy[Any]
        if spec.kind is FieldKind.STRING:
            value = st.text()
        elif spec.kind is FieldKind.INT:
            value = _INT32
        elif spec.kind is FieldKind.LONG:
            value = _INT64
        else:
            value = st.booleans()
        if fields[spec.attr].default is None:
            value = st.none() | value
        arguments[spec.attr] = value
    return st.builds(cls, **arguments)


@pytest.mark.parametrize("cls", ALL_HEADER_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_round_trip_every_header(cls: type[CommandHeader], data: st.DataObject) -> None:
    header = data.draw(_strategy_for(cls))
    fields = header.to_ext_fields()
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in fields.items())
    for spec in cls.header_fields():
        value = getattr(header, spec.attr)
        if value is None:
            assert spec.wire not in fields
        elif isinstance(value, bool):
            assert fields[spec.wire] == ("true" if value else "false")
        else:
            assert fields[spec.wire] == str(value)
    assert cls.from_ext_fields(fields) == header
    assert cls.from_command(RemotingCommand(code=0, ext_fields=fields)) == header


_v1_headers = st.builds(
    SendMessageRequestHeader,
    producer_group=st.text(),
    topic=st.text(),
    default_topic=st.text(),
    default_topic_queue_nums=_INT32,
    queue_id=_INT32,
    sys_flag=_INT32,
    born_timestamp=_INT64,
    flag=_INT32,
    properties=st.none() | st.text(),
    reconsume_times=st.none() | _INT32,
    unit_mode=st.booleans(),
    batch=st.booleans(),
    max_reconsume_times=st.none() | _INT32,
)


@given(_v1_headers)
def test_v1_v2_conversions(header: SendMessageRequestHeader) -> None:
    v2 = SendMessageRequestHeaderV2.from_v1(header)
    assert v2.to_v1() == header
    v2_fields = v2.to_ext_fields()
    assert header.to_v2_ext_fields() == v2_fields  # the one-step form a send uses: same fields, same order
    assert list(header.to_v2_ext_fields()) == list(v2_fields)
    assert set(v2_fields) <= set("abcdefghijklm")
    assert v2_fields["b"] == header.topic
    assert v2_fields["g"] == str(header.born_timestamp)
    if header.properties is not None:
        assert v2_fields["i"] == header.properties
    for code, fields in (
        (RequestCode.SEND_MESSAGE, header.to_ext_fields()),
        (RequestCode.SEND_MESSAGE_V2, v2_fields),
        (RequestCode.SEND_BATCH_MESSAGE, v2_fields),
    ):
        assert decode_send_header(RemotingCommand(code=code, ext_fields=fields)) == header


def test_v2_one_letter_mapping_of_properties() -> None:
    fields = {"a": "g1", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1795311632605"}
    fields |= {
        "h": "0",
        "i": "TAGS\x01TagA\x02KEYS\x01key1\x02",
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "true",
    }
    header = decode_send_header(RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=fields))
    assert header == SendMessageRequestHeader(
        producer_group="g1",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1795311632605,
        flag=0,
        properties="TAGS\x01TagA\x02KEYS\x01key1\x02",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=16,
        batch=True,
    )


def test_decode_send_header_rejects_other_codes() -> None:
    with pytest.raises(ProtocolError, match="not a send request"):
        decode_send_header(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={}))


def test_to_ext_fields_formats() -> None:
    header = SendMessageRequestHeader(
        producer_group="g",
        topic="t",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=-1,
        sys_flag=0,
        born_timestamp=1650000000000,
        flag=0,
        unit_mode=True,
    )
    assert header.to_ext_fields() == {
        "producerGroup": "g",
        "topic": "t",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "-1",
        "sysFlag": "0",
        "bornTimestamp": "1650000000000",
        "flag": "0",
        "unitMode": "true",
        "batch": "false",
    }
    # values of other types than str, int and bool take the general path: an enum by its value
    flagged = dataclasses.replace(header, sys_flag=_Seven.SEVEN, topic=_Text("t2"))
    assert flagged.to_ext_fields()["sysFlag"] == "7"
    assert flagged.to_ext_fields()["topic"] == "t2"
    assert flagged.to_v2_ext_fields() == SendMessageRequestHeaderV2.from_v1(flagged).to_ext_fields()
    assert flagged.to_v2_ext_fields()["f"] == "7"


class _Seven(enum.Enum):
    SEVEN = 7


class _Text(str):
    pass


# --------------------------------------------------------------------------- validation

_PULL_FIELDS = {
    "consumerGroup": "g1",
    "topic": "TopicTest",
    "queueId": "0",
    "queueOffset": "0",
    "maxMsgNums": "32",
    "sysFlag": "2",
    "commitOffset": "0",
    "suspendTimeoutMillis": "15000",
    "subVersion": "1795311640686",
}


@pytest.mark.parametrize("missing", sorted(k for k in _PULL_FIELDS))
def test_missing_required_field_names_it(missing: str) -> None:
    fields = {key: value for key, value in _PULL_FIELDS.items() if key != missing}
    with pytest.raises(HeaderFieldError) as info:
        PullMessageRequestHeader.from_ext_fields(fields)
    assert info.value.field == missing
    assert str(info.value) == f"{missing}: missing"


def test_missing_v2_field_mentions_its_meaning() -> None:
    with pytest.raises(HeaderFieldError, match=r"^e: missing \(queueId\)$") as info:
        SendMessageRequestHeaderV2.from_ext_fields({"a": "g", "b": "t", "c": "TBW102", "d": "4"})
    assert info.value.field == "e"


@pytest.mark.parametrize("bad", ["abc", "", " ", "1.5", "1e3", "1_000", "0x10", "\uff19", "--1", "true"])
def test_non_integer_values_are_rejected(bad: str) -> None:
    fields = {**_PULL_FIELDS, "queueOffset": bad}
    with pytest.raises(HeaderFieldError) as info:
        PullMessageRequestHeader.from_ext_fields(fields)
    assert info.value.field == "queueOffset"
    assert str(info.value) == f"queueOffset: {bad!r} is not an integer"


def test_integer_ranges() -> None:
    fields = {**_PULL_FIELDS, "queueId": "2147483648"}
    with pytest.raises(HeaderFieldError, match=r"^queueId: 2147483648 is out of range for a 32-bit integer$"):
        PullMessageRequestHeader.from_ext_fields(fields)
    fields = {**_PULL_FIELDS, "queueOffset": str(2**63)}
    with pytest.raises(HeaderFieldError, match="64-bit"):
        PullMessageRequestHeader.from_ext_fields(fields)
    fields = {**_PULL_FIELDS, "queueId": "-2147483648", "queueOffset": str(2**63 - 1), "commitOffset": "-1"}
    header = PullMessageRequestHeader.from_ext_fields(fields)
    assert (header.queue_id, header.queue_offset, header.commit_offset) == (-(2**31), 2**63 - 1, -1)


@pytest.mark.parametrize(("text", "value"), [("-1", -1), ("+5", 5), (" 7 ", 7), ("007", 7), ("0", 0)])
def test_lenient_integer_forms(text: str, value: int) -> None:
    header = UpdateConsumerOffsetRequestHeader.from_ext_fields(
        {"consumerGroup": "g", "topic": "t", "queueId": "1", "commitOffset": text}
    )
    assert header.commit_offset == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("false", False),
        ("0", False),
        ("1", False),
        ("", False),
    ],
)
def test_booleans_parse_like_java(text: str, value: bool) -> None:
    fields = {**_PULL_FIELDS, "producerGroup": "g", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4"}
    fields |= {"bornTimestamp": "1", "flag": "0", "unitMode": text}
    assert SendMessageRequestHeader.from_ext_fields(fields).unit_mode is value


def test_unknown_ext_fields_are_ignored() -> None:
    fields = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x=", "topic": "t", "consumerGroup": "g"}
    header = QueryConsumerOffsetRequestHeader.from_ext_fields({**fields, "queueId": "3"})
    assert header == QueryConsumerOffsetRequestHeader(consumer_group="g", topic="t", queue_id=3)


def test_non_string_values_are_accepted_like_the_frame_decoder_would_stringify_them() -> None:
    fields: dict[str, Any] = {"consumerGroup": "g", "topic": "t", "queueId": 3}
    assert QueryConsumerOffsetRequestHeader.from_ext_fields(fields).queue_id == 3


_ODD_VALUES = ["-3", "2147483648", "9223372036854775807", "9223372036854775808", " 5", "TRUE", "x", "",
               "\uff10"]  # a full-width digit is not ASCII
# mostly what producers write, so the one-step path is taken often; sometimes anything else
_V2_VALUES = st.one_of(st.none(), st.sampled_from(["0", "7", "2147483647", "1700000000000", "true", "false", "pg"] * 4
                                                  + _ODD_VALUES))


_PLAIN = {"d": "4", "e": "3", "f": "0", "h": "0", "g": "1700000000000"}
_NONE: dict[str, str | None] = dict.fromkeys("abcdefghijklm")


@settings(max_examples=600)
@example(fields=_NONE, plain=_PLAIN, use_plain=True)
@example(fields=_NONE, plain={**_PLAIN, "g": "9223372036854775807"}, use_plain=True)
@example(fields=_NONE, plain={**_PLAIN, "g": "9223372036854775808"}, use_plain=True)
@example(fields=_NONE, plain={**_PLAIN, "e": "2147483648"}, use_plain=True)
@example(fields={**_NONE, "j": "2147483647", "l": "2147483648"}, plain=_PLAIN, use_plain=True)
@example(fields={**_NONE, "j": "2147483648"}, plain=_PLAIN, use_plain=True)
@example(fields={**_NONE, "k": "true", "m": "false", "i": "A\x01b"}, plain=_PLAIN, use_plain=True)
@example(fields={**_NONE, "k": "TRUE"}, plain=_PLAIN, use_plain=True)
@given(fields=st.fixed_dictionaries({name: _V2_VALUES for name in "abcdefghijklm"}),
       plain=st.fixed_dictionaries({**{name: st.sampled_from(["0", "7", "2147483647"]) for name in "defh"},
                                    "g": st.sampled_from(["1700000000000", "9223372036854775807",
                                                          "9223372036854775808"])}),
       use_plain=st.booleans())
def test_plain_v2_send_headers_decode_as_the_generic_parser_does(fields: dict[str, str | None],
                                                                  plain: dict[str, str], use_plain: bool) -> None:
    """SEND_MESSAGE_V2 headers take a one-step path when plainly written; the result (or the error) is the
    generic parser's for every input."""
    ext_fields = {name: value for name, value in fields.items() if value is not None}
    if use_plain:  # the required integers plainly written: the one-step path decides on the rest
        ext_fields.update(plain, a="pg", b="T", c="TBW102")
    command = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields)
    try:
        expected: object = SendMessageRequestHeaderV2.from_ext_fields(ext_fields).to_v1()
    except HeaderFieldError as exc:
        expected = str(exc)
    try:
        got: object = decode_send_header(command)
    except HeaderFieldError as exc:
        got = str(exc)
    assert got == expected


def test_a_producers_v2_send_header_decodes_to_its_v1_form() -> None:
    header = SendMessageRequestHeader(producer_group="pg", topic="T", default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=3, sys_flag=0,
                                      born_timestamp=1_700_000_000_000, flag=0, properties="UNIQ_KEY\x01A",
                                      reconsume_times=2, max_reconsume_times=5, batch=True)
    fields = SendMessageRequestHeaderV2.from_v1(header).to_ext_fields()
    assert decode_send_header(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields)) == header


# --------------------------------------------------------------------------- the generated parsers and encoders

_REFERENCE_INTEGER = re.compile(r"[+-]?[0-9]+")
_REFERENCE_BITS = {FieldKind.INT: 32, FieldKind.LONG: 64}


def _reference_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _reference_parse(cls: type[CommandHeader], fields: dict[str, Any]) -> CommandHeader:
    """The parsing rules of the module docstring, restated one field at a time without any fast path."""
    values: dict[str, object] = {}
    for spec in cls.header_fields():
        meaning = f" ({spec.meaning})" if spec.meaning else ""
        raw = fields.get(spec.wire)
        if raw is None:
            if spec.required:
                raise HeaderFieldError(spec.wire, f"missing{meaning}")
            continue
        text = raw if isinstance(raw, str) else _reference_text(raw)
        if spec.kind is FieldKind.STRING:
            values[spec.attr] = text
        elif spec.kind is FieldKind.BOOL:
            values[spec.attr] = text.lower() == "true"
        else:
            stripped = text.strip()
            if not _REFERENCE_INTEGER.fullmatch(stripped):
                raise HeaderFieldError(spec.wire, f"{text!r} is not an integer{meaning}")
            bits = _REFERENCE_BITS[spec.kind]
            number = int(stripped)
            if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
                raise HeaderFieldError(spec.wire, f"{stripped} is out of range for a {bits}-bit integer{meaning}")
            values[spec.attr] = number
    return cls(**values)


_ANY_WIRE_VALUE = st.one_of(
    st.none(),
    st.sampled_from(["0", "7", "32", "2147483647", "2147483648", "-1", "+5", " 7 ", "5_0", "\u0663", "007",
                     "999999999", "1000000000", "9223372036854775807", "9223372036854775808",
                     "999999999999999999", "1000000000000000000", "true", "false", "TRUE", "yes", "", "pg"]),
    st.text(max_size=8),
    st.integers(min_value=-(1 << 64), max_value=1 << 64),
    st.booleans(),
)


@settings(max_examples=40)
@pytest.mark.parametrize("cls", ALL_HEADER_CLASSES, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_generated_parsers_follow_the_reference_rules(cls: type[CommandHeader], data: st.DataObject) -> None:
    """Each class's generated parser gives the reference's header, or its error, for plain and odd values alike."""
    fields = {spec.wire: data.draw(_ANY_WIRE_VALUE, label=spec.wire) for spec in cls.header_fields()}
    fields = {wire: value for wire, value in fields.items() if value is not None}
    try:
        expected: object = _reference_parse(cls, fields)
    except HeaderFieldError as exc:
        expected = str(exc)
    try:
        got: object = cls.from_ext_fields(fields)
    except HeaderFieldError as exc:
        got = str(exc)
    assert got == expected


def test_plain_integers_at_the_digit_limits() -> None:
    """The generated fast branch takes integers of fewer digits than the limit; longer ones get the range check."""
    header = PullMessageRequestHeader.from_ext_fields({
        "consumerGroup": "g", "topic": "t", "queueId": "999999999", "queueOffset": "999999999999999999",
        "maxMsgNums": "2147483647", "sysFlag": "0", "commitOffset": "9223372036854775807",
        "suspendTimeoutMillis": "0", "subVersion": "0"})
    assert (header.queue_id, header.queue_offset, header.max_msg_nums, header.commit_offset) == (
        999_999_999, 999_999_999_999_999_999, 2_147_483_647, 9_223_372_036_854_775_807)
    with pytest.raises(HeaderFieldError, match="out of range for a 32-bit"):
        PullMessageRequestHeader.from_ext_fields({
            "consumerGroup": "g", "topic": "t", "queueId": "2147483648", "queueOffset": "0", "maxMsgNums": "1",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"})


@settings(max_examples=40)
@pytest.mark.parametrize("cls", ALL_HEADER_CLASSES, ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_generated_encoders_write_what_the_reference_writes(cls: type[CommandHeader], data: st.DataObject) -> None:
    values = {}
    for spec in cls.header_fields():
        if spec.kind is FieldKind.STRING:
            strategy = st.one_of(st.none(), st.text(max_size=6))
        elif spec.kind is FieldKind.BOOL:
            strategy = st.one_of(st.none(), st.booleans())
        else:
            strategy = st.one_of(st.none(), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
        values[spec.attr] = data.draw(strategy, label=spec.attr)
    header = cls(**values)
    expected = {spec.wire: _reference_text(getattr(header, spec.attr)) for spec in cls.header_fields()
                if getattr(header, spec.attr) is not None}
    encoded = header.to_ext_fields()
    assert encoded == expected
    assert list(encoded) == list(expected)  # Java writes the fields in declaration order

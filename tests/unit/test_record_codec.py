"""The record codec, batch bodies (SEND_BATCH_MESSAGE, code 320) and the system flags."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import random
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketflow.protocol.codec import (
    BLANK_MAGIC_CODE,
    COMMIT_LOG_OFFSET_POSITION,
    MAGIC_CODE,
    QUEUE_OFFSET_POSITION,
    RECORD_FIXED_SIZE_V4,
    RECORD_FIXED_SIZE_V6,
    SYS_FLAG_POSITION,
    RecordDecodeError,
    RecordEncodeError,
    UndecodableRecord,
    body_crc,
    compress_body,
    decode_batch_body,
    decode_record,
    decode_records,
    decompress_body,
    encode_batch_body,
    encode_record,
    encode_record_fields,
    has_zlib_header,
    pack_host,
    peek_record,
    record_size,
)
from rocketflow.protocol.ids import create_offset_msg_id
from rocketflow.protocol.message import Message, MessageConst, MessageExt
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.sysflag import (
    MessageSysFlag,
    PullSysFlag,
    build_pull_sys_flag,
    clear_commit_offset_flag,
    clear_compressed_flag,
    reset_transaction_value,
    transaction_value,
)
from rocketflow.remoting.errors import ProtocolError

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
hosts = st.tuples(
    st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str), st.integers(0, 65535)
)
topics = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda topic: len(topic.encode()) <= 127
)
property_keys = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=10
)
property_values = st.text(
    st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1, max_size=30
)
property_maps = st.dictionaries(property_keys, property_values, max_size=6)


def is_v6(host: tuple[str, int]) -> bool:
    return ipaddress.ip_address(host[0]).version == 6


def expected_sys_flag(msg: MessageExt) -> int:
    flag = msg.sys_flag & ~0x30
    if is_v6(msg.born_host):
        flag |= 0x10
    if is_v6(msg.store_host):
        flag |= 0x20
    return flag


@st.composite
def stored_messages(draw: st.DrawFn) -> tuple[MessageExt, bytes]:
    """A message as the store holds it, and its raw (uncompressed) body."""
    raw_body = draw(st.binary(max_size=300))
    compressed = draw(st.booleans())
    sys_flag = draw(st.integers(0, 0xFFFF)) & ~0x1
    body = compress_body(raw_body) if compressed else raw_body
    msg = MessageExt(
        draw(topics),
        body,
        flag=draw(INT32),
        properties=draw(property_maps),
        queue_id=draw(INT32),
        queue_offset=draw(INT64),
        commit_log_offset=draw(st.integers(0, (1 << 63) - 1)),
        sys_flag=sys_flag | (0x1 if compressed else 0),
        born_timestamp=draw(INT64),
        born_host=draw(hosts),
        store_timestamp=draw(INT64),
        store_host=draw(hosts),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
    )
    return msg, raw_body


def simple_message(**overrides: object) -> MessageExt:
    fields: dict[str, object] = {
        "flag": 7,
        "properties": {"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "7F0000010B2A1B2C3D4E5F6071820001"},
        "queue_id": 3,
        "queue_offset": 42,
        "commit_log_offset": 4096,
        "born_timestamp": 1_700_000_000_000,
        "born_host": ("10.0.0.9", 53211),
        "store_timestamp": 1_700_000_000_005,
        "store_host": ("127.0.0.1", 10911),
        "reconsume_times": 1,
        "prepared_transaction_offset": 0,
    }
    fields.update(overrides)
    body = fields.pop("body", b"hello world")
    assert isinstance(body, bytes)
    return MessageExt("TopicTest", body, **fields)  # type: ignore[arg-type]


def hand_built_record(
    *,
    topic: bytes,
    body: bytes,
    props: bytes,
    born: tuple[bytes, int],
    store: tuple[bytes, int],
    sys_flag: int,
    commit_log_offset: int = 4096,
    total_size: int | None = None,
) -> bytes:
    """The record layout written out field by field, independently of the codec."""
    fields = [
        struct.pack(">i", MAGIC_CODE),
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
        struct.pack(">i", 3),  # queue id
        struct.pack(">i", 7),  # flag
        struct.pack(">q", 42),  # queue offset
        struct.pack(">q", commit_log_offset),
        struct.pack(">i", sys_flag),
        struct.pack(">q", 1_700_000_000_000),
        born[0] + struct.pack(">i", born[1]),
        struct.pack(">q", 1_700_000_000_005),
        store[0] + struct.pack(">i", store[1]),
        struct.pack(">i", 1),  # reconsume times
        struct.pack(">q", 0),  # prepared transaction offset
        struct.pack(">i", len(body)) + body,
        struct.pack(">b", len(topic)) + topic,
        struct.pack(">h", len(props)) + props,
    ]
    content = b"".join(fields)
    size = len(content) + 4 if total_size is None else total_size
    return struct.pack(">i", size) + content


# --------------------------------------------------------------------------- flags


def test_message_sys_flag_values() -> None:
    assert MessageSysFlag.COMPRESSED == 0x1
    assert MessageSysFlag.MULTI_TAGS == 0x2
    assert MessageSysFlag.TRANSACTION_PREPARED == 0x4
    assert MessageSysFlag.TRANSACTION_COMMIT == 0x8
    assert MessageSysFlag.TRANSACTION_ROLLBACK == 0xC
    assert MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6 == 48
    assert transaction_value(0x1 | 0x4 | 0x30) == 0x4
    assert transaction_value(0xC | 0x2) == 0xC
    assert transaction_value(0x33) == 0
    assert reset_transaction_value(0x1 | 0x4 | 0x100, 0x8) == 0x1 | 0x8 | 0x100
    assert clear_compressed_flag(0x1 | 0x100 | 0x30) == 0x130


def test_pull_sys_flag() -> None:
    assert PullSysFlag.COMMIT_OFFSET == 1
    assert PullSysFlag.SUSPEND == 2
    assert PullSysFlag.SUBSCRIPTION == 4
    assert PullSysFlag.CLASS_FILTER == 8
    assert PullSysFlag.LITE_PULL == 16
    assert build_pull_sys_flag(False, True, False, False) == 2
    assert build_pull_sys_flag(True, True, False, False) == 3
    assert build_pull_sys_flag(True, True, True, True) == 15
    assert build_pull_sys_flag(False, False, False, False, lite_pull=True) == 16
    assert type(build_pull_sys_flag(True, True, False, False)) is int
    assert clear_commit_offset_flag(3 | 0x40) == 2 | 0x40
    bits = (PullSysFlag.COMMIT_OFFSET, PullSysFlag.SUSPEND, PullSysFlag.SUBSCRIPTION, PullSysFlag.CLASS_FILTER,
            PullSysFlag.LITE_PULL)
    for value in range(32):
        options = [bool(value & bit) for bit in bits]
        assert build_pull_sys_flag(*options[:4], lite_pull=options[4]) == value


# --------------------------------------------------------------------------- layout and known values


def test_magic_codes() -> None:
    assert MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194


def test_ipv4_record_size_is_91_plus_variable_parts() -> None:
    msg = simple_message()
    record = encode_record(msg)
    props = encode_properties(msg.properties).encode()
    assert RECORD_FIXED_SIZE_V4 == 91
    assert len(record) == 91 + len(msg.body) + len("TopicTest") + len(props)
    assert len(record) == record_size(len(msg.body), len("TopicTest"), len(props))
    assert peek_record(record) == (len(record), MAGIC_CODE)


def test_ipv6_record_sizes() -> None:
    assert RECORD_FIXED_SIZE_V6 == 115
    assert record_size(10, 5, 0, born_v6=True) == 91 + 12 + 15
    assert record_size(10, 5, 0, born_v6=True, store_v6=True) == 115 + 15
    msg = simple_message(born_host=("::1", 5), store_host=("fe80::2", 10911), properties={})
    record = encode_record(msg)
    assert len(record) == record_size(len(msg.body), 9, 0, born_v6=True, store_v6=True)


def test_encode_matches_the_spec_layout() -> None:
    msg = simple_message()
    expected = hand_built_record(
        topic=b"TopicTest",
        body=b"hello world",
        props=encode_properties(msg.properties).encode(),
        born=(bytes([10, 0, 0, 9]), 53211),
        store=(bytes([127, 0, 0, 1]), 10911),
        sys_flag=0,
    )
    assert encode_record(msg) == expected


def test_decode_hand_built_ipv6_record() -> None:
    born_ip = ipaddress.ip_address("2001:db8::1").packed
    store_ip = ipaddress.ip_address("::1").packed
    record = hand_built_record(
        topic="Tópico".encode(),
        body=b"payload",
        props=b"TAGS\x01TagA\x02KEYS\x01a b",
        born=(born_ip, 40000),
        store=(store_ip, 10911),
        sys_flag=0x30 | 0x2,
        commit_log_offset=0x1122,
    )
    msg, end = decode_record(record)
    assert end == len(record)
    assert msg.topic == "Tópico"
    assert msg.body == b"payload"
    assert msg.properties == {"TAGS": "TagA", "KEYS": "a b"}
    assert msg.tags == "TagA"
    assert msg.key_list == ["a", "b"]
    assert msg.born_host == ("2001:db8::1", 40000)
    assert msg.store_host == ("::1", 10911)
    assert msg.sys_flag == 0x32
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (3, 7, 42, 0x1122)
    assert (msg.born_timestamp, msg.store_timestamp) == (1_700_000_000_000, 1_700_000_000_005)
    assert (msg.reconsume_times, msg.prepared_transaction_offset) == (1, 0)
    assert msg.msg_id == create_offset_msg_id("::1", 10911, 0x1122)
    assert msg.store_size == len(record)
    assert msg.body_crc == zlib.crc32(b"payload") & 0x7FFFFFFF


def test_field_positions() -> None:
    record = encode_record(simple_message(queue_offset=0x0102030405060708, commit_log_offset=0x0A0B0C0D))
    assert record[QUEUE_OFFSET_POSITION:QUEUE_OFFSET_POSITION + 8] == bytes.fromhex("0102030405060708")
    commit_log_offset = record[COMMIT_LOG_OFFSET_POSITION:COMMIT_LOG_OFFSET_POSITION + 8]
    assert commit_log_offset == bytes.fromhex("000000000A0B0C0D")
    assert record[SYS_FLAG_POSITION:SYS_FLAG_POSITION + 4] == b"\x00\x00\x00\x00"


def test_known_offset_msg_id_of_a_decoded_record() -> None:
    msg, _ = decode_record(encode_record(simple_message(commit_log_offset=0)))
    assert msg.msg_id == "7F00000100002A9F0000000000000000"
    assert msg.offset_msg_id == msg.msg_id
    assert msg.client_msg_id == "7F0000010B2A1B2C3D4E5F6071820001"


def test_decoded_message_has_every_slot_set() -> None:
    msg, _ = decode_record(encode_record(simple_message()))
    slots = {name for cls in type(msg).__mro__ for name in getattr(cls, "__slots__", ())}
    built = simple_message()
    for name in slots:
        assert hasattr(msg, name), name
        if name not in ("_msg_id", "store_size", "body_crc"):
            assert getattr(msg, name) == getattr(built, name), name
    assert msg.broker_name == ""


def test_v6_bits_follow_the_hosts() -> None:
    # Bits claimed without IPv6 hosts are cleared; IPv6 hosts set them.
    record = encode_record(simple_message(sys_flag=0x30 | 0x4))
    assert decode_record(record)[0].sys_flag == 0x4
    record = encode_record(simple_message(store_host=("::1", 10911)))
    assert decode_record(record)[0].sys_flag == 0x20
    record = encode_record(simple_message(born_host=("::1", 1)))
    assert decode_record(record)[0].sys_flag == 0x10


def test_encode_record_fields_fast_path() -> None:
    record = encode_record_fields(
        topic=b"T",
        body=b"abc",
        properties=b"",
        queue_id=0,
        flag=0,
        queue_offset=0,
        commit_log_offset=0,
        sys_flag=0,
        born_timestamp=0,
        born_host=pack_host("1.2.3.4", 5),
        store_timestamp=0,
        store_host=pack_host("::1", 6),
        reconsume_times=0,
        prepared_transaction_offset=0,
        body_crc=body_crc(b"abc"),
    )
    assert len(record) == record_size(3, 1, 0, store_v6=True)
    msg, _ = decode_record(record, verify_crc=True)
    assert msg.sys_flag == 0x20
    assert msg.born_host == ("1.2.3.4", 5)
    assert msg.store_host == ("::1", 6)


# --------------------------------------------------------------------------- round trips


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(stored_messages())
def test_record_round_trip(drawn: tuple[MessageExt, bytes]) -> None:
    msg, raw_body = drawn
    record = encode_record(msg)
    props_len = len(encode_properties(msg.properties).encode())
    assert len(record) == record_size(
        len(msg.body), len(msg.topic.encode()), props_len, is_v6(msg.born_host), is_v6(msg.store_host)
    )

    # Stored form: identical fields, and re-encoding gives identical bytes.
    stored, end = decode_record(record, decompress=False, verify_crc=True)
    assert end == len(record)
    msg.sys_flag = expected_sys_flag(msg)
    assert stored == msg
    assert encode_record(stored) == record
    assert stored.msg_id == create_offset_msg_id(*msg.store_host, msg.commit_log_offset)
    assert stored.store_size == len(record)
    assert stored.body_crc == body_crc(msg.body)

    # Client form: the body is inflated and the flag says so.
    inflated, _ = decode_record(record)
    assert inflated.body == raw_body
    assert inflated.sys_flag == msg.sys_flag & ~0x1
    assert inflated.body_crc == stored.body_crc

    # Without body, from other buffer types and at an offset.
    bare, _ = decode_record(memoryview(b"pad" + record), 3, with_body=False)
    assert bare.body == b""
    assert bare.properties == msg.properties
    assert decode_record(bytearray(record))[0] == inflated


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(), max_size=6))
def test_decode_records_of_a_pull_body(drawn: list[tuple[MessageExt, bytes]]) -> None:
    body = b"".join(encode_record(msg) for msg, _ in drawn)
    decoded = decode_records(body)
    assert [msg.body for msg in decoded] == [raw for _, raw in drawn]
    assert [msg.topic for msg in decoded] == [msg.topic for msg, _ in drawn]
    assert [msg.properties for msg in decoded] == [msg.properties for msg, _ in drawn]
    stored = decode_records(memoryview(body), decompress=False)
    assert b"".join(encode_record(msg) for msg in stored) == body


def _one_by_one(body: bytes) -> list[MessageExt]:
    messages, pos = [], 0
    while pos < len(body):
        msg, pos = decode_record(body, pos)
        messages.append(msg)
    return messages


def _fields(msg: MessageExt) -> tuple[object, ...]:
    return tuple(getattr(msg, name) for name in ("topic", "body", "flag", "properties", "queue_id", "queue_offset",
                                                 "commit_log_offset", "sys_flag", "born_timestamp", "born_host",
                                                 "store_timestamp", "store_host", "reconsume_times",
                                                 "prepared_transaction_offset", "body_crc", "store_size", "msg_id",
                                                 "broker_name"))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(), min_size=1, max_size=4), st.data())
def test_decode_records_matches_decode_record_one_by_one_even_on_damaged_bodies(
        drawn: list[tuple[MessageExt, bytes]], data: st.DataObject) -> None:
    """The pull-body loop takes the same records, fields and errors as `decode_record` at each position."""
    body = bytearray(b"".join(encode_record(msg) for msg, _ in drawn))
    for _ in range(data.draw(st.integers(0, 3))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del body[data.draw(st.integers(0, len(body) - 1)):]
    try:
        expected: list[MessageExt] | str = _one_by_one(bytes(body))
    except RecordDecodeError as exc:
        expected = str(exc)
    try:
        got: list[MessageExt] | str = decode_records(bytes(body))
    except RecordDecodeError as exc:
        got = str(exc)
    if isinstance(expected, str) or isinstance(got, str):
        assert got == expected
    else:
        assert [_fields(msg) for msg in got] == [_fields(msg) for msg in expected]


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(), min_size=1, max_size=4), st.booleans())
def test_pulled_messages_get_the_pull_properties_whether_read_yet_or_not(
        drawn: list[tuple[MessageExt, bytes]], read_first: bool) -> None:
    """A pull's MIN_OFFSET/MAX_OFFSET and later `put_properties` land the same whether the (lazily decoded)
    properties were read before or not; so do the broker name and the offset id."""
    body = b"".join(encode_record(msg) for msg, _ in drawn)
    extra = ((MessageConst.MIN_OFFSET, "3"), (MessageConst.MAX_OFFSET, "9"))
    decoded = decode_records(body, broker_name="broker-b", extra_properties=extra)
    for msg, (original, _) in zip(decoded, drawn, strict=True):
        if read_first:
            assert msg.properties == {**original.properties, **dict(extra)}
        msg.put_properties(((MessageConst.CONSUME_START_TIMESTAMP, "1"), (MessageConst.MIN_OFFSET, "4")))
        msg.put_properties(((MessageConst.CONSUME_START_TIMESTAMP, "2"),))
        expected = {**original.properties, MessageConst.MIN_OFFSET: "4", MessageConst.MAX_OFFSET: "9",
                    MessageConst.CONSUME_START_TIMESTAMP: "2"}
        # one property at a time: those set after the pull first, read without decoding the record's own
        # (and winning over them), then the record's own
        later = [MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET, MessageConst.CONSUME_START_TIMESTAMP]
        for name in later:
            assert msg.get_property(name) == expected[name]
        for name in [*expected, "ABSENT"]:
            assert msg.get_property(name, "-") == expected.get(name, "-")
        assert msg.properties == expected
        assert msg.get_property(MessageConst.MAX_OFFSET) == "9" and msg.get_property("ABSENT") is None
        assert msg.broker_name == "broker-b"
        assert msg.msg_id == create_offset_msg_id(*original.store_host, original.commit_log_offset)


def test_decode_records_empty() -> None:
    assert decode_records(b"") == []


# --------------------------------------------------------------------------- encode errors


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"properties": {"K": "v\x02"}}, "separator"),
        ({"properties": {"K": "\ud800"}}, "UTF-8"),
        ({"born_host": ("localhost", 1)}, "bad host"),
        ({"store_host": ("127.0.0.1", 70000)}, "bad host"),
        ({"queue_id": 1 << 31}, "out of range"),
        ({"queue_offset": 1 << 63}, "out of range"),
    ],
)
def test_encode_record_errors(overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(RecordEncodeError, match=fragment):
        encode_record(simple_message(**overrides))


def test_encode_record_topic_and_properties_limits() -> None:
    ok = MessageExt("t" * 127)
    assert decode_record(encode_record(ok))[0].topic == "t" * 127
    with pytest.raises(RecordEncodeError, match="topic is 128 bytes"):
        encode_record(MessageExt("é" * 64))
    with pytest.raises(RecordEncodeError, match="UTF-8"):
        encode_record(MessageExt("\udc00"))
    with pytest.raises(RecordEncodeError, match="properties are 32768 bytes"):
        encode_record(MessageExt("T", properties={"K": "v" * (32768 - 2)}))
    largest = encode_record(MessageExt("T", properties={"K": "v" * (32767 - 2)}))
    assert len(largest) == record_size(0, 1, 32767)


def test_encode_record_fields_rejects_bad_hosts() -> None:
    with pytest.raises(RecordEncodeError, match="born host must be 8 or 20"):
        encode_record_fields(
            topic=b"T", body=b"", properties=b"", queue_id=0, flag=0, queue_offset=0,
            commit_log_offset=0, sys_flag=0, born_timestamp=0, born_host=b"\x00" * 6, store_timestamp=0,
            store_host=pack_host("127.0.0.1", 1), reconsume_times=0, prepared_transaction_offset=0,
            body_crc=0,
        )


# --------------------------------------------------------------------------- decode errors


def valid_record() -> bytes:
    return encode_record(simple_message())


def test_decode_short_buffers() -> None:
    record = valid_record()
    for cut in (0, 7, 39, 40, 87, len(record) - 1):
        with pytest.raises(RecordDecodeError, match="truncated"):
            decode_record(record[:cut])
        with pytest.raises(RecordDecodeError, match="truncated"):
            decode_record(memoryview(record[:cut]))


def test_decode_bad_positions() -> None:
    record = valid_record()
    with pytest.raises(RecordDecodeError, match="outside the buffer"):
        decode_record(record, -1)
    with pytest.raises(RecordDecodeError, match="outside the buffer"):
        decode_record(record, len(record) + 5)
    with pytest.raises(RecordDecodeError):
        peek_record(record, len(record) - 4)


def test_decode_bad_magic_and_blank() -> None:
    record = bytearray(valid_record())
    record[4:8] = b"\x00\x00\x00\x01"
    with pytest.raises(RecordDecodeError, match="bad magic code 0x00000001"):
        decode_record(bytes(record))
    blank = struct.pack(">ii", 1000, BLANK_MAGIC_CODE)
    assert peek_record(blank) == (1000, BLANK_MAGIC_CODE)
    with pytest.raises(RecordDecodeError, match="blank end-of-file marker"):
        decode_record(blank)
    with pytest.raises(RecordDecodeError, match="blank end-of-file marker"):
        decode_record(blank + bytes(200))


def test_decode_inconsistent_lengths() -> None:
    msg = simple_message()
    body_len_position = 88 - 4
    record = bytearray(encode_record(msg))
    record[body_len_position:body_len_position + 4] = struct.pack(">i", 5000)
    with pytest.raises(RecordDecodeError, match="body length 5000"):
        decode_record(bytes(record))
    record[body_len_position:body_len_position + 4] = struct.pack(">i", -1)
    with pytest.raises(RecordDecodeError, match="body length -1"):
        decode_record(bytes(record))
    # A declared size larger than the record's content.
    longer = encode_record(msg) + b"\x00" * 4
    longer = struct.pack(">i", len(longer)) + longer[4:]
    with pytest.raises(RecordDecodeError, match="properties end"):
        decode_record(longer)
    with pytest.raises(RecordDecodeError, match="below the minimum"):
        decode_record(struct.pack(">ii", 10, MAGIC_CODE) + bytes(100))


def test_decode_negative_i8_topic_and_i16_properties_lengths() -> None:
    record = hand_built_record(
        topic=b"T", body=b"", props=b"", born=(bytes(4), 0), store=(bytes(4), 0), sys_flag=0
    )
    topic_len_position = 88
    negative_topic = record[:topic_len_position] + b"\xff" + record[topic_len_position + 1:]
    with pytest.raises(RecordDecodeError, match="topic length 255"):
        decode_record(negative_topic)
    # An i16 property length of 0x8000 (negative in Java), even with that many bytes present.
    props = b"K\x01" + b"v" * (0x8000 - 2)
    header_part = hand_built_record(
        topic=b"T", body=b"", props=b"", born=(bytes(4), 0), store=(bytes(4), 0), sys_flag=0
    )[4:-2]
    content = header_part + b"\x80\x00" + props
    with pytest.raises(RecordDecodeError, match="negative as an i16"):
        decode_record(struct.pack(">i", len(content) + 4) + content)


def test_decode_bad_utf8_topic() -> None:
    record = hand_built_record(
        topic=b"\xff\xfe", body=b"", props=b"", born=(bytes(4), 0), store=(bytes(4), 0), sys_flag=0
    )
    with pytest.raises(RecordDecodeError, match="not valid UTF-8"):
        decode_record(record)


def test_decode_crc_mismatch() -> None:
    record = bytearray(valid_record())
    record[88] ^= 0xFF  # first body byte
    decode_record(bytes(record))  # not checked by default
    with pytest.raises(RecordDecodeError, match="body CRC"):
        decode_record(bytes(record), verify_crc=True)


def test_decode_bad_compressed_body() -> None:
    record = encode_record(simple_message(sys_flag=0x1))  # "compressed" but plain text
    assert decode_record(record, decompress=False)[0].body == b"hello world"
    assert decode_record(record, with_body=False)[0].body == b""
    with pytest.raises(RecordDecodeError, match="zlib"):
        decode_record(record)
    truncated = compress_body(b"x" * 1000)[:-3]
    with pytest.raises(RecordDecodeError):
        decode_record(encode_record(simple_message(sys_flag=0x1, body=truncated)))


def test_decode_records_reports_the_failing_position() -> None:
    record = valid_record()
    with pytest.raises(RecordDecodeError, match=f"position {len(record)}"):
        decode_records(record + record[:50])


def test_undecodable_records_are_handed_over_and_the_others_decoded() -> None:
    """A record whose frame is sound but whose content is not (not zlib, properties or topic not UTF-8,
    lengths inside it that do not add up) goes to the list; decoding goes on after it."""
    good = [encode_record(simple_message(queue_offset=offset)) for offset in (0, 2, 4, 6)]
    not_zlib = encode_record(simple_message(queue_offset=1, sys_flag=0x1, body=b"not zlib",
                                            properties={"KEYS": "bad1"}))
    latin = bytearray(encode_record(simple_message(queue_offset=3, properties={"KEYS": "café"})))
    latin[latin.index("é".encode())] = 0xE9
    lengths = bytearray(encode_record(simple_message(queue_offset=5, body=b"0123456789")))
    struct.pack_into(">i", lengths, RECORD_FIXED_SIZE_V4 - 7, 4)  # body length 4 of 10
    data = b"".join((good[0], not_zlib, good[1], bytes(latin), good[2], bytes(lengths), good[3]))
    with pytest.raises(RecordDecodeError, match="zlib"):
        decode_records(data)
    bad: list[UndecodableRecord] = []
    messages = decode_records(data, broker_name="broker-b", undecodable=bad)
    assert [msg.queue_offset for msg in messages] == [0, 2, 4, 6]
    assert [record.queue_offset for record in bad] == [1, 3, 5]
    first, second, third = bad
    assert "zlib" in first.reason and first.message.body == b"not zlib" and first.message.keys == "bad1"
    assert first.message.sys_flag & 0x1 and first.record == not_zlib and first.message.broker_name == "broker-b"
    assert first.message.msg_id == create_offset_msg_id("127.0.0.1", 10911, 4096)
    assert "UTF-8" in second.reason and second.message.properties == {} and second.message.topic == "TopicTest"
    assert not second.reason.startswith("record at position")
    assert third.message.body == bytes(lengths) and third.message.store_size == len(lengths)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(), min_size=1, max_size=4), st.data())
def test_lenient_decoding_of_damaged_bodies_loses_no_record_it_could_frame(
        drawn: list[tuple[MessageExt, bytes]], data: st.DataObject) -> None:
    """Where strict decoding succeeds the lenient one gives the same; where it fails, the lenient one
    raises only `RecordDecodeError`, or accounts for every byte: decoded and undecodable records tile the body."""
    body = bytearray(b"".join(encode_record(msg) for msg, _ in drawn))
    for _ in range(data.draw(st.integers(0, 3))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        strict: list[MessageExt] | None = decode_records(bytes(body))
    except RecordDecodeError:
        strict = None
    bad: list[UndecodableRecord] = []
    try:
        lenient = decode_records(bytes(body), undecodable=bad)
    except RecordDecodeError:
        assert strict is None
        return
    if strict is not None:
        assert [_fields(msg) for msg in lenient] == [_fields(msg) for msg in strict] and not bad
    assert sum(msg.store_size for msg in lenient) + sum(len(record.record) for record in bad) == len(body)


def test_bytes_that_cannot_be_split_into_records_still_raise() -> None:
    record = valid_record()
    for data in (record + record[:50], record + b"\x00" * 8 + record, record[:-1]):
        with pytest.raises(RecordDecodeError):
            decode_records(data, undecodable=[])


def test_the_zlib_header_check_takes_every_zlib_stream_and_refuses_what_cannot_be_one() -> None:
    for level in range(-1, 10):
        for body in (b"", b"x" * 5000, bytes(range(256))):
            assert has_zlib_header(zlib.compress(body, level))
    for wbits in range(9, 16):
        assert has_zlib_header(zlib.compressobj(6, zlib.DEFLATED, wbits).compress(b"abc") + b"\x00" * 8)
    deflated = zlib.compress(b"payload")
    assert not has_zlib_header(deflated[:7])                          # shorter than any complete stream
    assert not has_zlib_header(b"this was never deflated")
    assert not has_zlib_header(zlib.compressobj(6, zlib.DEFLATED, -15).compress(b"abc" * 9) + b"\x00" * 8)  # raw
    assert not has_zlib_header(zlib.compressobj(6, zlib.DEFLATED, 31).compress(b"abc") + b"\x00" * 8)  # gzip
    assert not has_zlib_header(b"\x78\x20" + deflated[2:])         # asks for a preset dictionary
    assert not has_zlib_header(b"\x78\x9d" + deflated[2:])         # bad check value


def test_record_decode_error_is_a_protocol_error() -> None:
    assert issubclass(RecordDecodeError, ProtocolError)
    assert issubclass(RecordEncodeError, ValueError)


# --------------------------------------------------------------------------- compression


def test_compression_round_trip_and_java_compatibility() -> None:
    body = b"abc" * 2000
    compressed = compress_body(body)
    assert compressed[:1] == b"\x78"  # zlib header, as Java's Deflater writes
    assert decompress_body(compressed) == body
    assert zlib.decompress(compressed) == body
    assert decompress_body(zlib.compress(body, 9)) == body
    with pytest.raises(ValueError, match="level"):
        compress_body(body, 12)


def test_decompress_errors() -> None:
    with pytest.raises(RecordDecodeError, match="not valid zlib"):
        decompress_body(b"not zlib at all")
    with pytest.raises(RecordDecodeError, match="truncated"):
        decompress_body(compress_body(b"y" * 5000)[:10])
    with pytest.raises(RecordDecodeError, match="more than 100 bytes"):
        decompress_body(compress_body(b"z" * 5000), max_size=100)
    assert decompress_body(compress_body(b"z" * 100), max_size=100) == b"z" * 100


# --------------------------------------------------------------------------- batch bodies


def test_batch_body_layout() -> None:
    messages = [Message("T", b"ab", flag=5, properties={"UNIQ_KEY": "X"}), Message("T", b"")]
    body = encode_batch_body(messages)
    props = b"UNIQ_KEY\x01X"
    first = struct.pack(">iiiii", 22 + 2 + len(props), 0, 0, 5, 2) + b"ab"
    first += struct.pack(">h", len(props)) + props
    second = struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", 0)
    assert body == first + second
    assert decode_batch_body(body, "T") == messages


@settings(max_examples=200)
@given(st.lists(st.tuples(st.binary(max_size=200), INT32, property_maps), max_size=8), topics)
def test_batch_round_trip(items: list[tuple[bytes, int, dict[str, str]]], topic: str) -> None:
    messages = [Message(topic, body, flag=flag, properties=props) for body, flag, props in items]
    assert decode_batch_body(encode_batch_body(messages), topic) == messages
    assert decode_batch_body(memoryview(encode_batch_body(messages)), topic) == messages


def test_batch_encode_errors() -> None:
    with pytest.raises(RecordEncodeError, match="one topic"):
        encode_batch_body([Message("A"), Message("B")])
    with pytest.raises(RecordEncodeError, match="batch message 1"):
        encode_batch_body([Message("A"), Message("A", properties={"K\x02": "v"})])
    with pytest.raises(RecordEncodeError, match="flag"):
        encode_batch_body([Message("A", flag=1 << 40)])
    assert encode_batch_body([]) == b""


def test_batch_decode_errors() -> None:
    body = encode_batch_body([Message("T", b"abc", properties={"K": "v"})])
    with pytest.raises(RecordDecodeError, match="truncated"):
        decode_batch_body(body[:10], "T")
    with pytest.raises(RecordDecodeError, match="exceeds the batch"):
        decode_batch_body(body[:-1], "T")
    wrong_size = struct.pack(">i", 999) + body[4:]
    with pytest.raises(RecordDecodeError, match="declared size 999"):
        decode_batch_body(wrong_size, "T")
    bad_utf8 = body[:-1] + b"\xff"
    with pytest.raises(RecordDecodeError, match="UTF-8"):
        decode_batch_body(bad_utf8, "T")
    assert decode_batch_body(b"", "T") == []


# --------------------------------------------------------------------------- fuzzing


def only_record_errors(call: object) -> None:
    assert callable(call)
    with contextlib.suppress(RecordDecodeError):
        call()


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=300), st.integers(-5, 310))
def test_fuzz_random_bytes(data: bytes, pos: int) -> None:
    only_record_errors(lambda: decode_record(data, pos, verify_crc=True))
    only_record_errors(lambda: decode_record(memoryview(data), pos))
    only_record_errors(lambda: decode_records(data))
    only_record_errors(lambda: decode_batch_body(data, "T"))
    only_record_errors(lambda: decompress_body(data))
    if len(data) >= 8:
        peek_record(data)


def sample_records() -> list[bytes]:
    """A fixed pool of valid records to mutate (drawing fresh messages per example is slow)."""
    big_props = {f"K{index}": "v" * index for index in range(40)}
    variants = [
        simple_message(),
        simple_message(properties={}),
        simple_message(body=b""),
        simple_message(body=compress_body(b"compressed " * 50), sys_flag=0x1),
        simple_message(born_host=("2001:db8::7", 1), store_host=("::1", 10911)),
        simple_message(store_host=("fe80::1", 2), properties=big_props),
        simple_message(born_host=("::ffff:10.0.0.1", 3), body=bytes(range(256))),
    ]
    return [encode_record(msg) for msg in variants]


SAMPLE_RECORDS = sample_records()


@st.composite
def mutated_records(draw: st.DrawFn) -> bytes:
    record = bytearray(b"".join(draw(st.lists(st.sampled_from(SAMPLE_RECORDS), min_size=1, max_size=2))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "int", "truncate", "extend"]))
        if kind == "flip" and record:
            index = draw(st.integers(0, len(record) - 1))
            record[index] ^= draw(st.integers(1, 255))
        elif kind == "int" and len(record) >= 4:
            index = draw(st.integers(0, len(record) - 4))
            record[index:index + 4] = struct.pack(">i", draw(INT32))
        elif kind == "truncate":
            del record[draw(st.integers(0, len(record))):]
        else:
            record += draw(st.binary(min_size=1, max_size=20))
    return bytes(record)


@settings(max_examples=2000, deadline=None)
@given(mutated_records())
def test_fuzz_mutated_records(record: bytes) -> None:
    only_record_errors(lambda: decode_record(record, verify_crc=True))
    only_record_errors(lambda: decode_record(bytearray(record), with_body=False))
    only_record_errors(lambda: decode_records(record))
    only_record_errors(lambda: decode_records(record, decompress=False))


MUTATIONS_PER_SEED = 20_000


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_many_seeded_mutations(seed: int) -> None:
    """Cheaper than hypothesis per example, so many more mutations (reproducible by seed)."""
    rng = random.Random(seed)
    decoded = 0
    for _ in range(MUTATIONS_PER_SEED):
        record = bytearray(rng.choice(SAMPLE_RECORDS))
        for _ in range(rng.randint(1, 3)):
            index = rng.randrange(len(record))
            if rng.random() < 0.7:
                record[index] ^= 1 << rng.randrange(8)
            else:
                del record[index:]
                if not record:
                    break
        data = bytes(record)
        try:
            decode_record(data, verify_crc=rng.random() < 0.5)
            decoded += 1
        except RecordDecodeError:
            pass
        only_record_errors(functools.partial(decode_records, data))
    assert 0 < decoded < MUTATIONS_PER_SEED  # both outcomes occur: the mutations reach past the first checks


SAMPLE_BATCHES = [
    encode_batch_body([Message("T", b"abc", properties={"UNIQ_KEY": "A", "KEYS": "x y"}), Message("T", b"")]),
    encode_batch_body([Message("T", bytes(range(60)), flag=3)]),
]


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    body = bytearray(draw(st.sampled_from(SAMPLE_BATCHES)))
    index = draw(st.integers(0, len(body) - 1))
    body[index] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):
        del body[draw(st.integers(0, len(body))):]
    return bytes(body)


@settings(max_examples=1000, deadline=None)
@given(mutated_batches())
def test_fuzz_mutated_batches(body: bytes) -> None:
    only_record_errors(lambda: decode_batch_body(body, "T"))


def test_decoded_topic_cache_does_not_mask_errors() -> None:
    hosts = {"born": (bytes(4), 0), "store": (bytes(4), 0)}
    good = hand_built_record(topic=b"Topic", body=b"", props=b"", sys_flag=0, **hosts)
    assert decode_record(good)[0].topic == "Topic"
    bad = hand_built_record(topic=b"Topi\xc3", body=b"", props=b"", sys_flag=0, **hosts)
    with pytest.raises(RecordDecodeError):
        decode_record(bad)

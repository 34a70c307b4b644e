"""The record writer: its packers write what the reference writer writes, and the reader reads it back."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketflow.protocol.ids import pack_host
from rocketflow.protocol.record_layout import (
    BLANK_MAGIC_CODE,
    HEAD_FIELDS,
    RECORD_FIXED_SIZE_V4,
    RECORD_FIXED_SIZE_V6,
    RECORD_HEADS,
    SIZE_AND_MAGIC,
    field_position,
    hosts_variant,
)
from rocketflow.protocol.record_reader import decode_record
from rocketflow.protocol.record_writer import (
    ONE_SIZE_RECORD_FIELDS,
    blank_record,
    body_crc,
    encode_record_fields,
    one_size_records_packer,
    record_head,
    record_packer,
    record_size,
    topic_part,
)

hosts = st.sampled_from([("10.0.0.1", 5000), ("192.168.1.20", 10911), ("::1", 7), ("2001:db8::5", 65535)])
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
topics = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=40)
properties = st.dictionaries(st.text("ABCKEYSTAGUNIQ_", min_size=1, max_size=8), st.text("xyz 019", min_size=1,
                                                                                         max_size=12), max_size=4)


def _props(values: dict[str, str]) -> bytes:
    return "".join(f"{key}\x01{value}\x02" for key, value in values.items()).encode()


records = st.fixed_dictionaries({
    "topic": topics.map(str.encode),
    "body": st.binary(max_size=300),
    "properties": properties.map(_props),
    "queue_id": int32,
    "flag": int32,
    "queue_offset": int64,
    "commit_log_offset": int64,
    "sys_flag": st.integers(0, 0xFF),
    "born_timestamp": int64,
    "born_host": hosts.map(lambda host: pack_host(*host)),
    "store_timestamp": int64,
    "store_host": hosts.map(lambda host: pack_host(*host)),
    "reconsume_times": int32,
    "prepared_transaction_offset": int64,
})


def _reference(fields: dict[str, Any]) -> bytes:
    return encode_record_fields(**fields, body_crc=body_crc(fields["body"]))


def _head_values(fields: dict[str, Any], sys_flag: int, size: int) -> tuple[Any, ...]:
    return (size, -626843481, body_crc(fields["body"]), fields["queue_id"], fields["flag"], fields["queue_offset"],
            fields["commit_log_offset"], sys_flag, fields["born_timestamp"], fields["born_host"],
            fields["store_timestamp"], fields["store_host"], fields["reconsume_times"],
            fields["prepared_transaction_offset"], len(fields["body"]))


@settings(max_examples=200)
@given(fields=records)
def test_the_record_packer_writes_the_reference_bytes(fields: dict[str, Any]) -> None:
    head, sys_flag = record_head(fields["born_host"], fields["store_host"], fields["sys_flag"])
    part = topic_part(fields["topic"].decode())
    props = fields["properties"]
    size = head.size + len(fields["body"]) + len(part) + 2 + len(props)
    packed = record_packer(head, len(fields["body"]), len(part), len(props)).pack(
        *_head_values(fields, sys_flag, size), fields["body"], part, len(props), props)
    assert packed == _reference(fields)
    assert len(packed) == record_size(len(fields["body"]), len(fields["topic"]), len(props),
                                      len(fields["born_host"]) == 20, len(fields["store_host"]) == 20)


@settings(max_examples=100)
@given(fields=records, count=st.integers(1, 12), suffix=st.sampled_from([b"", b"CLUSTER\x01c", b"A\x01b\x02C\x01d"]),
       data=st.data())
def test_the_one_size_packer_writes_the_reference_records(fields: dict[str, Any], count: int, suffix: bytes,
                                                          data: st.DataObject) -> None:
    """A run of same-sized records packed at once: each is the reference record of its own fields, its
    properties its own followed by the suffix."""
    head, sys_flag = record_head(fields["born_host"], fields["store_host"], fields["sys_flag"])
    part = topic_part(fields["topic"].decode())
    body_len, props = len(fields["body"]), fields["properties"]
    bodies = [data.draw(st.binary(min_size=body_len, max_size=body_len)) for _ in range(count)]
    size = head.size + body_len + len(part) + 2 + len(props) + len(suffix)
    values: list[Any] = []
    expected = []
    for index, body in enumerate(bodies):
        one = {**fields, "body": body, "queue_offset": index, "commit_log_offset": 1000 + index * size}
        values += [*_head_values(one, sys_flag, size), body, part, len(props) + len(suffix), props, suffix]
        expected.append(_reference({**one, "properties": props + suffix}))
    assert len(values) == ONE_SIZE_RECORD_FIELDS * count
    packer = one_size_records_packer(head, body_len, len(part), len(props), len(suffix), count)
    assert packer.pack(*values) == b"".join(expected)


@settings(max_examples=200)
@given(fields=records)
def test_a_written_record_reads_back(fields: dict[str, Any]) -> None:
    record = _reference(fields)
    msg, end = decode_record(record, decompress=False, verify_crc=True)
    assert end == len(record) == msg.store_size
    assert msg.topic.encode() == fields["topic"] and msg.body == fields["body"]
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (
        fields["queue_id"], fields["flag"], fields["queue_offset"], fields["commit_log_offset"])
    assert (msg.born_timestamp, msg.store_timestamp, msg.reconsume_times, msg.prepared_transaction_offset) == (
        fields["born_timestamp"], fields["store_timestamp"], fields["reconsume_times"],
        fields["prepared_transaction_offset"])
    assert pack_host(*msg.born_host) == fields["born_host"] and pack_host(*msg.store_host) == fields["store_host"]
    # the IPv6 bits follow the hosts, the other bits are kept
    assert msg.sys_flag & ~0x30 == fields["sys_flag"] & ~0x30
    assert hosts_variant(msg.sys_flag) == (len(fields["born_host"]) == 20) | (len(fields["store_host"]) == 20) << 1
    assert msg.body_crc == body_crc(fields["body"])


def test_the_layout_tables_agree_with_each_other() -> None:
    assert [name for name, _ in HEAD_FIELDS][-1] == "body_len"
    assert RECORD_HEADS[0].size == field_position("body_len") + 4
    assert RECORD_HEADS[3].size == field_position("body_len", True, True) + 4
    assert (RECORD_FIXED_SIZE_V4, RECORD_FIXED_SIZE_V6) == (91, 115)
    assert field_position("store_timestamp", born_v6=True) - field_position("store_timestamp") == 12
    assert blank_record(4096) == SIZE_AND_MAGIC.pack(4096, BLANK_MAGIC_CODE) == struct.pack(">ii", 4096,
                                                                                                BLANK_MAGIC_CODE)
